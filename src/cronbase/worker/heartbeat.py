"""Lease renewal: one fenced statement renews every lease a worker holds and stores progress.

A lease is renewed every third of the shortest lease held, so two renewals can be lost before it
expires; which leases, the attempts' ledger says (``attempts.py``: never one a statement is
writing). The ledger says when jobs are claimed, so a short lease is renewed in time even when the
worker was idle. Progress reports make a renewal come sooner (at most every PROGRESS_INTERVAL),
so a dashboard sees them within a second. A beat that finds the worker's own row gone (pruned
while the worker was cut off) registers the worker again, with what it registered at start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..db.health import FailureLog
from ..db.pool import raise_if_cancelled
from .attempts import IDLE_LEASE
from .claim import ClaimedJob

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from ..db.queries import Queries
    from ..operations.metrics import WorkerMetrics
    from .attempts import Attempts

logger = logging.getLogger("cronbase")

PROGRESS_INTERVAL = 0.5  # seconds between progress writes, at most


def _json(value: list[dict[str, Any]] | None) -> str | None:
    return None if value is None else json.dumps(value)


class Heartbeater:
    """Renews the leases of the jobs the ledger hands it; tells the ledger of each lease lost."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        queries: Queries,
        worker_id: str,
        ledger: Attempts,
        metrics: WorkerMetrics | None = None,
        *,
        registration: Mapping[str, Any] | None = None,
    ) -> None:
        self._pool = pool
        self._queries = queries
        self._worker_id = worker_id
        self._ledger = ledger
        self._metrics = metrics
        # register_worker's parameters as the worker started (startup.py); None: never again.
        self._registration = registration
        self.beats = 0
        self.registered_again = 0

    def interval(self, jobs: list[ClaimedJob]) -> float:
        """Seconds between beats: a third of the shortest lease of ``jobs`` (idle: a third of
        IDLE_LEASE: an idle worker says it is alive every 10 s). Tells the ledger that lease: a
        claim of a shorter one wakes us."""
        shortest = min((j.lease for j in jobs), default=IDLE_LEASE)
        self._ledger.planned_for = shortest
        return max(shortest.total_seconds() / 3, 0.05)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        ledger = self._ledger
        soon = ledger.renew_soon
        failures = FailureLog("renewing leases")
        last_beat = loop.time()
        while True:
            soon.clear()
            due = last_beat + self.interval(ledger.held())
            if ledger.progress:
                # Soon, but at most every PROGRESS_INTERVAL however often handlers report.
                due = min(due, last_beat + PROGRESS_INTERVAL)
            if loop.time() < due:
                try:
                    async with asyncio.timeout_at(due):
                        await soon.wait()
                    continue  # claims or progress: work out again when the beat is due
                except TimeoutError:
                    pass
            ledger.progress = False
            try:
                await self.beat()
                failures.succeeded()
            except Exception as exc:
                # Never let renewal stop for good: every lease held would expire and its job
                # run a second time elsewhere while this worker still runs it. Logged once per
                # run of failures; the next beat is the retry.
                failures.failed(exc)
            raise_if_cancelled()  # a stop that psycopg_pool absorbed mid-beat
            last_beat = loop.time()

    async def beat(self) -> None:
        with self._ledger.renewal() as jobs:
            ids, tokens, progress, stages = [], [], [], []
            for job in jobs:
                ids.append(job.id)
                tokens.append(job.lease_token)
                context = job.context
                percent, stage = context.progress if context is not None else (None, None)
                progress.append(percent)
                # PostgreSQL text cannot hold NUL; one such stage would fail every renewal.
                stages.append(stage.replace("\x00", "") if stage is not None else None)
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    self._queries.heartbeat_jobs,
                    {
                        "ids": ids,
                        "tokens": tokens,
                        "progress": progress,
                        "stages": stages,
                        "worker": self._worker_id,
                        "overruns": _json(overruns(self._ledger)),
                        "succeeded": self._ledger.succeeded,
                        "failed": self._ledger.failed,
                    },
                )
                rows = await cur.fetchall()
                renewed = {token for job_id, token in rows if job_id is not None}
                # A row with no job: the worker's own row is gone (heartbeat_jobs says when).
                # Its totals and overruns come back with the next beat.
                row_gone = any(job_id is None for job_id, _ in rows)
                if row_gone and self._registration is not None:
                    await conn.execute(self._queries.register_worker, self._registration)
                    self.registered_again += 1
                    logger.warning(
                        "worker %s: its row in the workers table was gone (pruned while the "
                        "worker was cut off?); registered it again",
                        self._worker_id,
                    )
        self.beats += 1
        if self._metrics is not None:
            self._metrics.lease_renewals.inc(len(renewed))
        for job in jobs:
            if job.lease_token not in renewed:
                self._ledger.lease_lost(job)


def overruns(ledger: Attempts) -> list[dict[str, Any]] | None:
    """The attempts running past their timeout, as the workers row stores them (the Workers
    page); None when there are none."""
    late = ledger.overrunning()
    if not late:
        return None
    now = time.monotonic()
    return [
        {
            "job_id": a.job.id,
            "task": a.job.task,
            "attempt": a.job.attempt,
            "seconds_past": round(now - (a.timed_out_at or now), 1),
        }
        for a in sorted(late, key=lambda a: a.job.id)
    ]
