"""The ledger of a worker's attempts: one record per attempt, from its claim until its outcome is
written, and the only place that says what state an attempt is in (River's ``producer.go`` keeps
its active jobs so: one owner, one map).

An attempt is *running* (its handler runs), *lost* (its lease was lost, or it was handed back,
while its handler still runs: nothing of it is written or renewed any more), *finished* (its
outcome waits to be written), *writing* (a statement is writing its outcome) and then gone.
Besides, a lease renewal may hold it (``renewal``).

Two statements of one worker on the same rows, each taking them in its own order, deadlocked
(a finished job of a renewal's snapshot rode the next claim, whose DELETE met the renewal's
UPDATE). So every statement takes its attempts from here, and the ledger hands out disjoint
sets: the renewal takes the running and finished ones no statement writes; the writers (a
flush, a claim carrying successes) take the finished ones no renewal holds; the hand-back
waits for a renewal in flight, then takes the running ones out of every later renewal.

The parts read the ledger and wait on its events (no callbacks between them): the completer on
``outcomes_waiting``, the heartbeat on ``renew_soon``, the overrun watch on ``overruns_changed``,
the worker's loop on the ``freed`` event it lends the ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .claim import ClaimedJob
from .outcomes import Outcome

if TYPE_CHECKING:
    from ..task import Task

logger = logging.getLogger("cronbase")

# A renewal's first plan, before any job is held: the lease an idle worker says it is alive by.
IDLE_LEASE = timedelta(seconds=30)


class State(enum.Enum):
    RUNNING = "running"
    LOST = "lost"
    FINISHED = "finished"
    WRITING = "writing"


@dataclass(eq=False, slots=True)
class Attempt:
    """One attempt: its claimed job, its state, the task its handler runs in (None for an
    outcome no handler produced: a row that could not be decoded), and its outcome."""

    job: ClaimedJob
    state: State
    task: asyncio.Task[Outcome] | None = None
    outcome: Outcome | None = None
    # A lease renewal is updating its row: no statement writes its outcome meanwhile.
    renewing: bool = False
    # When its timeout cancelled it (time.monotonic()); when it is next reported as an overrun,
    # and whether it has been (the overrun watch, overruns.py).
    timed_out_at: float | None = None
    report_at: float = 0.0
    overrun: bool = False


class Attempts:
    """The ledger. ``running`` holds the attempts whose handlers run (lost ones too: a sync
    handler fenced out keeps its slot until it returns), keyed by their claimed job (equal
    only to itself: a job claimed again while its lost attempt runs on is another key)."""

    def __init__(
        self,
        tasks: Mapping[str, Task[Any, Any]],
        freed: asyncio.Event,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._tasks = tasks
        self._freed = freed
        self.running: dict[ClaimedJob, Attempt] = {}
        self._finished: list[Attempt] = []
        self._writing: list[Attempt] = []
        # When the oldest finished outcome arrived (time.monotonic()): the completer's wait for
        # a claim to carry successes is counted from it.
        self.finished_since = 0.0
        # Set by the completer while it gives waiting successes time to ride on a claim: a
        # success that comes meanwhile needs no wake-up (one less turn of the loop per claim).
        self.carry_wait = False
        self.outcomes_waiting = asyncio.Event()
        self.written = asyncio.Event()  # nothing finished or being written
        self.written.set()
        # The heartbeat's: a renewal may be due sooner (claims with a shorter lease, progress, a
        # timeout, an overrun's end); the shortest lease its next beat is planned for.
        self.renew_soon = asyncio.Event()
        self.planned_for = IDLE_LEASE
        self.progress = False
        self.overruns_changed = asyncio.Event()
        self._no_renewal = asyncio.Event()
        self._no_renewal.set()
        self._loop = loop
        # Since the worker started: jobs its handlers finished successfully, attempts that
        # failed. Its heartbeats write them (the Workers page); counted here, where every
        # outcome passes, so the hot path runs no statement more.
        self.succeeded = 0
        self.failed = 0

    # -- the worker's loop -----------------------------------------------------------------------

    def started(self, job: ClaimedJob, task: asyncio.Task[Outcome]) -> None:
        """The attempt's handler runs in ``task`` (not called for one that ended eagerly)."""
        self.running[job] = Attempt(job, State.RUNNING, task)

    def claimed(self, jobs: Sequence[ClaimedJob]) -> None:
        """Jobs were claimed: a lease shorter than any held so far is renewed sooner."""
        # Claimed jobs whose leases are no shorter than the one the next beat is planned for are
        # renewed in time by it: no wake-up (that would be a turn of the loop per claim).
        if jobs and min(j.lease for j in jobs) < self.planned_for:
            self.renew_soon.set()

    def finish(self, job: ClaimedJob, outcome: Outcome | None) -> None:
        """The attempt's task ended with ``outcome`` (None: cancelled). What a lost attempt or
        its own transaction() finished has nothing to write."""
        attempt = self.running.pop(job, None)
        if attempt is None:  # it ended eagerly, before started() recorded it
            attempt = Attempt(job, State.RUNNING)
        if attempt.overrun:
            assert attempt.timed_out_at is not None
            logger.warning(
                "job %d (%s) attempt %d: its handler returned %.1fs past its timeout",
                job.id,
                job.task,
                job.attempt,
                time.monotonic() - attempt.timed_out_at,
                extra={"event": "overrun_ended", "job_id": job.id, "task": job.task},
            )
            self.rewrite_soon()  # the workers row's list of overruns
        if attempt.timed_out_at is not None:
            self.overruns_changed.set()
        if outcome is not None and attempt.state is State.RUNNING:
            self._count(outcome)
            if not outcome.written:
                attempt.outcome = outcome
                self._add(attempt)
        self._freed.set()

    def add(self, outcome: Outcome) -> None:
        """An outcome no running attempt produced (a claimed row that could not be decoded)."""
        self._count(outcome)
        self._add(Attempt(outcome.job, State.FINISHED, outcome=outcome))

    def _count(self, outcome: Outcome) -> None:
        # A lost attempt's outcome is not counted: another attempt may run the job meanwhile.
        if outcome.outcome == "succeeded":
            self.succeeded += 1
        elif outcome.outcome in ("failed", "dead"):
            self.failed += 1

    def _add(self, attempt: Attempt) -> None:
        attempt.state = State.FINISHED
        if not self._finished:
            self.finished_since = time.monotonic()
        self._finished.append(attempt)
        self.written.clear()
        assert attempt.outcome is not None
        if not self.carry_wait or attempt.outcome.outcome != "succeeded":
            self.outcomes_waiting.set()

    # -- the writers: the completer's flushes, claims carrying successes -------------------------

    @property
    def finished(self) -> list[Outcome]:
        """The outcomes waiting to be written (no statement is writing them)."""
        return [a.outcome for a in self._finished if a.outcome is not None]

    @property
    def unwritten(self) -> list[Outcome]:
        """Every outcome not written yet: waiting, or a statement is writing it."""
        return [a.outcome for a in self._finished + self._writing if a.outcome is not None]

    def take(self, *, successes: bool, most: int) -> list[Attempt]:
        """Up to ``most`` finished attempts (only successes, or any) that no renewal holds, now
        being written: theirs to write for whoever took them, and no one else's."""
        if not self._finished:
            return []
        taken: list[Attempt] = []
        kept: list[Attempt] = []
        for attempt in self._finished:
            outcome = attempt.outcome
            assert outcome is not None
            if (
                len(taken) < most
                and not attempt.renewing
                and (not successes or outcome.outcome == "succeeded")
            ):
                attempt.state = State.WRITING
                taken.append(attempt)
            else:
                kept.append(attempt)
        self._finished = kept
        self._writing.extend(taken)
        return taken

    def put_back(self, attempts: list[Attempt]) -> None:
        """Not written (the statement failed): first in line again, to be written at once."""
        if not attempts:
            return
        self._drop_writing(attempts)
        for attempt in attempts:
            attempt.state = State.FINISHED
        self._finished[:0] = attempts
        self.finished_since = 0.0  # waited already
        self.written.clear()
        self.outcomes_waiting.set()

    def landed(self, attempts: list[Attempt]) -> None:
        """Written (or fenced out, or refused as data): gone from the ledger."""
        if attempts:
            self._drop_writing(attempts)
        if not self._finished and not self._writing:
            self.written.set()

    def _drop_writing(self, attempts: list[Attempt]) -> None:
        if len(attempts) == len(self._writing):
            self._writing = []
        else:
            gone = {id(a) for a in attempts}
            self._writing = [a for a in self._writing if id(a) not in gone]

    # -- the heartbeat ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def renewal(self) -> Iterator[list[ClaimedJob]]:
        """The jobs whose leases a renewal updates now, held until it ends: those running (not
        lost, not finished by their own transaction()) and those whose outcomes wait; not those
        a statement is writing (it holds their rows; the reaper skips rows a statement holds)."""
        held = self._renewable()
        for attempt in held:
            attempt.renewing = True
        self._no_renewal.clear()
        try:
            yield [a.job for a in held]
        finally:
            for attempt in held:
                attempt.renewing = False
            self._no_renewal.set()
            if self._finished:
                self.outcomes_waiting.set()  # what waited for the renewal is written now

    def held(self) -> list[ClaimedJob]:
        """The jobs the next renewal would take (to plan its interval)."""
        return [a.job for a in self._renewable()]

    def _renewable(self) -> list[Attempt]:
        # A job whose transaction() committed is finished: nothing left to renew.
        held = [
            a for a in self.running.values() if a.state is State.RUNNING and not a.job.completed
        ]
        return held + self._finished

    def lease_lost(self, job: ClaimedJob) -> None:
        """A renewal found the attempt's lease gone (expired, cancelled or retried by an
        operator): its outcome is not written; an async handler is cancelled and a child process
        killed (a sync one in a thread runs on, fenced out, and keeps its slot)."""
        attempt = self.running.get(job)
        if attempt is None or attempt.state is not State.RUNNING:
            # Known already, or finished since the renewal began: then its outcome's write is
            # fenced by the same token.
            return
        logger.warning(
            "job %d attempt %d (%s): lease lost (expired, cancelled or retried by an operator); "
            "its outcome will not be recorded",
            job.id,
            job.attempt,
            job.task,
        )
        attempt.state = State.LOST
        if job.context is not None:
            job.context.lease_lost = True  # no effect and no transaction() may start now
        task = self._tasks.get(job.task)
        stoppable = task is not None and (task.is_async or task.isolation == "process")
        if attempt.task is not None and stoppable:
            attempt.task.cancel()

    def progressed(self) -> None:
        """A handler reported progress (from any thread): the next renewal writes it soon."""
        self._loop.call_soon_threadsafe(self.rewrite_soon)

    def rewrite_soon(self) -> None:
        """What a renewal writes beside the leases changed (progress, the list of overruns):
        the next one comes within PROGRESS_INTERVAL (heartbeat.py)."""
        self.progress = True
        self.renew_soon.set()

    # -- the hand-back ---------------------------------------------------------------------------

    async def hand_back(self, jobs: list[ClaimedJob], wait: float) -> None:
        """``jobs``, about to be handed back, taken out of every later renewal (and nothing of
        them written), once a renewal in flight has ended: it holds their rows. One still
        running after ``wait`` seconds (its connection cut off, say) is not waited for: better
        beside it than never."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await self._no_renewal.wait()
        for job in jobs:
            attempt = self.running.get(job)
            if attempt is not None:
                attempt.state = State.LOST

    def overrunning(self) -> list[Attempt]:
        """The attempts the overrun watch reported as running past their timeout."""
        return [a for a in self.running.values() if a.overrun]
