"""THE core loop of cronbase: wait -> claim -> dispatch -> complete. Read this first.

In order, :meth:`Worker.run`:

1. opens a small async pool, checks the schema version, registers the worker, and starts three
   helpers: the Notifier (LISTEN, wakes the loop when jobs are enqueued), the Heartbeater
   (renews the leases of running jobs, ``heartbeat.py``) and the Completer (writes outcomes in
   batches, ``completer.py``); and, unless disabled, the Scheduler (turns due schedule slots into
   jobs, ``schedule/scheduler.py``);
2. loops: every ``reap_interval`` make jobs with expired leases claimable again; claim as many due
   jobs as there are free slots, in one statement that also writes the successes waiting in the
   Completer (``claim_jobs`` in ``db/sql/jobs.sql``); start
   each in its own asyncio task (``executor.py``: sync handlers go to a bounded thread pool); then
   sleep until a notification, a finished job, the poll interval or the next reap. A lost
   database connection pauses the loop; it does not end it;
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
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING

import psycopg
from prometheus_client import Counter, start_http_server

from ..db import migrate, pool
from ..db.notifier import Notifier
from ..errors import ConfigurationError
from ..maintenance import Retention, run_retention
from ..metrics import WorkerMetrics
from ..schedule.scheduler import Scheduler
from .completer import Completer, claim_params, split_claim_rows
from .executor import ClaimedJob, Outcome, execute
from .heartbeat import Heartbeater

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from ..app import App

logger = logging.getLogger("cronbase")

REAP_BATCH = 1000


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


DEFAULT_RETENTION = Retention()


class Worker:
    """Runs jobs of an :class:`~cronbase.App` until stopped. ``app.run_worker()`` is the short way.

    Options: ``queues`` (None = all), ``concurrency`` (jobs at once), ``burst`` (drain what is
    due, then return), ``poll_interval`` (fallback when no notification comes), ``reap_interval``
    (how often expired leases are looked for), ``shutdown_grace`` (how long running jobs may take
    to finish after a stop request), ``install_signal_handlers``, ``schedule`` (fire due schedule
    slots too; burst workers never do), ``retention`` (prune old finished jobs; None: never),
    ``metrics_port`` / ``metrics_host`` (serve Prometheus metrics).
    """

    def __init__(
        self,
        app: App,
        *,
        queues: list[str] | None = None,
        concurrency: int = 10,
        burst: bool = False,
        poll_interval: timedelta = timedelta(seconds=1),
        reap_interval: timedelta = timedelta(seconds=5),
        shutdown_grace: timedelta = timedelta(seconds=25),
        install_signal_handlers: bool = True,
        worker_id: str | None = None,
        schedule: bool = True,
        retention: Retention | None = DEFAULT_RETENTION,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
    ) -> None:
        if concurrency < 1:
            raise ConfigurationError(f"concurrency must be at least 1, got {concurrency}")
        if queues is not None and not queues:
            raise ConfigurationError("queues must name at least one queue (or be None for all)")
        self.app = app
        self.queues = sorted(set(queues)) if queues else None
        self.concurrency = concurrency
        self.burst = burst
        self.poll_interval = poll_interval.total_seconds()
        self.reap_interval = reap_interval.total_seconds()
        self.shutdown_grace = shutdown_grace.total_seconds()
        self.install_signal_handlers = install_signal_handlers
        # A long-running worker also fires due schedule slots; a burst worker never does
        # (`cronbase tick` ticks once, then drains in burst mode).
        self.schedule = schedule and not burst
        # Pruning old finished jobs is a long-running worker's chore too (one at a time).
        self.retention = None if burst else retention
        self.metrics = WorkerMetrics(app)
        self._claimed_counters: dict[tuple[str, str], Counter] = {}
        self._finished_counters: dict[tuple[str, str, str], Counter] = {}
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.id = worker_id or new_worker_id()
        self.claimed = 0
        self.notifier: Notifier | None = None
        # Set when the loop should look for work again (notification, free slot, stop).
        self._wake = asyncio.Event()
        self._stopping = False
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
        url = await asyncio.to_thread(lambda: self.app.database_url)
        await asyncio.to_thread(self._check_schema, url)
        self._pool = await pool.open_async_pool(
            url, min_size=2, max_size=4, name=f"cronbase-worker {self.id}"
        )
        installed = []
        helpers: list[asyncio.Task[None]] = []
        metrics_server = None
        try:
            if self.install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, self._on_signal, sig)
                    installed.append(sig)
            q = self.app.queries
            async with self._pool.connection() as conn:
                await conn.execute(
                    q.register_worker,
                    {
                        "id": self.id,
                        "hostname": socket.gethostname(),
                        "pid": os.getpid(),
                        "queues": self.queues,
                        "concurrency": self.concurrency,
                    },
                )
            self._completer = Completer(self._pool, q, self.id, self._on_written)
            self._heartbeater = Heartbeater(
                self._pool,
                q,
                self.id,
                self._held,
                self._on_lease_lost,
                self.metrics.lease_renewals.inc,
            )
            self.notifier = Notifier(
                lambda: pool.connect_async(url, application_name=f"cronbase-listener {self.id}"),
                self.app.channel,
                self._on_notify,
                self._wake.set,
            )
            helpers = [
                asyncio.create_task(self._completer.run(), name="cronbase-completer"),
                asyncio.create_task(self._heartbeater.run(), name="cronbase-heartbeat"),
            ]
            if not self.burst:
                helpers.append(asyncio.create_task(self.notifier.run(), name="cronbase-listen"))
            if self.schedule:
                scheduler = Scheduler(self.app).run()
                helpers.append(asyncio.create_task(scheduler, name="cronbase-scheduler"))
            if self.retention is not None:
                pruner = run_retention(self._pool, self.app, self.retention)
                helpers.append(asyncio.create_task(pruner, name="cronbase-retention"))
            if self.metrics_port is not None:
                metrics_server = start_http_server(
                    self.metrics_port, self.metrics_host, registry=self.metrics.registry
                )[0]
                logger.info("metrics on http://%s:%d/metrics", self.metrics_host, self.metrics_port)
            logger.info(
                "worker %s started: queues=%s concurrency=%d%s%s",
                self.id,
                ",".join(self.queues or ["*"]),
                self.concurrency,
                " burst" if self.burst else "",
                " schedules" if self.schedule else "",
            )
            self.started.set()
            await self._loop()
            await self._shutdown()
        finally:
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            for sig in installed:
                loop.remove_signal_handler(sig)
            if metrics_server is not None:
                metrics_server.shutdown()
                metrics_server.server_close()
            try:
                async with self._pool.connection() as conn:
                    await conn.execute(self.app.queries.unregister_worker, {"id": self.id})
            except Exception as exc:  # the database may be what failed; do not hide the cause
                logger.warning("could not unregister worker %s: %s", self.id, exc)
            await self._pool.close()
            self._threads.shutdown(wait=False, cancel_futures=True)
            logger.info("worker %s stopped: %d jobs claimed", self.id, self.claimed)

    def _check_schema(self, url: str) -> None:
        with pool.connect(url) as conn:
            migrate.require_current(conn, self.app.schema)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_reap = loop.time()
        pause = 0.1
        while not self._stopping:
            try:
                if loop.time() >= next_reap:
                    await self._reap()
                    next_reap = loop.time() + self.reap_interval
                claimed = await self._claim_free_slots()
            except psycopg.OperationalError as exc:
                # The database went away (restart, failover, network). Running jobs carry on;
                # the heartbeater and the completer retry their own writes. A burst worker,
                # started by cron, says so and exits rather than wait for the database.
                if self.burst:
                    raise
                logger.warning(
                    "claiming jobs failed (%s); retrying in %.1fs", str(exc).strip(), pause
                )
                self._wake.clear()  # or a pending wake-up would end the pause at once
                await self._sleep(pause)
                pause = min(pause * 2, 5.0)
                continue
            pause = 0.1
            if self.burst and not claimed and not self._running:
                return
            # Until a notification, a finished job or a stop request wakes us, or it is time to
            # poll (the fallback for a lost notification) or to reap. With every slot busy a
            # wake-up claims nothing; the one after a job finishes does.
            await self._sleep(min(self.poll_interval, next_reap - loop.time()))

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(seconds, 0.0)):
                await self._wake.wait()

    async def _claim_free_slots(self) -> list[ClaimedJob]:
        # Cleared before claiming: a notification or a finished job from now on leads to
        # another claim, one from before is answered by this one.
        self._wake.clear()
        free = self.concurrency - len(self._running)
        if free <= 0 or self._stopping:  # stopping: a signal came during the reap
            return []
        return await self._claim(free)

    async def _claim(self, limit: int) -> list[ClaimedJob]:
        assert self._pool is not None
        assert self._heartbeater is not None
        assert self._completer is not None
        q = self.app.queries
        # The successes waiting to be written ride on this claim: one statement, one commit.
        carried = self._completer.take_successes()
        params = claim_params(carried, limit, self.id, self.queues)
        try:
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    q.claim_jobs_in_queues if self.queues else q.claim_jobs, params
                )
                rows, written_ids = split_claim_rows(await cur.fetchall())
        except BaseException:
            self._completer.give_back(carried)
            raise
        self._completer.settle(carried, written_ids)
        jobs = [ClaimedJob.from_row(row) for row in rows]
        jobs.sort(key=lambda j: (j.priority, j.id))
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
        return jobs

    async def _run_job(self, job: ClaimedJob) -> Outcome:
        assert self._completer is not None
        try:
            outcome = await execute(
                self.app, job, self._threads, self._progress_from_any_thread, worker_id=self.id
            )
            # An attempt whose lease was lost is no longer ours to complete (the completion
            # would be fenced out anyway; this saves the round trip and the warning).
            if job not in self._lost and not outcome.written:
                self._completer.add(outcome)
            return outcome
        finally:
            # Also on cancellation (lease lost, grace period over): nothing is written then.
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
        # An async handler can be stopped; a sync one runs on in its thread, fenced out, and
        # keeps its slot until it returns.
        task = self.app.tasks.get(job.task)
        if task is not None and task.is_async:
            running.cancel()

    async def _reap(self) -> None:
        assert self._pool is not None
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                self.app.queries.reap_expired_jobs,
                {"limit": REAP_BATCH, "channel": self.app.channel},
            )
            for job_id, status in await cur.fetchall():
                logger.warning("job %d: lease expired (worker gone?); now %s", job_id, status)

    # -- shutdown --------------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        assert self._pool is not None
        assert self._completer is not None
        tasks = list(self._running.values())
        if tasks:
            await asyncio.wait(tasks, timeout=self.shutdown_grace)
        leftover = [(job, task) for job, task in self._running.items() if not task.done()]
        if leftover:
            logger.warning(
                "grace period over: handing back %d running jobs (attempt not counted)",
                len(leftover),
            )
            for _, task in leftover:
                task.cancel()
            jobs = [job for job, _ in leftover]
            async with self._pool.connection() as conn:
                await conn.execute(
                    self.app.queries.release_jobs,
                    {
                        "ids": [j.id for j in jobs],
                        "tokens": [j.lease_token for j in jobs],
                        "worker": self.id,
                        "channel": self.app.channel,
                    },
                )
            await asyncio.gather(*(task for _, task in leftover), return_exceptions=True)
        await self._completer.drain()
