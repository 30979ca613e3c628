"""Batched, fenced completion: outcomes of many attempts written in one statement.

A flush starts as soon as an outcome arrives and nothing is in flight; outcomes that arrive while
a flush is in flight wait for the next one. Batches so form by themselves under load, and a lone
job is not delayed by a timer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from .executor import Outcome

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from ..db.queries import Queries

logger = logging.getLogger("cronbase")

MAX_BATCH = 500


def finish_params(outcomes: list[Outcome], worker_id: str) -> dict[str, Any]:
    """Parameters of finish_jobs, which takes any outcomes."""
    return {
        "ids": [o.job.id for o in outcomes],
        "tokens": [o.job.lease_token for o in outcomes],
        "outcomes": [o.outcome for o in outcomes],
        "retry_in": [o.retry_in for o in outcomes],
        "errors": [o.error for o in outcomes],
        "error_types": [o.error_type for o in outcomes],
        "tracebacks": [o.traceback for o in outcomes],
        "worker": worker_id,
    }


def event_fields(o: Outcome, event: str) -> dict[str, Any]:
    """The fields of a job event log line (``--log-format json`` prints them as keys)."""
    return {
        "event": event,
        "job_id": o.job.id,
        "task": o.job.task,
        "queue": o.job.queue,
        "attempt": o.job.attempt,
        "duration": round(o.duration, 6),
        "error": o.error,
    }


class Completer:
    """Collects outcomes and writes them; ``drain()`` waits until everything is written."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        queries: Queries,
        worker_id: str,
        on_written: Callable[[Outcome, str], None] = lambda outcome, status: None,
    ) -> None:
        self._on_written = on_written
        self._pool = pool
        self._queries = queries
        self._worker_id = worker_id
        self._pending: list[Outcome] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self.written = 0
        self.fenced_out = 0

    def add(self, outcome: Outcome) -> None:
        self._pending.append(outcome)
        self._idle.clear()
        self._wake.set()

    @property
    def pending_jobs(self) -> list[Outcome]:
        return list(self._pending)

    async def drain(self) -> None:
        await self._idle.wait()

    async def run(self) -> None:
        """Flush until cancelled; a failed flush is retried (the fence keeps retries safe)."""
        delay = 0.05
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch = self._pending[:MAX_BATCH]
                try:
                    await self._flush(batch)
                except psycopg.OperationalError as exc:
                    logger.warning("recording %d outcomes failed (%s); retrying", len(batch), exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
                    continue
                except Exception:
                    # Retrying cannot help, and a dead completer would record nothing more and
                    # hang shutdown. These jobs' leases run out and the reaper retries them.
                    logger.exception(
                        "recording outcomes of jobs %s failed; dropped, their leases will expire",
                        ", ".join(str(o.job.id) for o in batch),
                    )
                delay = 0.05
                del self._pending[: len(batch)]
            self._idle.set()

    async def _flush(self, batch: list[Outcome]) -> None:
        if all(o.outcome == "succeeded" for o in batch):
            query = self._queries.succeed_jobs
            params = {
                "ids": [o.job.id for o in batch],
                "tokens": [o.job.lease_token for o in batch],
                "worker": self._worker_id,
            }
        else:
            query, params = self._queries.finish_jobs, finish_params(batch, self._worker_id)
        async with self._pool.connection() as conn:
            cur = await conn.execute(query, params)
            rows = await cur.fetchall()
        written = {row[0]: row[1] for row in rows}
        self.written += len(written)
        log_successes = logger.isEnabledFor(logging.INFO)
        for o in batch:
            status = written.get(o.job.id)
            if status is not None:
                self._on_written(o, status)
            if status == "succeeded":
                # The common case first, and no log record (nor its extra dict) unless wanted.
                if log_successes:
                    logger.info(
                        "job %d succeeded: task=%s attempt=%d duration=%.3fs",
                        o.job.id,
                        o.job.task,
                        o.job.attempt,
                        o.duration,
                        extra=event_fields(o, "succeeded"),
                    )
            elif status is None:
                self.fenced_out += 1
                logger.warning(
                    "job %d attempt %d (%s): outcome %s ignored: the lease was lost "
                    "(expired, cancelled or retried by an operator)",
                    o.job.id,
                    o.job.attempt,
                    o.job.task,
                    o.outcome,
                    extra=event_fields(o, "fenced_out"),
                )
            else:
                logger.warning(
                    "job %d %s: task=%s attempt=%d/%d duration=%.3fs error=%s",
                    o.job.id,
                    "failed, will retry" if status == "failed" else "is dead",
                    o.job.task,
                    o.job.attempt,
                    o.job.max_attempts,
                    o.duration,
                    o.error,
                    extra=event_fields(o, "retried" if status == "failed" else "dead"),
                )
