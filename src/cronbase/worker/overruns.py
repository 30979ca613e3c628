"""Handlers that ignore their timeout: named in the log, counted in a metric, and shown on the
Workers page (``workers.overruns``, written with each heartbeat) until they return. What is
known of each attempt (when it timed out, whether it was reported) is on its record in the
attempts' ledger (``attempts.py``), which also logs its return.

A timed-out attempt is cancelled, but a sync handler cannot be stopped: it keeps its slot and its
lease until it returns. One that is still running ``OVERRUN_AFTER`` seconds after the timeout is
an overrun: warned about then, every ``REPEAT_EVERY`` seconds while it runs on, and once more when
it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from .executor import OVERRUN_AFTER

if TYPE_CHECKING:
    from ..operations.metrics import WorkerMetrics
    from .attempts import Attempt, Attempts
    from .claim import ClaimedJob

logger = logging.getLogger("cronbase")

REPEAT_EVERY = 60.0


class Overruns:
    """The overrun watch: reports the ledger's timed-out attempts whose handlers run on."""

    def __init__(self, ledger: Attempts, metrics: WorkerMetrics) -> None:
        self._ledger = ledger
        self._metrics = metrics

    def timed_out(self, job: ClaimedJob, note: str) -> None:
        """The attempt's timeout cancelled it (the executor says so, on the event loop)."""
        logger.warning(
            "job %d (%s) attempt %d: past its timeout; %s",
            job.id,
            job.task,
            job.attempt,
            note,
            extra={"event": "timed_out", "job_id": job.id, "task": job.task},
        )
        self._metrics.timeouts.labels(job.task, job.queue).inc()
        attempt = self._ledger.running.get(job)
        if attempt is not None:
            now = time.monotonic()
            attempt.timed_out_at, attempt.report_at = now, now + OVERRUN_AFTER
            self._ledger.overruns_changed.set()
        # The renewal that follows keeps the lease of an attempt that runs on.
        self._ledger.renew_soon.set()

    async def run(self) -> None:
        ledger = self._ledger
        while True:
            ledger.overruns_changed.clear()
            now = time.monotonic()
            timed_out = [a for a in ledger.running.values() if a.timed_out_at is not None]
            for attempt in timed_out:
                if attempt.report_at <= now:
                    self._report(attempt, now)
            wait = min((a.report_at for a in timed_out), default=None)
            timeout = None if wait is None else max(wait - time.monotonic(), 0.0)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await ledger.overruns_changed.wait()

    def _report(self, attempt: Attempt, now: float) -> None:
        job, since = attempt.job, attempt.timed_out_at
        assert since is not None
        attempt.report_at = now + REPEAT_EVERY
        if not attempt.overrun:
            attempt.overrun = True
            self._metrics.overruns.labels(job.task, job.queue).inc()
            self._ledger.rewrite_soon()  # the workers row lists it
        logger.warning(
            "job %d (%s) attempt %d ignores its timeout: still running %.1fs after it "
            "was cancelled; it keeps its slot and lease until it returns (a sync handler "
            "cannot be stopped: poll current_job().is_cancelled(), or use "
            "isolation='process')",
            job.id,
            job.task,
            job.attempt,
            now - since,
            extra={"event": "overrun", "job_id": job.id, "task": job.task},
        )
