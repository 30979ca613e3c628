"""THE core loop of cronbase: wait -> claim -> dispatch -> complete. Read this first.

:meth:`Worker.run`, in order:

1. **Start** (``startup.assemble``: it builds every part and returns those the loop uses as
   one frozen record). Check the schema version and open a small async pool (``health.py``: a
   long-running worker waits for an unreachable database, a burst one fails at once), register
   the worker and its tasks, reap expired leases once, and start its helpers, whose lifetimes
   are one ``AsyncExitStack``. Each attempt is one record in the attempts' ledger
   (``attempts.py``), the one owner of its state, which hands disjoint sets to the helpers
   that write its row: the Completer (writes outcomes in batches, ``completer.py``), the
   Heartbeater (renews leases, ``heartbeat.py``); and the overrun watch (handlers past their
   timeout, ``overruns.py``) reads it. Beside them: the Reaper (expired leases, ``reaper.py``),
   the Notifier (LISTEN: wakes the loop when jobs are enqueued; none through a transaction
   pooler without a listen URL), and unless burst, the Scheduler (``schedule/scheduler.py``)
   and the retention rounds (``operations/retention.py``).
2. **Loop** until stopped: *claim* as many due jobs as there are free slots (the Claimer,
   ``claimer.py``, orders the claim kinds: the plain claim, which also writes waiting
   successes, the fair and the flow claims; per-queue slots); *dispatch* each to its own
   asyncio task, started eagerly on Python 3.12+ (``executor.py`` runs the handler: sync ones
   in a bounded thread pool, or a child process with ``isolation="process"``); each
   *completes* by handing its outcome to the ledger, for the Completer; then *wait* for a
   notification, a finished job, the poll interval, or a limit with room. An error pauses the
   loop (logged once per run of failures); only a fatal one (schema gone, permission denied)
   that lasts ``fatal_after`` ends it: the worker hands back its jobs and raises
   :class:`~cronbase.WorkerFatalError`.
3. **Stop** on SIGTERM, SIGINT or SIGHUP (or :meth:`Worker.stop`): no more claims; running
   jobs get the grace period; what still runs is handed back (queued again, attempt not
   counted); pending outcomes are written; the helpers stop; the worker unregisters. Repeated
   signals are the same request (``signals.py``: deploy tools send several); SIGQUIT (or
   ``stop(now=True)``) hands the running jobs back at once. No signal but SIGKILL costs an
   attempt. A stop that comes while the worker is still starting ends the start.

In burst mode the loop ends when nothing is due and nothing runs: "cron wakes a worker".
Database time (``now()``) decides due-ness and leases; this process's clock only paces waits.
One process uses one core: ``supervisor.py`` runs N of them (``cronbase worker --processes N``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import socket
import sys
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..db.health import FailureLog, is_fatal
from ..db.notifier import Notifier
from ..db.outage import OUTAGE, fold_pool_noise
from ..db.pool import is_connection_loss
from ..errors import WorkerFatalError
from ..logs import install_job_context
from ..operations.metrics import WorkerMetrics
from .claim import ClaimedJob
from .executor import execute
from .options import WorkerOptions
from .outcomes import Outcome
from .signals import HINT, StopRequests
from .startup import Parts, Plan, assemble

if TYPE_CHECKING:
    from ..db.database import Database
    from ..schedule.scheduler import ScheduleSpec
    from ..task import Task

logger = logging.getLogger("cronbase")

# Python 3.12+ can start a task eagerly: see _start.
_EAGER = sys.version_info >= (3, 12)
# How long a burst worker waits for a rate-limited job's window to have room.
BURST_RATE_WAIT = 60.0
# How long a stopping worker tries to write its last outcomes when the database fails.
DRAIN_TIMEOUT = 10.0
# How long a stopping worker's hand-back waits for a lease renewal of the same rows to end.
HAND_BACK_WAIT = 5.0


def _start(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Outcome], name: str
) -> asyncio.Task[Outcome]:
    """A job's task. On Python 3.12+ it starts eagerly: the handler runs at once, up to its
    first await, and one that returns without awaiting finishes here, without a turn of the
    event loop (a drain of such jobs: +3-6%, bench/README.md). A task factory the
    application installed on its loop is respected (then not eager)."""
    if _EAGER and loop.get_task_factory() is None:
        return asyncio.Task(coro, loop=loop, name=name, eager_start=True)  # type: ignore[call-arg]
    return loop.create_task(coro, name=name)


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker:
    """Runs jobs of an :class:`~cronbase.App` until stopped. ``app.run_worker()`` is the short way.

    Options (``options.py``): ``queues`` (None = all; a mapping such as ``{"emails": 5,
    "reports": 1}`` gives each queue its own number of jobs at once, so long jobs of one queue
    cannot hold back the others, and ``concurrency`` is then their sum), ``concurrency`` (jobs
    at once), ``burst`` (drain what is due, then return), ``poll_interval`` (fallback when no
    notification comes), ``reap_interval`` (how often expired leases are looked for),
    ``shutdown_grace`` (how long running jobs may take to finish after a stop request),
    ``install_signal_handlers``, ``schedule`` (fire due schedule slots too; burst workers never
    do), ``retention`` (prune old finished jobs; None: never), ``metrics_port`` /
    ``metrics_host`` (serve Prometheus metrics), ``fatal_after`` (how long a fatal database
    error, such as a dropped schema or a revoked grant, may last before the worker hands back
    its jobs and raises :class:`~cronbase.WorkerFatalError`). Durations are timedeltas or
    seconds.

    It claims only jobs of the tasks in ``tasks``; others wait for a worker that knows them.
    """

    def __init__(
        self,
        db: Database,
        tasks: Mapping[str, Task[Any, Any]],
        *,
        periodic: Mapping[str, ScheduleSpec] | None = None,
        worker_id: str | None = None,
        supervisor: str | None = None,
        **options: Any,
    ) -> None:
        self.options = WorkerOptions.build(**options)
        self.db = db
        self.tasks = tasks
        self.periodic = periodic or {}
        self.id = worker_id or new_worker_id()
        # The supervisor that runs this process (host:pid; supervisor.py), on its workers row.
        self.supervisor = supervisor
        self.metrics = WorkerMetrics(db)
        self.claimed = 0
        self.started = asyncio.Event()
        # Set when the loop should look for work again (notification, free slot, stop).
        self._wake = asyncio.Event()
        self._stop = _Stop()
        # Made by run() (startup.assemble): what the loop works with.
        self._parts: Parts | None = None

    @property
    def notifier(self) -> Notifier | None:
        """The worker's listener, once it has started."""
        return None if self._parts is None else self._parts.notifier

    @property
    def parts(self) -> Parts:
        """What the loop works with (the ledger, claimer, completer, runtime, notifier)."""
        assert self._parts is not None, "the worker has not started"
        return self._parts

    def stop(self, *, now: bool = False) -> None:
        """Ask for a graceful stop: no new claims; running jobs get the grace period. With
        ``now``, they are handed back at once (queued again, the attempt not counted). Before
        the worker has started, either ends its start (nothing is held yet). Safe to call from
        any thread (a worker run in a thread of a web server, say)."""
        loop = self._stop.loop
        if loop is not None and not loop.is_closed() and _running_loop() is not loop:
            loop.call_soon_threadsafe(functools.partial(self.stop, now=now))
            return
        self._stop.requested = True
        if now:
            self._stop.now.set()
        self._wake.set()
        if self._stop.starting is not None and not self.started.is_set():
            self._stop.starting.cancel()

    # -- the loop --------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until stopped (or, in burst mode, until nothing is due); see the module docstring."""
        self._stop.loop = asyncio.get_running_loop()
        install_job_context()  # handlers' log records carry job_id, task and attempt
        fold_pool_noise()  # an outage is one line (and one when it is over), not one a retry
        async with contextlib.AsyncExitStack() as stack:
            stack.enter_context(OUTAGE.watched())
            if self.options.install_signal_handlers:
                # First: a signal that comes while the worker connects or registers is a stop
                # too, not Python's default (SIGTERM ends the process where it stands).
                requests = StopRequests(self._on_stop_signal, f"worker {self.id}")
                requests.install(asyncio.get_running_loop(), stack)
            if not await self._start(stack):
                return
            try:
                await self._loop()
            except Exception as exc:
                # The worker ends here (a fatal error, or a burst worker's failure): what it
                # holds goes back to the queue now, not when its leases run out. The error is
                # the caller's to report (the command prints its one line).
                logger.debug("worker %s ends: %r", self.id, exc)
                self._stop.requested = True
                await self._shutdown(grace=0.0)
                raise
            await self._shutdown(grace=self.options.shutdown_grace)
        logger.info("worker %s stopped: %d jobs claimed", self.id, self.claimed)

    async def _start(self, stack: contextlib.AsyncExitStack) -> bool:
        """Start (``startup.py``) in a task of its own, which a stop before it is done cancels
        (waiting for an unreachable database, say): False then, with what it did undone."""
        if self._stop.requested:  # asked before run() began
            return False
        plan = Plan(
            self.id,
            self.db,
            self.tasks,
            self.periodic,
            self.options,
            self.metrics,
            self.supervisor,
        )
        starting = self._stop.starting = asyncio.ensure_future(assemble(plan, self._wake, stack))
        try:
            self._parts = await starting
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not self._stop.requested or (current is not None and current.cancelling()):
                raise  # not a stop request: whoever cancelled run() is to hear of it
            logger.info("worker %s stopped before it started", self.id)
            return False
        finally:
            self._stop.starting = None
        self.started.set()
        return True

    async def _loop(self) -> None:
        failures = FailureLog("claiming jobs")
        parts = self.parts
        claimer, completer, ledger = parts.claimer, parts.completer, parts.ledger
        while not self._stop.requested:
            written = completer.written
            # Cleared before claiming: a notification or a finished job from now on leads to
            # another claim, one from before is answered by this one.
            self._wake.clear()
            try:
                jobs = await claimer.claim(ledger.running)
            except Exception as exc:
                if is_connection_loss(exc):
                    # The claim may have committed with its reply lost: after the next claim
                    # that works, hand back whatever is leased to us that we do not know of.
                    claimer.may_hold_orphans = True
                # Whatever failed (the database restarting or failing over, a bug), running
                # jobs carry on: the heartbeater and the completer retry their own writes. Only
                # a fatal error that lasts ends the worker; a burst one, started by cron, says
                # so and exits rather than wait.
                if self.options.burst:
                    raise
                pause = failures.failed(exc)
                if is_fatal(exc) and failures.duration >= self.options.fatal_after:
                    raise WorkerFatalError(
                        f"worker {self.id}: {failures.describe(exc)} for "
                        f"{failures.duration:.0f}s; handing back its jobs and exiting"
                    ) from exc
                self._wake.clear()  # or a pending wake-up would end the pause at once
                await self._sleep(pause)
                continue
            failures.succeeded()
            self._dispatch(jobs)
            if claimer.may_hold_orphans:
                await claimer.release_orphans(list(ledger.running))
            if self.options.burst and not jobs and not ledger.running and not self._burst_waits():
                if completer.pending_jobs:
                    await completer.drain()  # its outcomes may release dependents
                    continue
                if completer.written == written:
                    return
                continue  # outcomes written since this claim began may have released dependents
            # Until a notification, a finished job or a stop request wakes us, or it is time to
            # poll (the fallback for a lost notification), or a limit that held jobs back may
            # have room. With every slot busy a wake-up claims nothing; the one after a job
            # finishes does.
            retry_in = claimer.retry_in
            pause = self.options.poll_interval
            await self._sleep(pause if retry_in is None else min(pause, retry_in))

    async def _sleep(self, seconds: float) -> None:
        # A timer that sets the wake-up event, not asyncio.timeout(): the same wait, without a
        # Timeout object and a cancellation to unwind once per claim.
        timer = asyncio.get_running_loop().call_later(max(seconds, 0.0), self._wake.set)
        try:
            await self._wake.wait()
        finally:
            timer.cancel()

    def _burst_waits(self) -> bool:
        """Whether a burst worker with nothing to run waits for limited jobs: when another
        worker was claiming in their scope, or their rate has room again within
        BURST_RATE_WAIT. Jobs held back by another worker's running jobs are that worker's to
        run; a window further off is the next burst's."""
        retry_in = self.parts.claimer.retry_in
        return retry_in is not None and retry_in <= BURST_RATE_WAIT

    def _dispatch(self, jobs: list[ClaimedJob]) -> None:
        # Per job, the loop below is the worker's hottest Python: no log record (nor its extra
        # dict) unless someone listens.
        log_claims = logger.isEnabledFor(logging.INFO)
        loop = asyncio.get_running_loop()
        ledger = self.parts.ledger
        for job in jobs:
            if log_claims:
                logger.info(
                    "job %d claimed: task=%s attempt=%d",
                    job.id,
                    job.task,
                    job.attempt,
                    extra={
                        "event": "claimed",
                        "job_id": job.id,
                        "task": job.task,
                        "queue": job.queue,
                        "attempt": job.attempt,
                    },
                )
            task = _start(loop, self._run_job(job), f"cronbase-job-{job.id}")
            if not task.done():  # an eager one may have run to its end (and been recorded)
                ledger.started(job, task)
        if jobs:
            self.metrics.count_claimed(jobs)
            ledger.claimed(jobs)
            self.claimed += len(jobs)

    async def _run_job(self, job: ClaimedJob) -> Outcome:
        parts = self.parts
        outcome = None
        try:
            outcome = await execute(parts.runtime, job)
            return outcome
        finally:
            # Also on cancellation (lease lost, grace period over): nothing is written then.
            # An attempt whose lease was lost is no longer ours to complete (the completion
            # would be fenced out anyway; the ledger saves the round trip and the warning).
            parts.ledger.finish(job, outcome)

    # -- start and stop --------------------------------------------------------------------------

    async def _shutdown(self, grace: float) -> None:
        ledger, completer = self.parts.ledger, self.parts.completer
        now = self._stop.now
        tasks = [a.task for a in ledger.running.values() if a.task is not None]
        if tasks and grace > 0 and not now.is_set():
            # Until they are all done, the grace period is over, or stop(now=True). Cancelling
            # asyncio.wait() leaves the jobs' tasks alone.
            waits = [asyncio.ensure_future(asyncio.wait(tasks)), asyncio.ensure_future(now.wait())]
            await asyncio.wait(waits, timeout=grace, return_when=asyncio.FIRST_COMPLETED)
            for wait in waits:
                wait.cancel()
        leftover = [
            (job, a.task)
            for job, a in ledger.running.items()
            if a.task is not None and not a.task.done()
        ]
        if leftover:
            logger.warning(
                "%s: handing back %d running jobs (attempt not counted)",
                "grace period over" if grace > 0 else "stopping",
                len(leftover),
            )
            for _, task in leftover:
                task.cancel()
            jobs = [job for job, _ in leftover]
            # Not beside a renewal of the same rows (they could deadlock), and no longer ours
            # to renew once handed back, even before their tasks have unwound: the ledger
            # takes them out of every later renewal.
            await ledger.hand_back(jobs, HAND_BACK_WAIT)
            await self.parts.claimer.hand_back(jobs, "worker shut down before it finished")
            await asyncio.gather(*(task for _, task in leftover), return_exceptions=True)
        try:
            # Bounded: with the database gone for good the completer would retry forever. What
            # it could not write runs again when its leases expire (the fence keeps that safe).
            drain = DRAIN_TIMEOUT if now.is_set() else max(grace, DRAIN_TIMEOUT)
            async with asyncio.timeout(drain):
                await completer.drain()
        except TimeoutError:
            logger.warning(
                "could not record %d outcomes before stopping; those jobs run again when their "
                "leases expire",
                len(completer.pending_jobs),
            )

    # -- signals ---------------------------------------------------------------------------------

    def _on_stop_signal(self, now: bool, name: str) -> None:
        running = 0 if self._parts is None else len(self._parts.ledger.running)
        if now:
            logger.info("%s: handing back %d running jobs now, then exiting", name, running)
        else:
            logger.info(
                "%s: finishing %d running jobs (grace %.0fs), then exiting; %s",
                name,
                running,
                self.options.shutdown_grace,
                HINT,
            )
        self.stop(now=now)


@dataclass
class _Stop:
    """A stop request: asked for, hand back at once (``now``), and the start it may cancel."""

    requested: bool = False
    now: asyncio.Event = field(default_factory=asyncio.Event)
    starting: asyncio.Future[Parts] | None = None
    # The loop the worker runs on: a stop asked from another thread is passed to it.
    loop: asyncio.AbstractEventLoop | None = None


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
