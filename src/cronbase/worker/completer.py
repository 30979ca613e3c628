"""Batched, fenced completion: outcomes of many attempts written in one statement.

Successes ride on the worker's next claim (``claim_jobs`` writes them and leases new jobs in one
statement): a job that finishes frees a slot, so a claim follows at once. The completer writes
what no claim took: failures at once (``finish_jobs``), successes after ``CARRY_WAIT`` (a worker
that is stopping, or whose queues are paused, claims nothing), everything on ``drain()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg

from .claim import claim_jobs, claim_params
from .executor import Outcome

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from ..db.queries import Queries

logger = logging.getLogger("cronbase")

MAX_BATCH = 500
# How long a success waits for a claim to carry it before the completer writes it alone.
CARRY_WAIT = 0.02
# Seconds between tries to write outcomes while the database fails: doubling up to RETRY_MAX.
RETRY_FIRST = 0.05
RETRY_MAX = 1.0


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
        "results": [o.job.result for o in outcomes],
        "snooze_caps": [o.snooze_cap for o in outcomes],
        "worker": worker_id,
    }


def _without(outcomes: list[Outcome], gone: list[Outcome]) -> list[Outcome]:
    ids = {id(o) for o in gone}
    return [o for o in outcomes if id(o) not in ids]


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
    """Collects outcomes and writes them; ``drain()`` waits until everything is written.

    The worker's claim takes successes with :meth:`take_successes` and reports what its
    statement wrote with :meth:`settle` (or hands them back with :meth:`give_back`).
    """

    def __init__(
        self,
        pool: AsyncConnectionPool,
        queries: Queries,
        worker_id: str,
        on_written: Callable[[list[tuple[Outcome, str]]], None] = lambda written: None,
    ) -> None:
        self._on_written = on_written
        self._pool = pool
        self._queries = queries
        self._worker_id = worker_id
        self._pending: list[Outcome] = []
        self._since = 0.0  # when the oldest pending outcome arrived (time.monotonic())
        # Outcomes on their way to the database (a flush, or a claim carrying them): their
        # leases are still renewed, and drain() waits for them.
        self._in_flight: list[Outcome] = []
        self._wake = asyncio.Event()
        self._hurry = False
        self._idle = asyncio.Event()
        self._idle.set()
        self.written = 0
        self.fenced_out = 0

    def add(self, outcome: Outcome) -> None:
        if not self._pending:
            self._since = time.monotonic()
        self._pending.append(outcome)
        self._idle.clear()
        self._wake.set()

    @property
    def pending_jobs(self) -> list[Outcome]:
        return self._pending + self._in_flight

    def take_successes(self) -> list[Outcome]:
        """Hand the waiting successes (up to MAX_BATCH) to a claim that will write them."""
        if not self._pending:
            return []
        taken = [o for o in self._pending if o.outcome == "succeeded"][:MAX_BATCH]
        self._pending = [] if len(taken) == len(self._pending) else _without(self._pending, taken)
        self._in_flight.extend(taken)
        return taken

    def settle(self, carried: list[Outcome], written_ids: list[int]) -> None:
        """A claim wrote ``written_ids`` of the successes it carried; the rest were fenced out."""
        self._land(carried)
        self._report(carried, dict.fromkeys(written_ids, "succeeded"))

    def give_back(self, carried: list[Outcome]) -> None:
        """The claim carrying these failed (nothing of it committed): write them later."""
        self._land(carried)
        self._pending[:0] = carried
        if carried:
            self._since = 0.0  # waited for a claim already: write them at once
            self._idle.clear()
            self._wake.set()

    def _land(self, outcomes: list[Outcome]) -> None:
        if outcomes:
            self._in_flight = _without(self._in_flight, outcomes)
        if not self._pending and not self._in_flight:
            self._idle.set()

    async def drain(self) -> None:
        """Write everything now (no more waiting for a claim) and return when it is written."""
        self._hurry = True
        self._wake.set()
        await self._idle.wait()

    async def run(self) -> None:
        """Flush until cancelled; a failed flush is retried (the fence keeps retries safe)."""
        delay = RETRY_FIRST
        while True:
            await self._wake.wait()
            self._wake.clear()
            # Successes wait up to CARRY_WAIT for the worker's next claim to carry them (one
            # commit, not two); counted from when the oldest of those still here arrived.
            while (
                self._pending
                and not self._hurry
                and all(o.outcome == "succeeded" for o in self._pending)
                and (left := self._since + CARRY_WAIT - time.monotonic()) > 0
            ):
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await self._wake.wait()
                self._wake.clear()
            while self._pending:
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                self._in_flight.extend(batch)
                try:
                    await self._flush(batch)
                except psycopg.DataError:
                    # Something in this batch the database refuses as data: retrying cannot
                    # help, and a dead completer would record nothing more and hang shutdown.
                    # These jobs' leases run out and the reaper retries them.
                    logger.exception(
                        "recording outcomes of jobs %s failed; dropped, their leases will expire",
                        ", ".join(str(o.job.id) for o in batch),
                    )
                except Exception as exc:
                    # The database is away, or refuses us for now (restart, failover, grants):
                    # keep the outcomes and try again; the fence keeps retries safe.
                    if delay == RETRY_FIRST:  # once per run of failures
                        logger.warning(
                            "recording %d outcomes failed (%s); retrying",
                            len(batch),
                            str(exc).strip(),
                        )
                    self._in_flight = _without(self._in_flight, batch)
                    self._pending[:0] = batch
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX)
                    continue
                delay = RETRY_FIRST
                self._in_flight = _without(self._in_flight, batch)
            self._land([])

    async def _flush(self, batch: list[Outcome]) -> None:
        if all(o.outcome == "succeeded" for o in batch):
            # claim_jobs with limit 0 writes the successes and leases nothing.
            params = claim_params(done=[o.job for o in batch], limit=0, worker=self._worker_id)
            async with self._pool.connection() as conn:
                written_ids = (await claim_jobs(conn, self._queries, params)).written_ids
            self._report(batch, dict.fromkeys(written_ids, "succeeded"))
            return
        released = [o for o in batch if o.outcome == "released"]
        suspended = [o for o in batch if o.outcome == "suspended"]
        finished = [o for o in batch if o.outcome not in ("released", "suspended")]
        written: dict[int, str] = {}
        async with self._pool.connection() as conn:
            if finished:
                params = finish_params(finished, self._worker_id)
                cur = await conn.execute(self._queries.finish_jobs, params)
                written.update({row[0]: row[1] for row in await cur.fetchall()})
            if released:
                cur = await conn.execute(self._queries.release_jobs, self._release(released))
                written.update(dict.fromkeys((row[0] for row in await cur.fetchall()), "queued"))
            if suspended:
                written.update(await self._suspend(conn, suspended))
        self._report(batch, written)

    async def _suspend(self, conn: Any, suspended: list[Outcome]) -> dict[int, str]:
        """Write sleeping and event-waiting jobs back as queued (suspend_jobs), after trying
        the locks of the events they wait for, in one transaction (see lock_event_keys)."""
        q = self._queries
        keys = sorted({o.waiting_for for o in suspended if o.waiting_for is not None})
        async with conn.transaction():
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
            elif o.outcome == "snoozed" and status == "queued" and o.snooze_cap < 0:
                logger.info(
                    "job %d waits for an effect in progress elsewhere: task=%s, runs again in "
                    "%.3gs (attempt %d not counted): %s",
                    o.job.id,
                    o.job.task,
                    o.retry_in,
                    o.job.attempt,
                    o.error,
                    extra=event_fields(o, "waiting"),
                )
            elif o.outcome == "snoozed" and status == "queued":
                logger.info(
                    "job %d snoozed by its handler: task=%s, runs again in %.3gs (attempt %d "
                    "not counted)",
                    o.job.id,
                    o.job.task,
                    o.retry_in,
                    o.job.attempt,
                    extra=event_fields(o, "snoozed"),
                )
            elif o.outcome == "suspended" and status == "queued":
                logger.info(
                    "job %d suspended: task=%s, waits for %s (attempt %d not counted)",
                    o.job.id,
                    o.job.task,
                    f"event {o.waiting_for!r}" if o.waiting_for else f"{o.wake_in:.3g}s",
                    o.job.attempt,
                    extra=event_fields(o, "suspended"),
                )
            elif status == "cancelled":
                logger.warning(
                    "job %d cancelled by its handler: task=%s attempt=%d reason=%s",
                    o.job.id,
                    o.job.task,
                    o.job.attempt,
                    o.error,
                    extra=event_fields(o, "cancelled"),
                )
            elif status == "queued":
                logger.warning(
                    "job %d attempt %d (%s) handed back, not counted: %s",
                    o.job.id,
                    o.job.attempt,
                    o.job.task,
                    o.error,
                    extra=event_fields(o, "released"),
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
        self._on_written(landed)
