"""``app.events.emit(key, payload)``: wake the jobs waiting for an event (``wait_for``).

The first emission of a key is kept (later ones change nothing), so a handler waiting for
``invoice_paid:812`` gets it once, whether it was emitted before, during or after the wait
began. An emission takes the event key's advisory lock for its transaction (see
``lock_event_keys`` in db/sql/workflows.sql): a worker suspending a job on the same key either
sees the event or is seen by the emission. Inside a caller's transaction
(``connection=``), the event exists, and wakes its waiters, only if that transaction commits.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from ..checks import check_key
from ..db.connections import async_connection, sync_connection
from ..errors import EventError
from ..payload.encode import encode_value

if TYPE_CHECKING:
    import psycopg

    from ..db.connections import CallerConnection
    from ..db.database import Database
    from ..hooks import Hooks


def _params(db: Database, key: str, payload: Any) -> dict[str, Any]:
    if not isinstance(key, str) or not key:
        raise EventError(f"an event needs a key (a non-empty string), got {key!r}")
    check_key("event key", key)
    text = encode_value(
        f"event {key!r}: its payload", payload, db.max_payload_bytes, EventError, "for an event"
    )
    return {"key": key, "payload": text, "schema": db.schema, "channel": db.channel}


class Events:
    """``app.events``: emit (and get) the events handlers wait for."""

    def __init__(self, db: Database, hooks: Hooks | None = None) -> None:
        self.db = db
        # In inline mode (cronbase.testing.inline) the interceptor takes the event instead.
        self.hooks = hooks

    def emit(
        self, key: str, payload: Any = None, *, connection: CallerConnection | None = None
    ) -> bool:
        """Record the event ``key`` and wake the jobs waiting for it; False when it had been
        emitted already (the first payload stays)."""
        params = _params(self.db, key, payload)
        interceptor = None if self.hooks is None else self.hooks.interceptor
        if interceptor is not None:
            return interceptor.emit(key, payload)
        q = self.db.queries
        if connection is not None:
            conn: psycopg.Connection[Any] = sync_connection(connection)
            # In the caller's transaction (begun by this statement if none was open), which
            # the caller commits; an autocommit connection gets one of its own.
            with conn.transaction() if conn.autocommit else contextlib.nullcontext():
                conn.execute(q.lock_event_key, params)
                row = conn.execute(q.emit_event, params).fetchone()
        else:
            with self.db.pool().connection() as conn, conn.transaction():
                conn.execute(q.lock_event_key, params)
                row = conn.execute(q.emit_event, params).fetchone()
        assert row is not None
        return bool(row[0])

    async def emit_async(
        self, key: str, payload: Any = None, *, connection: CallerConnection | None = None
    ) -> bool:
        params = _params(self.db, key, payload)
        interceptor = None if self.hooks is None else self.hooks.interceptor
        if interceptor is not None:
            return await interceptor.emit_async(key, payload)
        q = self.db.queries
        if connection is not None:
            caller: psycopg.AsyncConnection[Any] = await async_connection(connection)
            async with caller.transaction() if caller.autocommit else contextlib.nullcontext():
                await caller.execute(q.lock_event_key, params)
                row = await (await caller.execute(q.emit_event, params)).fetchone()
        else:
            pool = await self.db.async_pool()
            async with pool.connection() as conn, conn.transaction():
                await conn.execute(q.lock_event_key, params)
                row = await (await conn.execute(q.emit_event, params)).fetchone()
        assert row is not None
        return bool(row[0])

    def get(self, key: str) -> dict[str, Any] | None:
        """The event ``key`` (key, payload, emitted_at), or None when it was not emitted."""
        return self.db.fetch_one(self.db.queries.get_event, {"key": key})
