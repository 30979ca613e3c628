"""Lease renewal: one fenced statement renews every lease a worker holds and stores progress.

A lease is renewed every third of the shortest lease held, so two renewals can be lost before it
expires; the worker says when it claims jobs, so a short lease is renewed in time even when the
worker was idle. Progress reports make a renewal come sooner (at most every PROGRESS_INTERVAL),
so a dashboard sees them within a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..db.health import FailureLog
from .claim import ClaimedJob

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from ..db.queries import Queries

logger = logging.getLogger("cronbase")

PROGRESS_INTERVAL = 0.5  # seconds between progress writes, at most
IDLE_INTERVAL = timedelta(seconds=10)  # how often an idle worker says it is alive


def _json(value: list[dict[str, Any]] | None) -> str | None:
    return None if value is None else json.dumps(value)


class Heartbeater:
    """Renews leases of ``held()`` jobs; calls ``on_lost(job)`` for each lease found lost."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        queries: Queries,
        worker_id: str,
        held: Callable[[], list[ClaimedJob]],
        on_lost: Callable[[ClaimedJob], None],
        on_renewed: Callable[[int], None] = lambda count: None,
        overruns: Callable[[], list[dict[str, Any]] | None] = lambda: None,
        renewing: Callable[[list[ClaimedJob]], AbstractContextManager[None]] = (
            lambda jobs: contextlib.nullcontext()
        ),
    ) -> None:
        # Keeps the worker's other statements off the rows a renewal updates (Completer).
        self._renewing = renewing
        self._on_renewed = on_renewed
        # Handlers running past their timeout, stored with the worker's row (the Workers page).
        self._overruns = overruns
        self._pool = pool
        self._queries = queries
        self._worker_id = worker_id
        self._held = held
        self._on_lost = on_lost
        # Set when jobs were claimed or progress reported: the next beat may be due sooner.
        self._changed = asyncio.Event()
        self._has_progress = False
        # The shortest lease the next beat is planned for (interval()).
        self._planned_for = IDLE_INTERVAL * 3
        # Held by a beat from its snapshot to its statement's end, and by held_back().
        self._beating = asyncio.Lock()
        self.beats = 0

    def progress_changed(self) -> None:
        """Call from the event loop's thread when a job reports progress."""
        self._has_progress = True
        self._changed.set()

    def jobs_changed(self, claimed: Sequence[ClaimedJob] = ()) -> None:
        """Call from the event loop's thread when jobs were ``claimed``, or with no argument
        when the beat should be worked out again for another reason (a timeout)."""
        # Claimed jobs whose leases are no shorter than the one the next beat is planned for
        # are renewed in time by it: no wake-up (that would be a turn of the loop per claim).
        if claimed and min(j.lease for j in claimed) >= self._planned_for:
            return
        self._changed.set()

    def interval(self, jobs: list[ClaimedJob]) -> float:
        """Seconds between beats: a third of the shortest lease of ``jobs`` (idle: a third of
        IDLE_INTERVAL x 3). Remembers that lease, for jobs_changed."""
        shortest = self._planned_for = min((j.lease for j in jobs), default=IDLE_INTERVAL * 3)
        return max(shortest.total_seconds() / 3, 0.05)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        failures = FailureLog("renewing leases")
        last_beat = loop.time()
        while True:
            self._changed.clear()
            due = last_beat + self.interval(self._held())
            if self._has_progress:
                # Soon, but at most every PROGRESS_INTERVAL however often handlers report.
                due = min(due, last_beat + PROGRESS_INTERVAL)
            if loop.time() < due:
                try:
                    async with asyncio.timeout_at(due):
                        await self._changed.wait()
                    continue  # claims or progress: work out again when the beat is due
                except TimeoutError:
                    pass
            self._has_progress = False
            try:
                await self.beat()
                failures.succeeded()
            except Exception as exc:
                # Never let renewal stop for good: every lease held would expire and its job
                # run a second time elsewhere while this worker still runs it. Logged once per
                # run of failures; the next beat is the retry.
                failures.failed(exc)
            last_beat = loop.time()

    @contextlib.asynccontextmanager
    async def held_back(self, wait: float) -> AsyncIterator[None]:
        """No renewal meanwhile (one in flight ends first), for a statement of the worker that
        takes the rows a renewal updates (the hand-back at shutdown): two such statements, each
        taking the rows in its own order, can deadlock. The next beat's snapshot is taken after,
        so it leaves out what the statement ended. A renewal still running after ``wait``
        seconds (its connection cut off, say) is not waited for: better beside it than never."""
        try:
            async with asyncio.timeout(wait):
                await self._beating.acquire()
        except TimeoutError:
            yield
            return
        try:
            yield
        finally:
            self._beating.release()

    async def beat(self) -> None:
        async with self._beating:
            await self._beat()

    async def _beat(self) -> None:
        jobs = self._held()
        ids, tokens, progress, stages = [], [], [], []
        for job in jobs:
            ids.append(job.id)
            tokens.append(job.lease_token)
            context = getattr(job, "context", None)
            percent, stage = context.progress if context is not None else (None, None)
            progress.append(percent)
            # PostgreSQL text cannot hold NUL; one such stage would fail every renewal.
            stages.append(stage.replace("\x00", "") if stage is not None else None)
        with self._renewing(jobs):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    self._queries.heartbeat_jobs,
                    {
                        "ids": ids,
                        "tokens": tokens,
                        "progress": progress,
                        "stages": stages,
                        "worker": self._worker_id,
                        "overruns": _json(self._overruns()),
                    },
                )
                renewed = {token for _, token in await cur.fetchall()}
        self.beats += 1
        self._on_renewed(len(renewed))
        for job in jobs:
            if job.lease_token not in renewed:
                self._on_lost(job)
