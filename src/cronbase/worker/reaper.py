"""Lease expiry: jobs whose worker stopped renewing (killed, frozen, cut off) become claimable
again, or dead when their attempts are used up. Every worker reaps (``SKIP LOCKED``: none waits for
another), every ``reap_interval``; database time decides what has expired.

The same round ages the waiting jobs of queues with priority aging (``app.queues.set_aging``;
``age_priorities`` in ``db/sql/jobs.sql`` says the rule): a statement that finds no aging queue
reads one small table and writes nothing. And it keeps the tickets (``db/sql/tickets.sql``):
the worker's parked jobs made ready again, what every claim has passed deleted.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..db.database import JIT_OFF
from ..db.health import FailureLog
from ..db.queries import lock_key

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import AsyncConnectionPool

    from ..db.database import Database

logger = logging.getLogger("cronbase")

REAP_BATCH = 1000
# Between full rounds a reaper looks at the leases that ran out in the last few rounds only (see
# reap_expired_jobs); one round in FULL_EVERY walks them all, for a lease a round missed (its row
# was locked then: SKIP LOCKED) or that ran out while no worker reaped.
RECENT_ROUNDS = 3
FULL_EVERY = 60
# Jobs aged a round at most: bounded row locks and writes however long an aging queue's backlog;
# those due longest go first, the rest in the next rounds.
AGE_BATCH = 1000


class Reaper:
    def __init__(
        self,
        pool: AsyncConnectionPool,
        db: Database,
        interval: float,
        tasks: list[str] | None = None,
    ) -> None:
        self._pool = pool
        self._db = db
        self._interval = interval
        # The worker's tasks as claims name them: its parked jobs are made ready each round.
        self._tasks = tasks
        self._rounds = 0
        # Where the last clearing of tickets and ticks stopped (clear_tickets): the next one
        # starts there, not at what it deleted before (kept, and walked, while the horizon is).
        self._cleared = (0, 0)

    async def reap_once(self) -> None:
        q = self._db.queries
        full = self._rounds % FULL_EVERY == 0
        self._rounds += 1
        window = timedelta(seconds=RECENT_ROUNDS * self._interval)
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                q.reap_expired_jobs if full else q.reap_recently_expired_jobs,
                {"limit": REAP_BATCH, "channel": self._db.channel, "window": window},
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
            if self._tasks is not None:
                await conn.execute(self._db.queries.unpark_jobs, {"tasks": self._tasks})
            await self.clear_tickets(conn)

    async def clear_tickets(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Delete the tickets, cursor rows and ticks no claim reads again (one worker a round)."""
        since, ticks_since = self._cleared
        cur = await conn.execute(
            self._db.queries.clear_tickets,
            {"key": lock_key(self._db.schema, "clear"), "since": since, "ticks_since": ticks_since},
        )
        row = await cur.fetchone()
        if row is not None and row[1] is not None:
            self._cleared = (row[1], row[2] if row[2] is not None else ticks_since)

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
