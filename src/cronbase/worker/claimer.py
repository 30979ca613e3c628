"""The claimer orders a worker's claim kinds (``claim_kind.py``): the fair claim of fair_key tasks,
the flow claim of limited jobs, the plain claim, each owning its statement, parameters and
pacing. It works out the free slots (per queue with per-queue concurrency), lends the kinds its
kept connection, and lends those whose statement can write them the completer's waiting
successes. The worker's loop asks it for jobs and runs them.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from .claim import ClaimedJob, claimable_names
from .claim_connection import KeptConnection
from .claim_kind import Ask, ClaimKind, Turn
from .fair_claim import FairKind, fair_tasks
from .flow_claim import FlowKind
from .hand_back import hand_back, release_orphans
from .outcomes import undecodable
from .plain_claim import PlainKind

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from ..db.database import Database
    from ..task import Task
    from .completer import Completer


class Claimer:
    """Claims jobs for one worker: ``await claim(running)`` leases what fits in its free slots."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        db: Database,
        worker_id: str,
        tasks: Mapping[str, Task[Any, Any]],
        completer: Completer,
        *,
        concurrency: int,
        queues: list[str] | None,
        queue_caps: dict[str, int] | None,
        refresh_every: float,
        recheck_fair_every: float,
    ) -> None:
        self._pool = pool
        self._db = db
        self._worker_id = worker_id
        self._completer = completer
        self._concurrency = concurrency
        self._queues = queues
        self._queue_caps = queue_caps
        names = claimable_names({n: t.defaults.version for n, t in tasks.items()})
        fair = fair_tasks(tasks)
        fair_only = bool(fair) and len(fair) == len(tasks)
        # In the order they claim: fair jobs first (their keys share the slots), then limited
        # ones, then the rest (the plain claim also carries successes for a fair-only worker).
        self._plain = PlainKind(db, worker_id, names, claims=not fair_only)
        flow = FlowKind(db, worker_id, tasks, names, serves=queues, fair_only=fair_only)
        kinds: list[ClaimKind] = [flow, self._plain]
        if fair:
            kinds.insert(0, FairKind(db, worker_id, tasks, every=recheck_fair_every))
        self.kinds = tuple(kinds)
        self._refresh_every = refresh_every
        self._refresh_at = 0.0
        # When to claim again though nothing woke the worker (None: on the usual wake-ups).
        self.retry_in: float | None = None
        # Set when a claim failed with its connection: it may have committed unseen.
        self.may_hold_orphans = False
        self._connection = KeptConnection(pool, db.pool_size)
        self.close = self._connection.close

    async def claim(self, running: Collection[ClaimedJob]) -> list[ClaimedJob]:
        """Lease due jobs for the free slots (per queue with per-queue concurrency), writing
        the completer's waiting successes on the way; sorted as they should start."""
        self.retry_in = None
        loop = asyncio.get_running_loop()
        if loop.time() >= self._refresh_at:
            await self.close()  # so the pool can retire it at its max_lifetime
            async with self._connection() as conn:
                for kind in self.kinds:
                    await kind.refresh(conn)
            self._refresh_at = loop.time() + self._refresh_every
        if self._queue_caps is None:
            free = self._concurrency - len(running)
            jobs = await self._round(free, self._queues) if free > 0 else []
        else:
            # A claim per queue with free slots (no prefetch beyond them: graphile-worker's
            # shared prefetch broke its per-queue limits, #621).
            busy = Counter(job.queue for job in running)
            jobs = []
            for queue, cap in self._queue_caps.items():
                if cap > busy[queue]:
                    jobs += await self._round(cap - busy[queue], [queue])
        jobs.sort(key=lambda j: (j.priority, j.id))
        return jobs

    def notified(self) -> None:
        """Jobs were deferred or released in a queue this worker serves (or notifications may
        have been missed): the kinds whose pacing cares look again."""
        for kind in self.kinds:
            kind.notified()

    async def _round(self, limit: int, queues: list[str] | None) -> list[ClaimedJob]:
        """The kinds in order: the leading ones, then those that fill the slots left."""
        now = asyncio.get_running_loop().time()
        scope = tuple(queues) if queues else None
        turns = [(kind, kind.turn(scope, now)) for kind in self.kinds]
        jobs: list[ClaimedJob] = []
        for kind, turn in turns:
            if turn is Turn.LEAD or turn is Turn.CARRY:
                room = limit - len(jobs) if turn is Turn.LEAD else 0
                jobs += await self._take(kind, room, queues)
        for kind, turn in turns:
            if turn is Turn.FILL and len(jobs) < limit:
                jobs += await self._take(kind, limit - len(jobs), queues)
        return jobs

    async def _take(
        self, kind: ClaimKind, limit: int, queues: list[str] | None
    ) -> list[ClaimedJob]:
        """One kind's claim of up to ``limit`` jobs (0: only the waiting successes, if it
        carries them), on the kept connection."""
        if limit > 0 and kind.wants_written(self._completer.pending_jobs):
            await self._take(self._plain, 0, queues)
        if not kind.carries:
            if limit <= 0:
                return []
            async with self._connection() as conn:
                taken = await kind.claim(conn, Ask(limit, queues))
        else:
            with self._completer.carrying() as carried:
                if limit <= 0 and not carried.outcomes:
                    return []
                async with self._connection() as conn:
                    taken = await kind.claim(conn, Ask(limit, queues, carried.jobs))
                carried.written = taken.result.written_ids
        for bad in taken.result.undecodable:
            # Its own outcome, written like any other; its batch-mates run on.
            self._completer.add(undecodable(bad))
        if taken.retry_in is not None:
            # The soonest stands: a fair claim's 0 (claim again at once) over a rate's window.
            soon = taken.retry_in
            self.retry_in = soon if self.retry_in is None else min(soon, self.retry_in)
        return taken.result.jobs

    async def release_orphans(self, held: list[ClaimedJob]) -> None:
        """Hand back jobs leased to this worker by a claim whose reply was lost (all running
        jobs leased to it but ``held``)."""
        if await release_orphans(self._pool, self._db, self._worker_id, held):
            self.may_hold_orphans = False

    async def hand_back(self, jobs: list[ClaimedJob], reason: str) -> bool:
        """Queue ``jobs`` again now, attempt not counted (``hand_back.py``)."""
        return await hand_back(self._pool, self._db, self._worker_id, jobs, reason)
