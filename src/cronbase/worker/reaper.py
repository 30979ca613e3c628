"""Lease expiry: jobs whose worker stopped renewing (killed, frozen, cut off) become claimable
again, or dead when their attempts are used up. Every worker reaps (``SKIP LOCKED``: none waits for
another), every ``reap_interval``; database time decides what has expired.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from .health import FailureLog

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from ..db.database import Database

logger = logging.getLogger("cronbase")

REAP_BATCH = 1000


class Reaper:
    def __init__(self, pool: AsyncConnectionPool, db: Database, interval: float) -> None:
        self._pool = pool
        self._db = db
        self._interval = interval

    async def reap_once(self) -> None:
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                self._db.queries.reap_expired_jobs,
                {"limit": REAP_BATCH, "channel": self._db.channel},
            )
            for job_id, status in await cur.fetchall():
                logger.warning("job %d: lease expired (worker gone?); now %s", job_id, status)

    async def run(self) -> None:
        failures = FailureLog("reaping expired leases")
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.reap_once()
            except Exception as exc:  # the claim's own errors say what is wrong; retry later
                failures.failed(exc)
            else:
                failures.succeeded()
