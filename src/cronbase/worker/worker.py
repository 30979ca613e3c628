"""THE core loop of cronbase: wait -> claim -> dispatch -> complete. Read this first.

In order, :meth:`Worker.run`:

1. checks the schema version and opens a small async pool (``health.connect_when_ready``: a
   long-running worker waits for an unreachable database, a burst one fails at once), registers
   the worker with its tasks, and starts its helpers: the Notifier (LISTEN, wakes the loop when
   jobs are enqueued; none through a transaction pooler without a listen URL), the Heartbeater
   (renews the leases of running jobs, ``heartbeat.py``) and the Completer (writes outcomes in
   batches, ``completer.py``); and, unless disabled, the Scheduler (turns due schedule slots into
   jobs, ``schedule/scheduler.py``) and the pruner (``maintenance.py``);
2. loops: every ``reap_interval`` make jobs with expired leases claimable again; claim as many due
   jobs of its registered tasks as there are free slots, in one statement that also writes the
   successes waiting in the Completer (``claim.py`` owns it; ``claim_jobs`` in
   ``db/sql/jobs.sql``); a claimed row that cannot be decoded becomes that job's own dead
   outcome; start each job in its own asyncio task (``executor.py``: sync handlers go to a bounded
   thread pool); then sleep until a notification, a finished job, the poll interval or the next
   reap. Any error pauses the loop (logged once per run of failures); it does not end it, unless
   it is fatal (schema gone, permission denied) and lasts ``fatal_after``: then the worker hands
   back its jobs and raises :class:`~cronbase.WorkerFatalError`;
3. on SIGTERM/SIGINT (or :meth:`Worker.stop`) stops claiming, lets running jobs finish within the
   grace period, hands back what is still running (queued again, attempt not counted), writes
   pending outcomes, unregisters and closes. A second signal exits the process at once.

In burst mode the loop ends when nothing is due and nothing runs: "cron wakes a worker".
Database time (``now()``) decides due-ness and leases; this process's clock only paces waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
from collections import Counter as Tally
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING

from prometheus_client import Counter

from ..db.notifier import Notifier
from ..db.pool import describe as describe_url
from ..db.pool import is_connection_loss
from ..durations import DurationLike, duration
from ..errors import ConfigurationError, WorkerFatalError
from ..limits import INT4_MAX, check_name
from ..logs import install_job_context
from ..maintenance import Retention, run_retention
from ..metrics import WorkerMetrics
from ..metrics import serve as serve_metrics
from ..metrics import stop as stop_metrics
from ..schedule.scheduler import Scheduler
from .claim import ClaimedJob, claim_jobs, claim_params
from .completer import Completer
from .executor import Outcome, Runtime, execute, undecodable
from .flow import FlowClaim, candidate_params, claim_flow_jobs, register_params, task_flows
from .health import FailureLog, connect_when_ready, is_fatal
from .heartbeat import Heartbeater
from .isolation import Children
from .overruns import Overruns

if TYPE_CHECKING:
    from typing import Any

    from psycopg_pool import AsyncConnectionPool

    from ..db.database import Database
    from ..schedule.scheduler import ScheduleSpec
    from ..task import Task

logger = logging.getLogger("cronbase")

REAP_BATCH = 1000
# How soon a worker looks again when another worker held the lock of a scope it wanted.
FLOW_CONTENDED_RETRY = 0.05
# How long a burst worker waits for a rate-limited job's window to have room.
BURST_RATE_WAIT = 60.0
# How long a stopping worker tries to write its last outcomes when the database fails.
DRAIN_TIMEOUT = 10.0


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


DEFAULT_RETENTION = Retention()


class Worker:
    """Runs jobs of an :class:`~cronbase.App` until stopped. ``app.run_worker()`` is the short way.

    Options: ``queues`` (None = all; a mapping such as ``{"emails": 5, "reports": 1}`` gives
    each queue its own number of jobs at once, so long jobs of one queue cannot hold back the
    others, and ``concurrency`` is then their sum), ``concurrency`` (jobs at once), ``burst``
    (drain what is
    due, then return), ``poll_interval`` (fallback when no notification comes), ``reap_interval``
    (how often expired leases are looked for), ``shutdown_grace`` (how long running jobs may take
    to finish after a stop request), ``install_signal_handlers``, ``schedule`` (fire due schedule
    slots too; burst workers never do), ``retention`` (prune old finished jobs; None: never),
    ``metrics_port`` / ``metrics_host`` (serve Prometheus metrics), ``fatal_after`` (how long a
    fatal database error, such as a dropped schema or a revoked grant, may last before the worker
    hands back its jobs and raises :class:`~cronbase.WorkerFatalError`). Durations are
    timedeltas or seconds.

    It claims only jobs of the tasks in ``tasks``; others wait for a worker that knows them.
    """

    def __init__(
        self,
        db: Database,
        tasks: Mapping[str, Task[Any, Any]],
        *,
        periodic: Mapping[str, ScheduleSpec] | None = None,
        queues: Sequence[str] | Mapping[str, int] | None = None,
        concurrency: int = 10,
        burst: bool = False,
        poll_interval: DurationLike = timedelta(seconds=1),
        reap_interval: DurationLike = timedelta(seconds=5),
        shutdown_grace: DurationLike = timedelta(seconds=25),
        install_signal_handlers: bool = True,
        worker_id: str | None = None,
        schedule: bool = True,
        retention: Retention | None = DEFAULT_RETENTION,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        fatal_after: DurationLike = timedelta(seconds=30),
    ) -> None:
        if queues is not None and not queues:
            raise ConfigurationError("queues must name at least one queue (or be None for all)")
        for queue in queues or []:
            check_name("queue", queue)
        # Per-queue concurrency: each queue's jobs at once, counted here (one worker's own
        # limit; a fleet-wide one is app.queues.set_limit).
        self.queue_caps: dict[str, int] | None = None
        if isinstance(queues, Mapping):
            for queue, cap in queues.items():
                if not isinstance(cap, int) or isinstance(cap, bool) or not 1 <= cap <= INT4_MAX:
                    raise ConfigurationError(
                        f"queue {queue!r}: concurrency must be a whole number from 1 to "
                        f"{INT4_MAX:,}, got {cap!r}"
                    )
            self.queue_caps = dict(sorted(queues.items()))
            concurrency = sum(self.queue_caps.values())
        if not 1 <= concurrency <= INT4_MAX:  # the workers table's integer column
            raise ConfigurationError(
                f"concurrency must be from 1 to {INT4_MAX:,}, got {concurrency}"
            )
        self.db = db
        self.tasks = tasks
        self.periodic = periodic or {}
        self.queues = sorted(set(queues)) if queues else None
        self.concurrency = concurrency
        self.burst = burst
        # Durations: timedeltas or seconds (durations.py), kept as seconds for asyncio.
        self.poll_interval = duration("poll_interval", poll_interval, positive=True).total_seconds()
        self.reap_interval = duration("reap_interval", reap_interval, positive=True).total_seconds()
        self.shutdown_grace = duration("shutdown_grace", shutdown_grace).total_seconds()
        self.install_signal_handlers = install_signal_handlers
        # A long-running worker also fires due schedule slots; a burst worker never does
        # (`cronbase tick` ticks once, then drains in burst mode).
        self.schedule = schedule and not burst
        # Pruning old finished jobs is a long-running worker's chore too (one at a time).
        self.retention = None if burst else retention
        # How long an error that waiting cannot cure (schema gone, permission denied) may last
        # before the worker hands back its jobs and exits.
        self.fatal_after = duration("fatal_after", fatal_after).total_seconds()
        self.metrics = WorkerMetrics(db)
        self._claimed_counters: dict[tuple[str, str], Counter] = {}
        self._finished_counters: dict[tuple[str, str, str], Counter] = {}
        if metrics_port is not None and (
            not isinstance(metrics_port, int)
            or isinstance(metrics_port, bool)
            or not 1 <= metrics_port <= 65535
        ):
            raise ConfigurationError(
                f"metrics_port must be a port from 1 to 65535 (or None), got {metrics_port!r}"
            )
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.id = worker_id or new_worker_id()
        self._task_names = sorted(tasks)
        # Flow control: the limits this worker's tasks declare, the limited queues it serves
        # (asked at each reap), where its next flow claim starts its round robin, and when to
        # look again for jobs a limit held back (None: on the usual wake-ups).
        self._flows = task_flows(tasks)
        self._limited_queues: frozenset[str] = frozenset()
        self._flow_after: str | None = None
        self._flow_retry_in: float | None = None
        self.claimed = 0
        self.notifier: Notifier | None = None
        # Set when the loop should look for work again (notification, free slot, stop).
        self._wake = asyncio.Event()
        self._stopping = False
        # Set when a claim failed with its connection: it may have committed unseen.
        self._may_hold_orphans = False
        self._signals = 0
        # Keyed by the attempt (ClaimedJob compares by identity), not job id: an attempt whose
        # lease was lost may still be running in its thread when this worker claims the same job
        # again. Identity hashing is also cheaper than hashing a UUID, twice a job.
        self._running: dict[ClaimedJob, asyncio.Task[Outcome]] = {}
        self._lost: set[ClaimedJob] = set()
        self._pool: AsyncConnectionPool | None = None
        self._completer: Completer | None = None
        self._heartbeater: Heartbeater | None = None
        self._threads = ThreadPoolExecutor(concurrency, thread_name_prefix="cronbase-job")
        # Child processes for the sync handlers of isolation="process" tasks (none without).
        self._children: Children | None = None
        self._overruns: Overruns | None = None
        self._runtime: Runtime | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self.started = asyncio.Event()

    # -- control ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask for a graceful stop: no new claims; running jobs get the grace period."""
        self._stopping = True
        self._wake.set()

    def _on_signal(self, signum: int) -> None:
        self._signals += 1
        if self._signals > 1:
            logger.warning("second %s: exiting now", signal.Signals(signum).name)
            os._exit(128 + signum)
        logger.info(
            "%s: finishing %d running jobs (grace %.0fs), then exiting",
            signal.Signals(signum).name,
            len(self._running),
            self.shutdown_grace,
        )
        self.stop()

    def _on_notify(self, queue: str) -> None:
        if self.queues is None or queue in self.queues:
            self._wake.set()

    # -- the loop --------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until stopped (or, in burst mode, until nothing is due); see the module docstring."""
        loop = self._event_loop = asyncio.get_running_loop()
        install_job_context()  # handlers' log records carry job_id, task and attempt
        # First, so a busy port fails the worker before it connects, registers or says it
        # started (ConfigurationError, one line).
        metrics_server = serve_metrics(self.metrics_port, self.metrics_host, self.metrics.registry)
        # A burst worker (cron, a CLI command) fails fast; a long-running one waits for the
        # database (a deploy racing a database restart), saying so.
        try:
            self._pool = await connect_when_ready(self.db, self.id, wait=not self.burst)
        except BaseException:
            stop_metrics(metrics_server)
            raise
        installed = []
        helpers: list[asyncio.Task[None]] = []
        try:
            if self.install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, self._on_signal, sig)
                    installed.append(sig)
            q = self.db.queries
            async with self._pool.connection() as conn:
                await conn.execute(
                    q.register_worker,
                    {
                        "id": self.id,
                        "hostname": socket.gethostname(),
                        "pid": os.getpid(),
                        "queues": self.queues,
                        "concurrency": self.concurrency,
                        "tasks": sorted(self.tasks),
                    },
                )
                # The limits in this code are the fleet's from now on (last worker started wins).
                await conn.execute(q.register_task_limits, register_params(self.tasks))
            self._completer = Completer(self._pool, q, self.id, self._on_written)
            self._overruns = Overruns(self._count_overrun, lambda: heartbeater.progress_changed())
            heartbeater = self._heartbeater = Heartbeater(
                self._pool,
                q,
                self.id,
                self._held,
                self._on_lease_lost,
                self.metrics.lease_renewals.inc,
                overruns=self._overruns.snapshot,
            )
            if any(t.isolation == "process" for t in self.tasks.values()):
                self._children = Children(self.db.url, logging.getLogger("cronbase").level)
            self._runtime = Runtime(
                self.db,
                self.tasks,
                self._threads,
                self._children,
                self.id,
                self._progress_from_any_thread,
                self._on_timeout,
            )
            self.notifier = Notifier(
                lambda: self.db.connect_listener(f"cronbase-listener {self.id}"),
                self.db.channel,
                self._on_notify,
                self._wake.set,
            )
            helpers = [
                asyncio.create_task(self._completer.run(), name="cronbase-completer"),
                asyncio.create_task(self._heartbeater.run(), name="cronbase-heartbeat"),
                asyncio.create_task(self._overruns.run(), name="cronbase-overruns"),
            ]
            if not self.burst:
                if self.db.listen_url is not None:
                    helpers.append(asyncio.create_task(self.notifier.run(), name="cronbase-listen"))
                else:
                    logger.info(
                        "transaction pooler and no listen_url: polling every %.1fs instead of "
                        "LISTEN (set CRONBASE_LISTEN_URL to a direct URL for instant pick-up)",
                        self.poll_interval,
                    )
            if self.schedule:
                scheduler = Scheduler(self.db, self.tasks, self.periodic).run()
                helpers.append(asyncio.create_task(scheduler, name="cronbase-scheduler"))
            if self.retention is not None:
                pruner = run_retention(self._pool, self.db, self.retention)
                helpers.append(asyncio.create_task(pruner, name="cronbase-retention"))
            logger.info(
                "worker %s started on %s: queues=%s concurrency=%d%s%s",
                self.id,
                describe_url(self.db.url),
                ",".join(
                    [f"{q}={n}" for q, n in self.queue_caps.items()]
                    if self.queue_caps
                    else self.queues or ["*"]
                ),
                self.concurrency,
                " burst" if self.burst else "",
                " schedules" if self.schedule else "",
            )
            self.started.set()
            try:
                await self._loop()
            except Exception as exc:
                # The worker ends here (a fatal error, or a burst worker's failure): what it
                # holds goes back to the queue now, not when its leases run out. The error is
                # the caller's to report (the command prints its one line).
                logger.debug("worker %s ends: %r", self.id, exc)
                self._stopping = True
                await self._shutdown(grace=0.0)
                raise
            await self._shutdown(grace=self.shutdown_grace)
        finally:
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            for sig in installed:
                loop.remove_signal_handler(sig)
            stop_metrics(metrics_server)
            try:
                async with self._pool.connection() as conn:
                    await conn.execute(self.db.queries.unregister_worker, {"id": self.id})
            except Exception as exc:  # the database may be what failed; do not hide the cause
                logger.warning("could not unregister worker %s: %s", self.id, exc)
            await self._pool.close()
            if self._children is not None:
                self._children.close()
            self._threads.shutdown(wait=False, cancel_futures=True)
            logger.info("worker %s stopped: %d jobs claimed", self.id, self.claimed)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_reap = loop.time()
        failures = FailureLog("claiming jobs")
        assert self._completer is not None
        while not self._stopping:
            written = self._completer.written
            try:
                if loop.time() >= next_reap:
                    await self._reap()
                    next_reap = loop.time() + self.reap_interval
                claimed = await self._claim_free_slots()
            except Exception as exc:
                if is_connection_loss(exc):
                    # The claim may have committed with its reply lost: after the next claim
                    # that works, hand back whatever is leased to us that we do not know of.
                    self._may_hold_orphans = True
                # Whatever failed (the database restarting or failing over, a bug), running
                # jobs carry on: the heartbeater and the completer retry their own writes. Only
                # a fatal error (schema gone, permission denied) that lasts ends the worker; a
                # burst worker, started by cron, says so and exits rather than wait.
                if self.burst:
                    raise
                pause = failures.failed(exc)
                if is_fatal(exc) and failures.duration >= self.fatal_after:
                    raise WorkerFatalError(
                        f"worker {self.id}: {failures.describe(exc)} for "
                        f"{failures.duration:.0f}s; handing back its jobs and exiting"
                    ) from exc
                self._wake.clear()  # or a pending wake-up would end the pause at once
                await self._sleep(pause)
                continue
            failures.succeeded()
            if self._may_hold_orphans:
                await self._release_orphans()
            if self.burst and not claimed and not self._running and not self._burst_waits():
                if self._completer.pending_jobs:
                    await self._completer.drain()  # its outcomes may release dependents
                    continue
                if self._completer.written == written:
                    return
                continue  # outcomes written since this claim began may have released dependents
            # Until a notification, a finished job or a stop request wakes us, or it is time to
            # poll (the fallback for a lost notification) or to reap, or a limit that held jobs
            # back may have room (a rate's window moves on; another worker's claim in the same
            # scope ends). With every slot busy a wake-up claims nothing; the one after a job
            # finishes does.
            pause = min(self.poll_interval, next_reap - loop.time())
            if self._flow_retry_in is not None:
                pause = min(pause, self._flow_retry_in)
            await self._sleep(pause)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(seconds, 0.0)):
                await self._wake.wait()

    async def _claim_free_slots(self) -> list[ClaimedJob]:
        # Cleared before claiming: a notification or a finished job from now on leads to
        # another claim, one from before is answered by this one.
        self._wake.clear()
        self._flow_retry_in = None
        if self._stopping:  # a signal came during the reap
            return []
        if self.queue_caps is None:
            free = self.concurrency - len(self._running)
            return await self._claim(free, self.queues) if free > 0 else []
        # A claim per queue with free slots (no prefetch beyond them: graphile-worker's shared
        # prefetch broke its per-queue limits, #621).
        running = Tally(job.queue for job in self._running)
        jobs: list[ClaimedJob] = []
        for queue, cap in self.queue_caps.items():
            free = cap - running[queue]
            if free > 0:
                jobs += await self._claim(free, [queue])
        return jobs

    def _burst_waits(self) -> bool:
        """Whether a burst worker with nothing to run waits for limited jobs: when another
        worker was claiming in their scope, or their rate has room again within
        BURST_RATE_WAIT. Jobs held back by another worker's running jobs are that worker's to
        run; a window further off is the next burst's."""
        retry_in = self._flow_retry_in
        return retry_in is not None and retry_in <= BURST_RATE_WAIT

    def _is_limited(self, job: ClaimedJob) -> bool:
        return job.task in self._flows or job.queue in self._limited_queues

    async def _claim(self, limit: int, queues: list[str] | None) -> list[ClaimedJob]:
        assert self._heartbeater is not None
        assert self._completer is not None
        # The successes waiting to be written ride on this claim: one statement, one commit.
        carried = self._completer.take_successes()
        jobs: list[ClaimedJob] = []
        if self._flows or self._limited_queues:
            if any(self._is_limited(o.job) for o in carried):
                # Write them first: the slots they held are free for the flow claim below.
                await self._claim_plain(carried, 0, queues)
                carried = []
            jobs = await self._claim_flow(limit, queues)
            limit -= len(jobs)
        if limit > 0 or carried:
            jobs += await self._claim_plain(carried, limit, queues)
        jobs.sort(key=lambda j: (j.priority, j.id))
        self._start(jobs)
        return jobs

    async def _claim_plain(
        self, carried: list[Outcome], limit: int, queues: list[str] | None
    ) -> list[ClaimedJob]:
        """claim_jobs: up to ``limit`` unlimited jobs, writing the ``carried`` successes."""
        assert self._pool is not None
        assert self._completer is not None
        params = claim_params(
            done=[o.job for o in carried],
            limit=limit,
            worker=self.id,
            queues=queues,
            tasks=self._task_names,
        )
        try:
            async with self._pool.connection() as conn:
                result = await claim_jobs(conn, self.db.queries, params, self.db.json_loads)
        except BaseException:
            self._completer.give_back(carried)
            raise
        self._completer.settle(carried, result.written_ids)
        for bad in result.undecodable:
            # Its own outcome, written like any other; its batch-mates run on.
            self._completer.add(undecodable(bad))
        return result.jobs

    async def _claim_flow(self, limit: int, queues: list[str] | None) -> list[ClaimedJob]:
        """claim_flow_jobs (flow.py): up to ``limit`` limited jobs that fit in their limits."""
        assert self._pool is not None
        assert self._completer is not None
        params = candidate_params(
            schema=self.db.schema,
            limit=limit,
            flows=self._flows,
            after=self._flow_after,
            tasks=self._task_names,
            queues=queues,
        )
        async with self._pool.connection() as conn:
            flow: FlowClaim = await claim_flow_jobs(
                conn,
                self.db.queries,
                params,
                worker=self.id,
                limit=limit,
                loads=self.db.json_loads,
            )
        for bad in flow.result.undecodable:
            self._completer.add(undecodable(bad))
        # The next claim's round robin starts after the last scope served (from the start
        # once none was).
        self._flow_after = flow.last_scope
        # Another worker was claiming in a scope this one wanted: its transaction is short, so
        # look again soon. A rate held a job back: look again when its window has room.
        retry_in = FLOW_CONTENDED_RETRY if flow.contended else flow.open_in
        if retry_in is not None:
            self._flow_retry_in = min(retry_in, self._flow_retry_in or retry_in)
        return flow.result.jobs

    def _start(self, jobs: list[ClaimedJob]) -> None:
        assert self._heartbeater is not None
        # Per job, the loop below is the worker's hottest Python: no log record (nor its extra
        # dict) unless someone listens, and metrics counted per task and queue, once a batch.
        log_claims = logger.isEnabledFor(logging.INFO)
        counts: dict[tuple[str, str], int] = {}
        for job in jobs:
            key = (job.task, job.queue)
            counts[key] = counts.get(key, 0) + 1
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
            task = asyncio.create_task(self._run_job(job), name=f"cronbase-job-{job.id}")
            self._running[job] = task
        for key, n in counts.items():
            counter = self._claimed_counters.get(key)
            if counter is None:
                counter = self._claimed_counters[key] = self.metrics.claimed.labels(*key)
            counter.inc(n)
        if jobs:
            # A lease shorter than any held so far must be renewed sooner than planned.
            self._heartbeater.jobs_changed()
        self.claimed += len(jobs)

    async def _run_job(self, job: ClaimedJob) -> Outcome:
        assert self._completer is not None
        assert self._runtime is not None
        assert self._overruns is not None
        try:
            outcome = await execute(self._runtime, job)
            # An attempt whose lease was lost is no longer ours to complete (the completion
            # would be fenced out anyway; this saves the round trip and the warning).
            if job not in self._lost and not outcome.written:
                self._completer.add(outcome)
            return outcome
        finally:
            # Also on cancellation (lease lost, grace period over): nothing is written then.
            self._overruns.returned(job)
            self._running.pop(job, None)
            self._lost.discard(job)
            self._wake.set()

    def _on_written(self, written: list[tuple[Outcome, str]]) -> None:
        """Metrics for a batch of written outcomes: counters once per task, queue and status."""
        counts: dict[tuple[str, str, str], int] = {}
        for outcome, status in written:
            job = outcome.job
            key = (job.task, job.queue, status)
            counts[key] = counts.get(key, 0) + 1
            self.metrics.duration.labels(job.task, job.queue).observe(outcome.duration)
        for key, n in counts.items():
            finished = self._finished_counters.get(key)
            if finished is None:
                finished = self._finished_counters[key] = self.metrics.finished.labels(*key)
            finished.inc(n)

    def _on_timeout(self, job: ClaimedJob, note: str) -> None:
        logger.warning(
            "job %d (%s) attempt %d: past its timeout; %s",
            job.id,
            job.task,
            job.attempt,
            note,
            extra={"event": "timed_out", "job_id": job.id, "task": job.task},
        )
        self.metrics.timeouts.labels(job.task, job.queue).inc()
        if self._overruns is not None:
            self._overruns.timed_out(job)
        if self._heartbeater is not None:
            # The renewal that follows keeps the lease of an attempt that runs on.
            self._heartbeater.jobs_changed()

    def _count_overrun(self, job: ClaimedJob) -> None:
        self.metrics.overruns.labels(job.task, job.queue).inc()

    def _progress_from_any_thread(self) -> None:
        # Handlers report progress from their own thread (sync) or from the loop (async).
        if self._heartbeater is not None and self._event_loop is not None:
            self._event_loop.call_soon_threadsafe(self._heartbeater.progress_changed)

    def _held(self) -> list[ClaimedJob]:
        assert self._completer is not None
        # A job whose transaction() committed is finished: nothing left to renew.
        running = [job for job in self._running if job not in self._lost and not job.completed]
        # Outcomes not yet written keep their leases renewed, or a slow write could let the
        # reaper hand a finished job to another worker.
        return running + [o.job for o in self._completer.pending_jobs]

    def _on_lease_lost(self, job: ClaimedJob) -> None:
        running = self._running.get(job)
        if running is None or job in self._lost:
            # Known already, or finished between the heartbeat's snapshot and its renewal: the
            # outcome is then with the completer, whose write is fenced by the same token.
            return
        logger.warning(
            "job %d attempt %d (%s): lease lost (expired, cancelled or retried by an operator); "
            "its outcome will not be recorded",
            job.id,
            job.attempt,
            job.task,
        )
        self._lost.add(job)
        context = job.__dict__.get("context")
        if context is not None:
            context.lease_lost = True  # no effect and no transaction() may start now
        # An async handler can be stopped, and a child process killed; a sync one in a thread
        # runs on, fenced out, and keeps its slot until it returns.
        task = self.tasks.get(job.task)
        if task is not None and (task.is_async or task.isolation == "process"):
            running.cancel()

    async def _release_orphans(self) -> None:
        assert self._pool is not None
        assert self._completer is not None
        held = [job.lease_token for job in self._running]
        held += [o.job.lease_token for o in self._completer.pending_jobs]
        try:
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    self.db.queries.release_orphaned_jobs,
                    {"worker": self.id, "tokens": held, "channel": self.db.channel},
                )
                released = [row[0] for row in await cur.fetchall()]
        except Exception as exc:  # tried again after the next claim; the leases expire anyway
            logger.warning("could not look for jobs claimed by a lost reply: %s", exc)
            return
        self._may_hold_orphans = False
        if released:
            logger.warning(
                "handed back jobs %s: claimed by a statement whose reply was lost (attempt not "
                "counted)",
                ", ".join(map(str, released)),
            )

    async def _reap(self) -> None:
        assert self._pool is not None
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                self.db.queries.reap_expired_jobs,
                {"limit": REAP_BATCH, "channel": self.db.channel},
            )
            for job_id, status in await cur.fetchall():
                logger.warning("job %d: lease expired (worker gone?); now %s", job_id, status)
            # Which queues are limited: their jobs are left to the flow claim. A limit an
            # operator sets holds back the plain claim at once; this worker's flow claim takes
            # the queue's jobs from the next reap on.
            cur = await conn.execute(self.db.queries.list_limited_queues)
            limited = {name for (name,) in await cur.fetchall()}
            if self.queues is not None:
                limited &= set(self.queues)
            self._limited_queues = frozenset(limited)
            if any(
                f.rate is not None and f.concurrency_key is not None for f in self._flows.values()
            ):
                await conn.execute(self.db.queries.prune_flow_logs)

    # -- shutdown --------------------------------------------------------------------------------

    async def _shutdown(self, grace: float) -> None:
        assert self._pool is not None
        assert self._completer is not None
        tasks = list(self._running.values())
        if tasks and grace > 0:
            await asyncio.wait(tasks, timeout=grace)
        leftover = [(job, task) for job, task in self._running.items() if not task.done()]
        if leftover:
            logger.warning(
                "%s: handing back %d running jobs (attempt not counted)",
                "grace period over" if grace > 0 else "stopping",
                len(leftover),
            )
            for _, task in leftover:
                task.cancel()
            jobs = [job for job, _ in leftover]
            try:
                async with self._pool.connection() as conn:
                    await conn.execute(
                        self.db.queries.release_jobs,
                        {
                            "ids": [j.id for j in jobs],
                            "tokens": [j.lease_token for j in jobs],
                            "worker": self.id,
                            "channel": self.db.channel,
                            "reason": "worker shut down before it finished",
                        },
                    )
            except Exception as exc:  # the database may be what failed
                logger.warning(
                    "could not hand back jobs %s (%s); they run again when their leases expire",
                    ", ".join(str(j.id) for j in jobs),
                    str(exc).strip(),
                )
            await asyncio.gather(*(task for _, task in leftover), return_exceptions=True)
        try:
            # Bounded: with the database gone for good the completer would retry forever. What
            # it could not write runs again when its leases expire (the fence keeps that safe).
            async with asyncio.timeout(max(grace, DRAIN_TIMEOUT)):
                await self._completer.drain()
        except TimeoutError:
            logger.warning(
                "could not record %d outcomes before stopping; those jobs run again when their "
                "leases expire",
                len(self._completer.pending_jobs),
            )
