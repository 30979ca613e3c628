"""cronbase's Database for a Django project: inside ``transaction.atomic()`` its sync statements
(``app.jobs.get``, ``.list``, ``.attempts``, ``.retry``, ``app.audit.record``...) run on Django's
own connection, in that transaction, as the ORM's would; outside one, on cronbase's pool as usual.

So a job enqueued in a transaction is seen by reads in the same transaction (``get_result`` right
after ``enqueue``; ``cronbase.testing.enqueued`` in a ``TestCase``, whose test is one transaction),
and an admin action commits or rolls back with the request under ``ATOMIC_REQUESTS``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.rows import dict_row

from ...db.database import Database, Params, Row
from ...db.pool import read_json_tolerantly

ConnectionSource = Callable[[], "psycopg.Connection[Any] | None"]


class DjangoDatabase(Database):
    """A :class:`Database` whose sync ``fetch_all`` (and so ``fetch_one``) goes through
    ``source()``, Django's connection while an atomic block is open on it in this thread.

    Async calls keep cronbase's async pool: Django's transactions are the sync ORM's."""

    def __init__(self, source: ConnectionSource, **settings: Any) -> None:
        super().__init__(**settings)
        self.source = source

    @classmethod
    def beside(
        cls, db: Database, source: ConnectionSource, url: str | None = None
    ) -> DjangoDatabase:
        """``db``'s settings (on ``url`` when given), its statements through ``source`` in a
        Django transaction."""
        return cls(source, **settings_of(db, url))

    def fetch_all(self, query: bytes, params: Params = None) -> list[Row]:
        conn = self.source()
        if conn is None:
            return super().fetch_all(query, params)
        with conn.cursor(row_factory=dict_row) as cur:
            # Django's connection loads jsonb as text (its JSONField decodes it): this cursor's
            # own adapters (a copy of the connection's) load it as cronbase's pool does.
            read_json_tolerantly(cur)
            cur.execute(query, params)
            return self.opened(cur.fetchall()) if cur.description else []


def settings_of(db: Database, url: str | None = None) -> dict[str, Any]:
    """The keyword arguments that build a Database like ``db`` (not an embedded one), on ``url``
    when given. Every setting is given: Database would otherwise read CRONBASE_LISTEN_URL and
    CRONBASE_POOLER from the environment, which may name another database."""
    return {
        "url": db.url if url is None else url,
        "schema": db.schema,
        "listen_url": db.listen_url,
        "pooler": db.pooler,
        "pool_size": db.pool_size,
        "max_payload_bytes": db.max_payload_bytes,
        "max_result_bytes": db.max_result_bytes,
        "json_dumps": db.json_dumps,
        "json_loads": db.json_loads,
        "encryption_keys": db.encryption_keys or db.keys,
        "encrypt": db.encrypt,
    }
