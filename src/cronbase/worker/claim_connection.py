"""The connection a worker's claims run on, kept from one claim to the next."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from ..db.pool import has_news

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import AsyncConnectionPool

# The claimer keeps a connection of its own between claims when the pool has at least this
# many: the others stay for the completer, the heartbeat, the reaper and the scheduler.
KEEP_CONNECTION_FROM = 3


class KeptConnection:
    """Not taken from the pool and given back each claim: the pool's check and bookkeeping cost
    a claim loop at concurrency 10 ~8% of its rate (bench/README.md). Given back when a
    statement on it fails (the pool then decides whether it is still good), when the server
    said something while it idled (a restart's goodbye), at every refresh (so the pool can
    retire it at its max_lifetime), and by :meth:`close`. A pool of fewer than
    KEEP_CONNECTION_FROM connections lends one per claim."""

    def __init__(self, pool: AsyncConnectionPool, pool_size: int) -> None:
        self._pool = pool
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._keep = pool_size >= KEEP_CONNECTION_FROM

    @contextlib.asynccontextmanager
    async def __call__(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        conn = self._conn
        if conn is not None and has_news(conn):
            # Closed first, so the pool discards it and opens another (its check would find it
            # dead only on a later getconn, after a backoff).
            await conn.close()
            await self.close()
            conn = None
        if conn is None:
            if not self._keep:
                async with self._pool.connection() as conn:
                    yield conn
                return
            conn = self._conn = await self._pool.getconn()
        try:
            yield conn
        except BaseException:
            self._conn = None
            await self._pool.putconn(conn)
            raise

    async def close(self) -> None:
        """Give the kept connection back to the pool (a stopping worker, a refresh)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._pool.putconn(conn)
