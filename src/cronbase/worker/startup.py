"""A worker's start: what :meth:`Worker.run` opens and starts before its loop, each step undone
by the worker's ``AsyncExitStack`` in reverse (pgqueuer's ``qm.run`` holds its helpers the same
way): the pool, the registration, the metrics server, and the helpers that run beside the loop
until it ends. :func:`assemble` builds every part and returns those the loop works with, as one
frozen record: no other module sets a part of the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.metadata
import logging
import os
import socket
from collections.abc import Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..db.health import connect_when_ready, when_reachable
from ..db.migrate import LATEST_VERSION
from ..db.notifier import Notifier
from ..db.pool import describe as describe_url
from ..errors import ConfigurationError
from ..operations.metrics import serve as serve_metrics
from ..operations.metrics import stop as stop_metrics
from ..operations.retention import Retention, prune_once, run_retention
from ..schedule.scheduler import Scheduler
from .attempts import Attempts
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
    from ..operations.metrics import WorkerMetrics
    from ..schedule.scheduler import ScheduleSpec
    from ..task import Task
    from .options import WorkerOptions

logger = logging.getLogger("cronbase")


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@dataclass(frozen=True, slots=True)
class Parts:
    """What the worker's loop works with, made by :func:`assemble`."""

    ledger: Attempts
    claimer: Claimer
    completer: Completer
    runtime: Runtime
    notifier: Notifier


@dataclass(frozen=True, slots=True)
class Plan:
    """What the worker is to be: its id, database, tasks, options and the rest of its make-up."""

    id: str
    db: Database
    tasks: Mapping[str, Task[Any, Any]]
    periodic: Mapping[str, ScheduleSpec]
    options: WorkerOptions
    metrics: WorkerMetrics
    supervisor: str | None


async def assemble(plan: Plan, wake: asyncio.Event, stack: contextlib.AsyncExitStack) -> Parts:
    """Open, register, start the helpers; every step is undone by ``stack``, in reverse.
    ``wake`` is the loop's: set when it should look for work (a notification, a freed slot)."""
    o = plan.options
    db = plan.db
    _check_keys(plan)
    threads = ThreadPoolExecutor(o.concurrency, "cronbase-job")
    stack.callback(threads.shutdown, wait=False, cancel_futures=True)
    # First, so a busy port fails the worker before it connects, registers or says it started
    # (ConfigurationError, one line).
    stack.callback(
        stop_metrics, serve_metrics(o.metrics_port, o.metrics_host, plan.metrics.registry)
    )
    # A burst worker (cron, a CLI command) fails fast; a long-running one waits for the
    # database (a deploy racing a database restart), saying so, here and in the steps below.
    wait = not o.burst
    pool = await connect_when_ready(db, plan.id, wait=wait)
    stack.push_async_callback(pool.close)
    children = None
    if any(t.isolation == "process" for t in plan.tasks.values()):
        children = Children(db.url, logger.level)
        stack.callback(children.close)
    registered = registration(plan)  # and again by a heartbeat that finds the row gone
    try:
        # Idempotent (an upsert), so a retry after a reply lost with the connection is safe.
        await when_reachable(
            "registering the worker", lambda: _register(plan, pool, registered), wait=wait
        )
    except asyncio.CancelledError:
        # Cancelled while registering (a supervisor's stop before the worker started): the
        # row may be committed already, and the stack would not remove it.
        await _unregister(plan, pool)
        raise
    stack.push_async_callback(_unregister, plan, pool)
    ledger = Attempts(plan.tasks, wake, asyncio.get_running_loop())
    completer = Completer(pool, db.queries, plan.id, ledger, plan.metrics)
    claimer = Claimer(
        pool,
        db,
        plan.id,
        plan.tasks,
        completer,
        concurrency=o.concurrency,
        queues=o.queues,
        queue_caps=o.queue_caps,
        refresh_every=o.reap_interval,
        recheck_fair_every=o.poll_interval,
    )
    stack.push_async_callback(claimer.close)  # before the pool closes
    overruns = Overruns(ledger, plan.metrics)
    heartbeater = Heartbeater(
        pool, db.queries, plan.id, ledger, plan.metrics, registration=registered
    )
    runtime = Runtime(
        db, plan.tasks, threads, children, plan.id, ledger.progressed, overruns.timed_out
    )
    names = claimable_names({n: t.defaults.version for n, t in plan.tasks.items()})
    reaper = Reaper(pool, db, o.reap_interval, names)
    await when_reachable("reaping expired leases", reaper.reap_once, wait=wait)
    helpers: dict[str, Coroutine[Any, Any, None]] = {
        "completer": completer.run(),
        "heartbeat": heartbeater.run(),
        "overruns": overruns.run(),
        "reaper": reaper.run(),
    }

    def notified(queue: str | None = None) -> None:
        # A defer or release in a queue it serves (None: the listener reconnected, and
        # notifications sent meanwhile are lost: look as if one came).
        if queue is None or o.queues is None or queue in o.queues:
            claimer.notified()
            wake.set()

    notifier = Notifier(
        lambda: db.connect_listener(f"cronbase-listener {plan.id}"),
        db.channel,
        notified,
        notified,
    )
    if not o.burst and db.listen_url is not None:
        helpers["listen"] = notifier.run()
    elif not o.burst:
        logger.info(
            "transaction pooler and no listen_url: polling every %.1fs instead of LISTEN "
            "(set CRONBASE_LISTEN_URL to a direct URL for instant pick-up)",
            o.poll_interval,
        )
    if o.schedule:
        scheduler = Scheduler(db, plan.tasks, plan.periodic, queues=o.queues)
        helpers["scheduler"] = scheduler.run()
    if o.retention is not None and not o.burst:
        helpers["retention"] = run_retention(pool, db, o.retention)
    elif o.retention is not None:
        stack.push_async_callback(_last_retention_round, pool, db, o.retention)
    tasks = [asyncio.create_task(h, name=f"cronbase-{n}") for n, h in helpers.items()]
    stack.push_async_callback(_cancel, tasks)
    logger.info(
        "worker %s started on %s: queues=%s concurrency=%d%s%s",
        plan.id,
        describe_url(db.url),
        o.describe(),
        o.concurrency,
        " burst" if o.burst else "",
        " schedules" if o.schedule else "",
    )
    return Parts(ledger, claimer, completer, runtime, notifier)


def _check_keys(plan: Plan) -> None:
    """A worker of encrypted tasks starts only with keys it can read (ConfigurationError, one
    line): without them it would run a plain job of such a task (deferred before encrypt=True,
    or from SQL) and then have no key to seal what it returned or raised."""
    encrypted = sorted(name for name, task in plan.tasks.items() if task.defaults.encrypt)
    if encrypted and plan.db.keys is None:
        raise ConfigurationError(
            f"task {', '.join(map(repr, encrypted[:3]))}{' and more' if len(encrypted) > 3 else ''}"
            f" {'is' if len(encrypted) == 1 else 'are'} encrypted (encrypt=True), but no "
            "encryption keys are configured: set CRONBASE_ENCRYPTION_KEYS or "
            "App(encryption_keys=...)"
        )


@functools.cache
def package_version() -> str | None:
    """The installed cronbase's version (package metadata, no git needed); None when the code
    runs from a source tree that was never installed."""
    try:
        return importlib.metadata.version("cronbase")
    except importlib.metadata.PackageNotFoundError:
        return None


def registration(plan: Plan) -> dict[str, Any]:
    """register_worker's parameters: what the worker says it is as it starts, and again when a
    heartbeat finds its row gone (heartbeat.py)."""
    return {
        "id": plan.id,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "queues": plan.options.queues,
        "concurrency": plan.options.concurrency,
        "tasks": claimable_names({n: t.defaults.version for n, t in plan.tasks.items()}),
        "supervisor": plan.supervisor,
        "version": package_version(),
        "schema_version": LATEST_VERSION,
    }


async def _register(plan: Plan, pool: AsyncConnectionPool, registered: dict[str, Any]) -> None:
    q = plan.db.queries
    async with pool.connection() as conn:
        await conn.execute(q.register_worker, registered)
        # The limits in this code are the fleet's from now on (last worker started wins).
        await conn.execute(q.register_task_limits, register_params(plan.tasks))
        # Jobs of its tasks that a claim parked (no live worker knew them) are ready again.
        await conn.execute(
            q.unpark_jobs,
            {"tasks": claimable_names({n: t.defaults.version for n, t in plan.tasks.items()})},
        )


async def _unregister(plan: Plan, pool: AsyncConnectionPool) -> None:
    try:
        async with pool.connection() as conn:
            await conn.execute(plan.db.queries.unregister_worker, {"id": plan.id})
    except Exception as exc:  # the database may be what failed; do not hide the cause
        logger.warning("could not unregister worker %s: %s", plan.id, exc)


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
