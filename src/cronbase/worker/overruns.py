"""Handlers that ignore their timeout: named in the log, counted in a metric, and shown on the
Workers page (``workers.overruns``, written with each heartbeat) until they return.

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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .executor import OVERRUN_AFTER

if TYPE_CHECKING:
    from .claim import ClaimedJob

logger = logging.getLogger("cronbase")

REPEAT_EVERY = 60.0


class Overruns:
    """Timed-out attempts whose handlers have not returned; ``run()`` reports the overruns."""

    def __init__(
        self, on_overrun: Callable[[ClaimedJob], None], on_changed: Callable[[], None]
    ) -> None:
        self._on_overrun = on_overrun  # the metric
        self._on_changed = on_changed  # the heartbeat writes the list soon
        # Attempt -> (when its timeout cancelled it, when it is next reported), monotonic.
        self._cancelled: dict[ClaimedJob, tuple[float, float]] = {}
        self._overrunning: set[ClaimedJob] = set()
        self._wake = asyncio.Event()

    def timed_out(self, job: ClaimedJob) -> None:
        """The attempt's timeout cancelled it (called on the event loop)."""
        now = time.monotonic()
        self._cancelled[job] = (now, now + OVERRUN_AFTER)
        self._wake.set()

    def returned(self, job: ClaimedJob) -> None:
        """The attempt's handler returned (or its task ended): no longer an overrun."""
        since = self._cancelled.pop(job, None)
        if since is None:
            return
        if job in self._overrunning:
            self._overrunning.discard(job)
            logger.warning(
                "job %d (%s) attempt %d: its handler returned %.1fs past its timeout",
                job.id,
                job.task,
                job.attempt,
                time.monotonic() - since[0],
                extra={"event": "overrun_ended", "job_id": job.id, "task": job.task},
            )
            self._on_changed()

    def snapshot(self) -> list[dict[str, Any]] | None:
        """The overrunning attempts as the workers row stores them; None when there are none."""
        if not self._overrunning:
            return None
        now = time.monotonic()
        return [
            {
                "job_id": job.id,
                "task": job.task,
                "attempt": job.attempt,
                "seconds_past": round(now - self._cancelled[job][0], 1),
            }
            for job in sorted(self._overrunning, key=lambda j: j.id)
            if job in self._cancelled
        ]

    async def run(self) -> None:
        while True:
            now = time.monotonic()
            due = [job for job, (_, at) in self._cancelled.items() if at <= now]
            for job in due:
                since, _ = self._cancelled[job]
                self._cancelled[job] = (since, now + REPEAT_EVERY)
                first = job not in self._overrunning
                self._overrunning.add(job)
                if first:
                    self._on_overrun(job)
                    self._on_changed()
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
            self._wake.clear()
            wait = min((at for _, at in self._cancelled.values()), default=None)
            timeout = None if wait is None else max(wait - time.monotonic(), 0.0)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
