"""Test databases: a throwaway, migrated schema on the user's test server, and an App pointed at
it for the length of a block (what the ``cronbase_*`` pytest fixtures are made of)."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from ..db import migrate, pool
from ..db.database import Database
from ..errors import ConfigurationError
from ..payload.sealing import new_key

if TYPE_CHECKING:
    from ..app import App

SCHEMA_PREFIX = "cronbase_test_"
# How long the drop at the end waits for a lock that a connection the test left open holds.
DROP_LOCK_TIMEOUT = "10s"


def create_schema(url: str) -> str:
    """Create and migrate a schema named ``cronbase_test_<random>`` on ``url``; its name.
    The role needs CREATE on the database."""
    schema = f"{SCHEMA_PREFIX}{secrets.token_hex(4)}"
    with pool.connect(url, application_name="cronbase-test") as conn:
        migrate.apply_migrations(conn, schema)
    return schema


def drop_schema(url: str, schema: str) -> None:
    """Drop ``schema`` and everything in it; ConfigurationError when a lock keeps it."""
    with pool.connect(url, application_name="cronbase-test") as conn:
        conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(DROP_LOCK_TIMEOUT)))
        try:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        except psycopg.errors.LockNotAvailable:
            raise ConfigurationError(
                f"cannot drop test schema {schema!r}: a connection the test opened still holds a "
                f"lock on it after {DROP_LOCK_TIMEOUT}; commit or close it before the test ends"
            ) from None


@contextlib.contextmanager
def throwaway_schema(url: str) -> Iterator[str]:
    """A new migrated schema on ``url`` (:func:`create_schema`) for the block, dropped after."""
    schema = create_schema(url)
    try:
        yield schema
    finally:
        drop_schema(url, schema)


def _test_database(app: App, url: str, schema: str) -> Database:
    old = app.db
    # The App's own payload settings; the connection settings are the test database's, never
    # the environment's (CRONBASE_LISTEN_URL, CRONBASE_POOLER may name production).
    return Database(
        url,
        schema=schema,
        listen_url=url,
        pooler="session",
        pool_size=old.pool_size,
        max_payload_bytes=old.max_payload_bytes,
        json_dumps=old.json_dumps,
        json_loads=old.json_loads,
        max_result_bytes=old.max_result_bytes,
        # The App's keys; with none, a key of the test's own, so encrypted tasks seal and open
        # on the test database as they do in production.
        encryption_keys=old.encryption_keys or old.keys or f"test={new_key()}",
        encrypt=old.encrypt,
    )


@contextlib.contextmanager
def _swapped(app: App, db: Database) -> Iterator[App]:
    """``app`` (its tasks and services) on ``db`` inside the block; its own database back after
    (the caller closes ``db``, once the App has left it)."""
    old = app._swap_database(db)
    try:
        yield app
    finally:
        app._swap_database(old)


@contextlib.contextmanager
def use_database(app: App, url: str, schema: str = "cronbase") -> Iterator[App]:
    """Point ``app`` (its tasks, ``app.jobs``...) at ``schema`` on ``url`` inside the block;
    its own database comes back after, untouched. The schema must be migrated.

    ```pycon
    >>> with use_database(shop.app, test_url, schema):  # doctest: +SKIP
    ...     shop.place_order.defer(order_id=7)
    ```

    The block's sync pool is closed at the end; an async pool opened by ``defer_async`` in it
    belongs to that event loop: use :func:`use_database_async` in async code to close it too.
    """
    db = _test_database(app, url, schema)
    with contextlib.closing(db), _swapped(app, db):
        yield app


@contextlib.asynccontextmanager
async def use_database_async(app: App, url: str, schema: str = "cronbase") -> AsyncIterator[App]:
    """The async twin of :func:`use_database`: closes the async pool as well."""
    db = _test_database(app, url, schema)
    async with contextlib.aclosing(db):
        with _swapped(app, db):
            yield app
