"""Lease expiry: jobs whose worker stopped renewing (killed, frozen, cut off) become claimable
again, or dead when their attempts are used up. Every worker reaps (``SKIP LOCKED``: none waits for
another), every ``reap_interval``; database time decides what has expired.

The same round ages the waiting jobs of queues with priority aging (``app.queues.set_aging``;
``age_priorities`` in ``db/sql/jobs.sql`` says the rule): a statement that finds no aging queue
reads one small table and writes nothing. And it keeps the tickets (``db/sql/tickets.sql``):
the worker's parked jobs made ready again, what every claim has passed deleted; and it rolls up
the queues' last minute when its turn comes (``rollup.py``).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..db.database import JIT_OFF
from ..db.health import FailureLog
from ..db.pool import raise_if_cancelled
from ..db.queries import lock_key
from .rollup import QueueRollup

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import AsyncConnectionPool

    from ..db.database import Database

logger = logging.getLogger("cronbase")

REAP_BATCH = 1000
# Between full rounds a reaper walks the leases from where its last round left off: the oldest
# lease that had run out and was still running after it (its row locked by a frozen attempt's
# transaction, which SKIP LOCKED passes; or past the batch), else that round's database time
# (oldest_expired_lease). No lease is passed over however late a round comes, and the walk does
# not start at the first running job (which passes, while a horizon is held, an entry for every
# job run since). One round in FULL_EVERY walks them all anyway.
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
        # Where the next recent round starts (database time); None: a full round first.
        self._since: datetime | None = None
        # Where the last clearing of tickets and ticks stopped (clear_tickets): the next one
        # starts there, not at what it deleted before (kept, and walked, while the horizon is).
        self._cleared = (0, 0)
        self._rollup = QueueRollup(db)

    async def reap_once(self) -> None:
        q = self._db.queries
        full = self._rounds % FULL_EVERY == 0 or self._since is None
        self._rounds += 1
        since = None if full else self._since
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                q.reap_expired_jobs if full else q.reap_recently_expired_jobs,
                {"limit": REAP_BATCH, "channel": self._db.channel, "since": since},
            )
            for job_id, status in await cur.fetchall():
                logger.warning("job %d: lease expired (worker gone?); now %s", job_id, status)
            cur = await conn.execute(q.oldest_expired_lease, {"since": since})
            row = await cur.fetchone()
            self._since = row[0] if row is not None else None
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
            await self._rollup.maybe_roll_up(conn)

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
            raise_if_cancelled()  # a stop that psycopg_pool absorbed mid-round
