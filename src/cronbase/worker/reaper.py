"""Lease expiry: jobs whose worker stopped renewing (killed, frozen, cut off) become claimable
again, or dead when their attempts are used up. Every worker reaps (``SKIP LOCKED``: none waits for
another), every ``reap_interval``; database time decides what has expired.

The same round ages the waiting jobs of queues with priority aging (``app.queues.set_aging``;
``age_priorities`` in ``db/sql/jobs.sql`` says the rule): a statement that finds no aging queue
reads one small table and writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ..db.database import JIT_OFF
from ..db.health import FailureLog

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from ..db.database import Database

logger = logging.getLogger("cronbase")

REAP_BATCH = 1000
# Jobs aged a round at most: bounded row locks and writes however long an aging queue's backlog;
# those due longest go first, the rest in the next rounds.
AGE_BATCH = 1000


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
            # JIT off: the planner costs a seq scan of jobs per aging queue it cannot count
            # (queues has no statistics), passes jit_above_cost, and PostgreSQL compiled the
            # statement every round for milliseconds, also when no queue was due and it read
            # nothing. SET LOCAL: in a transaction, so through a transaction pooler too.
            async with conn.transaction():
                await conn.execute(JIT_OFF)
                cur = await conn.execute(self._db.queries.age_priorities, {"limit": AGE_BATCH})
            if aged := cur.rowcount:
                logger.debug("priority aging: %d waiting jobs moved up", aged)

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
