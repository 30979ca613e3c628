"""Batched, fenced completion: the outcomes of many attempts written in one statement each.

Every outcome a worker records goes through here, taken from the attempts' ledger
(``attempts.py``), which never hands an attempt a lease renewal holds to a writer. Successes
ride on the worker's next claim (the claim statement carries the ``complete_jobs`` fragment: one
statement, one commit): the claimer takes them with :meth:`Completer.carrying` and says which
were written. What no claim carries is
written here: failures at once (``finish_jobs``), successes after ``CARRY_WAIT``
(``complete_jobs``: a worker that is stopping, or whose queues are paused, claims nothing),
handed-back attempts (``release_jobs``), suspensions (``suspend_jobs``), everything on
``drain()``. Each written outcome is logged and counted once, here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg

from ..db.outage import OUTAGE, first_failure
from ..payload.sealing import TEXT_PREFIX, EncryptionError
from .attempts import Attempt, Attempts
from .claim import ClaimedJob, done_params
from .outcomes import Outcome

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from ..db.queries import Queries
    from ..operations.metrics import WorkerMetrics

logger = logging.getLogger("cronbase")

MAX_BATCH = 500
# How long a success waits for a claim to carry it before the completer writes it alone.
CARRY_WAIT = 0.02
# Seconds between tries to write outcomes while the database fails: doubling up to RETRY_MAX.
RETRY_FIRST = 0.05
RETRY_MAX = 1.0
# How long a transaction of several statements may idle before the server ends it (see _suspend).
IDLE_LIMIT = {"milliseconds": "10000"}


def finish_params(outcomes: list[Outcome], worker_id: str) -> dict[str, Any]:
    """Parameters of finish_jobs, which takes the outcomes that are not successes."""
    return {
        "ids": [o.job.id for o in outcomes],
        "tokens": [o.job.lease_token for o in outcomes],
        "outcomes": [o.outcome for o in outcomes],
        "retry_in": [o.retry_in for o in outcomes],
        "errors": [o.error for o in outcomes],
        "error_types": [o.error_type for o in outcomes],
        "tracebacks": [o.traceback for o in outcomes],
        "snooze_caps": [o.snooze_cap for o in outcomes],
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
        "error": logged_error(o.error),
    }


def logged_error(error: str | None) -> str | None:
    """An outcome's error as logs show it: an encrypted task's (sealed) never, even sealed."""
    if error is not None and error.startswith(TEXT_PREFIX):
        return "(encrypted: the task's errors are stored sealed)"
    return error


@dataclass
class Carried:
    """Successes a claim statement carries; the claimer sets ``written`` from its reply."""

    attempts: list[Attempt]
    written: list[int] = field(default_factory=list)

    @property
    def outcomes(self) -> list[Outcome]:
        return [a.outcome for a in self.attempts if a.outcome is not None]

    @property
    def jobs(self) -> list[ClaimedJob]:
        return [a.job for a in self.attempts]


class Completer:
    """Writes the outcomes the ledger holds; ``drain()`` waits until everything is written."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        queries: Queries,
        worker_id: str,
        ledger: Attempts,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self._pool = pool
        self._queries = queries
        self._worker_id = worker_id
        self._ledger = ledger
        self._metrics = metrics
        self._hurry = False
        self.written = 0
        self.fenced_out = 0

    def add(self, outcome: Outcome) -> None:
        """An outcome no running attempt produced (a claimed row that could not be decoded)."""
        self._ledger.add(outcome)

    @property
    def pending_jobs(self) -> list[Outcome]:
        """Every outcome not yet written: waiting, or on its way."""
        return self._ledger.unwritten

    @contextlib.contextmanager
    def carrying(self) -> Iterator[Carried]:
        """The waiting successes (up to MAX_BATCH) no renewal holds, for a claim statement to
        write. When the block raises, nothing of the statement committed: they are written
        later instead (at once: they waited for a claim already)."""
        carried = Carried(self._ledger.take(successes=True, most=MAX_BATCH))
        try:
            yield carried
        except BaseException:
            self._ledger.put_back(carried.attempts)
            raise
        self._ledger.landed(carried.attempts)
        self._report(carried.outcomes, dict.fromkeys(carried.written, "succeeded"))

    async def drain(self) -> None:
        """Write everything now (no more waiting for a claim) and return when it is written."""
        self._hurry = True
        self._ledger.outcomes_waiting.set()
        await self._ledger.written.wait()

    async def run(self) -> None:
        """Flush until cancelled; a failed flush is retried (the fence keeps retries safe)."""
        ledger = self._ledger
        waiting = ledger.outcomes_waiting
        delay = RETRY_FIRST
        while True:
            await waiting.wait()
            waiting.clear()
            # Successes wait up to CARRY_WAIT for the worker's next claim to carry them (one
            # commit, not two); counted from when the oldest of those still here arrived.
            ledger.carry_wait = True
            while (
                (finished := ledger.finished)
                and not self._hurry
                and all(o.outcome == "succeeded" for o in finished)
                and (left := ledger.finished_since + CARRY_WAIT - time.monotonic()) > 0
            ):
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await waiting.wait()
                waiting.clear()
            ledger.carry_wait = False
            # What a lease renewal holds waits for its end, which wakes this loop again.
            while batch := ledger.take(successes=False, most=MAX_BATCH):
                try:
                    await self._flush([a.outcome for a in batch if a.outcome is not None])
                except psycopg.DataError:
                    # Something in this batch the database refuses as data: retrying cannot
                    # help, and a dead completer would record nothing more and hang shutdown.
                    # These jobs' leases run out and the reaper retries them.
                    logger.exception(
                        "recording outcomes of jobs %s failed; dropped, their leases will expire",
                        ", ".join(str(a.job.id) for a in batch),
                    )
                except Exception as exc:
                    # The database is away, or refuses us for now (restart, failover, grants):
                    # keep the outcomes and try again; the fence keeps retries safe.
                    if delay == RETRY_FIRST:  # once per run of failures
                        first_failure(
                            "recording outcomes",
                            exc,
                            f"recording {len(batch)} outcomes failed (%s); retrying",
                        )
                    ledger.put_back(batch)
                    waiting.clear()  # it is this loop that tries again, after the pause
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX)
                    continue
                if delay != RETRY_FIRST:
                    OUTAGE.works("recording outcomes")
                delay = RETRY_FIRST
                ledger.landed(batch)
            ledger.landed([])

    async def _flush(self, batch: list[Outcome]) -> None:
        by_kind: dict[str, list[Outcome]] = {}
        for o in batch:
            kind = o.outcome if o.outcome in ("succeeded", "released", "suspended") else "finished"
            by_kind.setdefault(kind, []).append(o)
        written: dict[int, str] = {}
        q = self._queries
        async with self._pool.connection() as conn:
            if succeeded := by_kind.get("succeeded"):
                cur = await conn.execute(q.complete_jobs, done_params([o.job for o in succeeded]))
                row = await cur.fetchone()
                written.update(dict.fromkeys((row[0] if row else None) or [], "succeeded"))
            if finished := by_kind.get("finished"):
                cur = await conn.execute(q.finish_jobs, finish_params(finished, self._worker_id))
                written.update({row[0]: row[1] for row in await cur.fetchall()})
            if released := by_kind.get("released"):
                cur = await conn.execute(q.release_jobs, self._release(released))
                written.update(dict.fromkeys((row[0] for row in await cur.fetchall()), "queued"))
            if suspended := by_kind.get("suspended"):
                written.update(await self._suspend(conn, suspended))
        self._report(batch, written)

    async def _suspend(self, conn: Any, suspended: list[Outcome]) -> dict[int, str]:
        """Write sleeping and event-waiting jobs back as queued (suspend_jobs), after trying
        the locks of the events they wait for, in one transaction (see lock_event_keys)."""
        q = self._queries
        keys = sorted({o.waiting_for for o in suspended if o.waiting_for is not None})
        async with conn.transaction():
            # The event locks are held until COMMIT: a worker cut off before it would keep them
            # (and wake-ups of those events waiting) until the server's TCP gives up.
            await conn.execute(q.limit_idle_transaction, IDLE_LIMIT)
            locked: dict[str, bool] = {}
            if keys:
                cur = await conn.execute(q.lock_event_keys, {"schema": q.schema, "keys": keys})
                locked = {key: bool(got) for key, got in await cur.fetchall()}
            params = {
                "ids": [o.job.id for o in suspended],
                "tokens": [o.job.lease_token for o in suspended],
                "wake_in": [o.wake_in for o in suspended],
                "waiting_for": [o.waiting_for for o in suspended],
                "locked": [locked.get(o.waiting_for or "", True) for o in suspended],
                "worker": self._worker_id,
                "channel": q.channel,
            }
            cur = await conn.execute(q.suspend_jobs, params)
            return {row[0]: row[1] for row in await cur.fetchall()}

    def _release(self, released: list[Outcome]) -> dict[str, Any]:
        return {
            "ids": [o.job.id for o in released],
            "tokens": [o.job.lease_token for o in released],
            "worker": self._worker_id,
            "channel": self._queries.channel,
            "reason": "the database connection was lost under the handler's transaction()",
        }

    def _report(self, batch: list[Outcome], written: dict[int, str]) -> None:
        """Count, log and feed metrics for what was written; warn about what was fenced out."""
        self.written += len(written)
        log_successes = logger.isEnabledFor(logging.INFO)
        landed = []
        for o in batch:
            status = written.get(o.job.id)
            if status is not None:
                landed.append((o, status))
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
                _log_written(o, status)
        if self._metrics is not None:
            self._metrics.count_finished(landed)


def _log_written(o: Outcome, status: str) -> None:
    """The log line of an outcome written as anything but a success."""
    job = o.job
    level = logging.INFO
    error = logged_error(o.error)
    if isinstance(o.exception, EncryptionError):
        level, event = logging.WARNING, "key_missing"
        text = "job %d waits for a worker with its encryption key: task=%s, runs again in %.3gs: %s"
        args: tuple[object, ...] = (job.id, job.task, o.retry_in, error)
    elif o.outcome == "snoozed" and status == "queued" and o.snooze_cap < 0:
        event = "waiting"
        text = (
            "job %d waits for an effect in progress elsewhere: task=%s, runs again in %.3gs "
            "(attempt %d not counted): %s"
        )
        args = (job.id, job.task, o.retry_in, job.attempt, error)
    elif o.outcome == "snoozed" and status == "queued":
        event = "snoozed"
        text = (
            "job %d snoozed by its handler: task=%s, runs again in %.3gs (attempt %d not counted)"
        )
        args = (job.id, job.task, o.retry_in, job.attempt)
    elif o.outcome == "suspended" and status == "queued":
        event = "suspended"
        text = "job %d suspended: task=%s, waits for %s (attempt %d not counted)"
        waits = f"event {o.waiting_for!r}" if o.waiting_for else f"{o.wake_in:.3g}s"
        args = (job.id, job.task, waits, job.attempt)
    elif status == "cancelled":
        level, event = logging.WARNING, "cancelled"
        text = "job %d cancelled by its handler: task=%s attempt=%d reason=%s"
        args = (job.id, job.task, job.attempt, error)
    elif status == "queued":
        level, event = logging.WARNING, "released"
        text = "job %d attempt %d (%s) handed back, not counted: %s"
        args = (job.id, job.attempt, job.task, error)
    else:
        level, event = logging.WARNING, "retried" if status == "failed" else "dead"
        text = "job %d %s: task=%s attempt=%d/%d duration=%.3fs error=%s"
        how = "failed, will retry" if status == "failed" else "is dead"
        args = (job.id, how, job.task, job.attempt, job.max_attempts, o.duration, error)
    logger.log(level, text, *args, extra=event_fields(o, event))
