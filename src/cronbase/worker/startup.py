"""A worker's start: what :meth:`Worker.run` opens and starts before its loop, each step undone
by the worker's ``AsyncExitStack`` in reverse (pgqueuer's ``qm.run`` holds its helpers the same
way): the pool, the registration, the metrics server, and the helpers that
run beside the loop until it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.metadata
import logging
import os
import socket
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from ..db.health import connect_when_ready, when_reachable
from ..db.migrate import LATEST_VERSION
from ..db.notifier import Notifier
from ..db.pool import describe as describe_url
from ..operations.metrics import serve as serve_metrics
from ..operations.metrics import stop as stop_metrics
from ..operations.retention import Retention, prune_once, run_retention
from ..schedule.scheduler import Scheduler
from .claim import claimable_names
from .claimer import Claimer
from .completer import Completer
from .executor import Runtime
from .flow_claim import register_params
from .heartbeat import Heartbeater
from .isolation import Children
from .overruns import Overruns
from .reaper import Reaper

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from ..db.database import Database
    from .worker import Worker

logger = logging.getLogger("cronbase")


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def start(self: Worker, stack: contextlib.AsyncExitStack) -> None:
    """Open, register, start the helpers; every step is undone by ``stack``, in reverse."""
    o = self.options
    stack.callback(self._threads.shutdown, wait=False, cancel_futures=True)
    # First, so a busy port fails the worker before it connects, registers or says it started
    # (ConfigurationError, one line).
    stack.callback(
        stop_metrics, serve_metrics(o.metrics_port, o.metrics_host, self.metrics.registry)
    )
    # A burst worker (cron, a CLI command) fails fast; a long-running one waits for the
    # database (a deploy racing a database restart), saying so, here and in the steps below.
    wait = not o.burst
    pool = await connect_when_ready(self.db, self.id, wait=wait)
    stack.push_async_callback(pool.close)
    if any(t.isolation == "process" for t in self.tasks.values()):
        self._children = Children(self.db.url, logger.level)
        stack.callback(self._children.close)
    try:
        # Idempotent (an upsert), so a retry after a reply lost with the connection is safe.
        await when_reachable("registering the worker", lambda: _register(self, pool), wait=wait)
    except asyncio.CancelledError:
        # Cancelled while registering (a supervisor's stop before the worker started): the
        # row may be committed already, and the stack would not remove it.
        await _unregister(self, pool)
        raise
    stack.push_async_callback(_unregister, self, pool)
    self._completer = Completer(pool, self.db.queries, self.id, self.metrics)
    self._claimer = Claimer(
        pool,
        self.db,
        self.id,
        self.tasks,
        self._completer,
        concurrency=o.concurrency,
        queues=o.queues,
        queue_caps=o.queue_caps,
        refresh_every=o.reap_interval,
        recheck_fair_every=o.poll_interval,
    )
    stack.push_async_callback(self._claimer.close)  # before the pool closes
    self._overruns = Overruns(self._count_overrun, lambda: self._heartbeater.progress_changed())
    self._heartbeater = Heartbeater(
        pool,
        self.db.queries,
        self.id,
        self._held,
        self._on_lease_lost,
        self.metrics.lease_renewals.inc,
        overruns=self._overruns.snapshot,
        renewing=self._completer.renewing,
    )
    self._runtime = Runtime(
        self.db,
        self.tasks,
        self._threads,
        self._children,
        self.id,
        self._progress_from_any_thread,
        self._on_timeout,
    )
    reaper = Reaper(
        pool,
        self.db,
        o.reap_interval,
        claimable_names({n: t.defaults.version for n, t in self.tasks.items()}),
    )
    await when_reachable("reaping expired leases", reaper.reap_once, wait=wait)
    helpers: dict[str, Coroutine[Any, Any, None]] = {
        "completer": self._completer.run(),
        "heartbeat": self._heartbeater.run(),
        "overruns": self._overruns.run(),
        "reaper": reaper.run(),
    }
    self.notifier = Notifier(
        lambda: self.db.connect_listener(f"cronbase-listener {self.id}"),
        self.db.channel,
        self._on_notify,
        self._on_listener_reconnect,
    )
    if not o.burst and self.db.listen_url is not None:
        helpers["listen"] = self.notifier.run()
    elif not o.burst:
        logger.info(
            "transaction pooler and no listen_url: polling every %.1fs instead of LISTEN "
            "(set CRONBASE_LISTEN_URL to a direct URL for instant pick-up)",
            o.poll_interval,
        )
    if o.schedule:
        scheduler = Scheduler(self.db, self.tasks, self.periodic, queues=o.queues)
        helpers["scheduler"] = scheduler.run()
    if o.retention is not None and not o.burst:
        helpers["retention"] = run_retention(pool, self.db, o.retention)
    elif o.retention is not None:
        stack.push_async_callback(_last_retention_round, pool, self.db, o.retention)
    tasks = [asyncio.create_task(h, name=f"cronbase-{n}") for n, h in helpers.items()]
    stack.push_async_callback(_cancel, tasks)
    logger.info(
        "worker %s started on %s: queues=%s concurrency=%d%s%s",
        self.id,
        describe_url(self.db.url),
        o.describe(),
        o.concurrency,
        " burst" if o.burst else "",
        " schedules" if o.schedule else "",
    )
    self.started.set()


@functools.cache
def package_version() -> str | None:
    """The installed cronbase's version (package metadata, no git needed); None when the code
    runs from a source tree that was never installed."""
    try:
        return importlib.metadata.version("cronbase")
    except importlib.metadata.PackageNotFoundError:
        return None


async def _register(self: Worker, pool: AsyncConnectionPool) -> None:
    q = self.db.queries
    async with pool.connection() as conn:
        await conn.execute(
            q.register_worker,
            {
                "id": self.id,
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "queues": self.options.queues,
                "concurrency": self.options.concurrency,
                "tasks": claimable_names({n: t.defaults.version for n, t in self.tasks.items()}),
                "supervisor": self.supervisor,
                "version": package_version(),
                "schema_version": LATEST_VERSION,
            },
        )
        # The limits in this code are the fleet's from now on (last worker started wins).
        await conn.execute(q.register_task_limits, register_params(self.tasks))
        # Jobs of its tasks that a claim parked (no live worker knew them) are ready again.
        await conn.execute(
            q.unpark_jobs,
            {"tasks": claimable_names({n: t.defaults.version for n, t in self.tasks.items()})},
        )


async def _unregister(self: Worker, pool: AsyncConnectionPool) -> None:
    try:
        async with pool.connection() as conn:
            await conn.execute(self.db.queries.unregister_worker, {"id": self.id})
    except Exception as exc:  # the database may be what failed; do not hide the cause
        logger.warning("could not unregister worker %s: %s", self.id, exc)


# How long a burst worker's one retention round may take as it ends (the rest is the next one's).
LAST_ROUND_SECONDS = 60.0


async def _last_retention_round(pool: AsyncConnectionPool, db: Database, kept: Retention) -> None:
    """A burst worker's retention, once, as it ends (cron's tick keeps the history bounded so):
    bounded in time, and never the reason the worker fails."""
    try:
        async with asyncio.timeout(LAST_ROUND_SECONDS):
            if await prune_once(pool, db, kept) is None:
                logger.info("retention: another worker is pruning; skipped")
    except Exception as exc:
        logger.warning("retention round failed (%s); the next run tries again", exc)
