"""The commands that run jobs: ``cronbase worker`` (long-running, or ``--processes N`` under a
supervisor) and ``cronbase tick`` (cron's: fire due schedule slots, keep the history bounded, run
what is due, exit). Before either starts, what it asks for is weighed against the machine and the
server (``worker/capacity.py``; ``--force`` overrides).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import click

from ..operations.retention import Retention, prune_once
from ..worker.capacity import read_connection_room, refusals
from ..worker.options import WorkerOptions
from ..worker.supervised import Supervised
from ..worker.supervisor import Supervisor, available_cores
from .common import INT4_MAX, Settings, app_option, duration_value, seconds_option
from .main import cli

if TYPE_CHECKING:
    from ..app import App

logger = logging.getLogger("cronbase")


def run_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--queue`` (repeatable), ``--concurrency``, ``--keep`` (repeatable) and ``--force``,
    shared by ``worker`` and ``tick``."""
    command = click.option(
        "--force",
        is_flag=True,
        help="Start even when the processes, jobs at once or connections asked for are more "
        "than the machine or the server should take (the refusal says why).",
    )(command)
    command = click.option(
        "--keep",
        "keeps",
        multiple=True,
        type=Keep(),
        metavar="STATUS=AGE",
        help="How long finished jobs are kept: succeeded, cancelled, dead, events or all, an "
        "age such as 7d or 12h, or forever (repeatable; default succeeded=7d cancelled=7d "
        "dead=30d events=30d). Long-running workers, burst workers given --keep, and tick prune "
        "to it.",
    )(command)
    command = click.option(
        "--concurrency",
        type=click.IntRange(min=1, max=INT4_MAX),
        default=10,
        show_default=True,
        help="Jobs run at once.",
    )(command)
    return click.option(
        "--queue",
        "queues",
        multiple=True,
        metavar="Q[=N]",
        help="Run jobs of this queue only (repeatable; default all). Q=N: at most N of its jobs "
        "at once in this worker (then --concurrency applies to queues given without =N).",
    )(command)


def worker_queues(queues: tuple[str, ...], concurrency: int) -> list[str] | dict[str, int] | None:
    """``--queue`` values: names, or a concurrency per queue when any is given as ``Q=N``."""
    if not any("=" in q for q in queues):
        return list(queues) or None
    caps: dict[str, int] = {}
    for value in queues:
        name, _, number = value.partition("=")
        if not number:
            caps[name] = concurrency
            continue
        try:
            caps[name] = int(number)
        except ValueError:
            raise click.BadParameter(
                f"{value!r}: write a queue and its concurrency as Q=N, such as emails=5",
                param_hint="'--queue'",
            ) from None
        if not 1 <= caps[name] <= INT4_MAX:
            raise click.BadParameter(
                f"{value!r}: a queue's concurrency is from 1 to {INT4_MAX:,}",
                param_hint="'--queue'",
            )
    return caps


if TYPE_CHECKING:
    _KeepParam = click.ParamType[tuple[str, timedelta | None]]
else:  # click < 8.3's ParamType is not generic
    _KeepParam = click.ParamType

KEEPABLE = ("succeeded", "cancelled", "dead", "events")


class Keep(_KeepParam):
    """``--keep STATUS=AGE``: a final status (or ``events``, or ``all``) and how long it is kept:
    an age as ``cronbase prune --older-than`` takes it, or ``forever``."""

    name = "keep"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, timedelta | None]:
        if isinstance(value, tuple):
            return value  # a default given as parsed
        status, equals, age = str(value).partition("=")
        status = status.strip()
        if not equals or status not in (*KEEPABLE, "all"):
            self.fail(
                f"{value!r}: write STATUS=AGE, STATUS one of {', '.join(KEEPABLE)} or all, "
                "such as succeeded=7d or dead=forever",
                param,
                ctx,
            )
        if age.strip() == "forever":
            return status, None
        try:
            return status, duration_value(age.strip())
        except click.BadParameter as exc:
            self.fail(f"{value!r}: {exc.message}", param, ctx)


def retention(keeps: tuple[tuple[str, timedelta | None], ...]) -> Retention:
    """The retention ``--keep`` options ask for, on top of the defaults (later ones win)."""
    defaults = Retention()
    ages: dict[str, timedelta | None] = {name: getattr(defaults, name) for name in KEEPABLE}
    for status, age in keeps:
        for name in KEEPABLE if status == "all" else (status,):
            ages[name] = age
    return Retention(**ages, interval=defaults.interval)


def check_bounds(
    app: App, *, processes: int, supervised: bool, concurrency: int, force: bool
) -> None:
    """Refuse (exit 2, one line with the arithmetic) what the machine or the server should not
    take, unless ``force``: then say it and go on."""
    found = refusals(
        processes=processes,
        supervised=supervised,
        concurrency=concurrency,
        cores=available_cores(),
        pool_size=app.db.pool_size,
        room=read_connection_room(app.db),
    )
    if not found:
        return
    if force:
        for reason in found:
            logger.warning("--force: starting although %s", reason)
        return
    raise click.UsageError("; and ".join(found) + " (or pass --force)")


# How long handler threads may take to notice the worker has stopped before the process leaves
# without them (a sync handler cannot be interrupted; see _exit_if_handlers_linger).
THREAD_JOIN_SECONDS = 1.0


if TYPE_CHECKING:
    _IntParam = click.ParamType[int]
else:  # click < 8.3's ParamType is not generic
    _IntParam = click.ParamType


class Processes(_IntParam):
    """``--processes``: a whole number from 1, or ``auto`` (the cores this process may use)."""

    name = "processes"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif str(value).strip().lower() == "auto":
            return available_cores()
        else:
            try:
                number = int(str(value).strip())
            except ValueError:
                self.fail(
                    f"{value!r} is not a number of processes: give 1 or more, or auto", param, ctx
                )
        if number < 1:
            self.fail(f"{value!r}: give 1 or more processes, or auto", param, ctx)
        return number


@cli.command()
@app_option
@run_options
@click.option("--burst", is_flag=True, help="Run what is due, then exit.")
@click.option(
    "--metrics-port",
    type=click.IntRange(min=1, max=65535),
    metavar="PORT",
    help="Serve Prometheus metrics on this port (/metrics).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address for --metrics-port (0.0.0.0 for every interface).",
)
@click.option(
    "--schedule/--no-schedule",
    default=True,
    show_default=True,
    help="Also fire due schedule slots (long-running workers only).",
)
@seconds_option(
    "--poll-interval",
    "Look for due jobs this often when no notification comes (default 1).",
    positive=True,
)
@seconds_option(
    "--shutdown-grace",
    "On SIGTERM/SIGINT/SIGHUP, let running jobs finish this long, then hand them back "
    "(default 25).",
)
@click.option(
    "--processes",
    type=Processes(),
    metavar="N|auto",
    help="Run N worker processes with these options under a supervisor that starts again those "
    "that die (auto: one per core this process may use). With --burst each drains, then exits; "
    "--metrics-port serves all of them from the supervisor.",
)
@click.pass_obj
def worker(
    settings: Settings,
    queues: tuple[str, ...],
    concurrency: int,
    burst: bool,
    metrics_port: int | None,
    metrics_host: str,
    schedule: bool,
    poll_interval: timedelta | None,
    shutdown_grace: timedelta | None,
    processes: int | None,
    keeps: tuple[tuple[str, timedelta | None], ...],
    force: bool,
) -> int:
    """Run jobs until SIGTERM, SIGINT or SIGHUP.

    Running jobs then get the grace period and the rest are handed back; more signals are the
    same request. SIGQUIT (Ctrl-backslash) hands them back at once and exits. With --burst, run
    what is due and exit (for a worker started by cron).
    """
    app = settings.app(needs_tasks=True)
    given = {"poll_interval": poll_interval, "shutdown_grace": shutdown_grace}
    options: dict[str, Any] = {
        "queues": worker_queues(queues, concurrency),
        "concurrency": concurrency,
        "burst": burst,
        "schedule": schedule,
        "metrics_port": metrics_port,
        "metrics_host": metrics_host,
        **{k: v for k, v in given.items() if v is not None},
    }
    if keeps or not burst:  # a burst worker prunes only when asked to (tick does each run)
        options["retention"] = retention(keeps)
    supervised = Supervised.from_environment()
    if supervised is None:  # the supervisor checked for its processes
        checked = WorkerOptions.build(**options)  # a bad option fails here, not in every process
        check_bounds(
            app,
            processes=processes or 1,
            supervised=processes is not None,
            concurrency=checked.concurrency,
            force=force,
        )
    if processes is not None and supervised is None:
        # The children run this same command line; the environment tells them they are children.
        return Supervisor(
            [sys.executable, "-m", "cronbase", *settings.argv],
            processes,
            db=app.db,
            burst=burst,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            shutdown_grace=checked.shutdown_grace,
        ).run()
    if supervised is None:
        app.run_worker(**options)
    else:
        # The supervisor serves the metrics of all its processes (from their files).
        options["metrics_port"] = None
        supervised.run(app.worker(supervisor=supervised.supervisor, **options))
    app.close()
    _exit_if_handlers_linger()
    return 0


@cli.command()
@app_option
@run_options
@click.option("--no-run", is_flag=True, help="Only create the due jobs; leave them to workers.")
@click.pass_obj
def tick(
    settings: Settings,
    queues: tuple[str, ...],
    concurrency: int,
    keeps: tuple[tuple[str, timedelta | None], ...],
    force: bool,
    no_run: bool,
) -> None:
    """Fire every due schedule slot once, prune what --keep no longer keeps, run what is due,
    exit: the line for crontab.

    Safe to run every minute from several hosts at once: each slot becomes one job, and one
    host at a time prunes (the others skip it).
    """
    from ..schedule.scheduler import Scheduler

    app = settings.app(needs_tasks=True)
    kept = retention(keeps)
    if not no_run:
        check_bounds(app, processes=1, supervised=False, concurrency=concurrency, force=force)
    served = worker_queues(queues, concurrency)
    # With --no-run it runs nothing: every queue is another process's to serve.
    scheduler = Scheduler(
        app.db, app.tasks, app.periodic_schedules, queues=None if no_run or not served else served
    )
    created = asyncio.run(scheduler.tick())
    logger.info(
        "tick: %d new jobs from schedules (%d slot jobs due)", scheduler.fired, len(created)
    )
    if no_run:
        asyncio.run(retention_round(app, kept))
    else:
        # The burst worker prunes once as it ends, with what it ran already finished.
        app.run_worker(queues=served, concurrency=concurrency, burst=True, retention=kept)
    app.close()
    _exit_if_handlers_linger()


def _exit_if_handlers_linger() -> None:
    """Leave at once when a sync handler is still running after the worker stopped.

    Python cannot stop a thread, and at exit it would wait for it: a handler that ignores the
    shutdown would hang the process. Its job was handed back (queued again) by the worker.
    """
    deadline = time.monotonic() + THREAD_JOIN_SECONDS
    lingering = []
    for thread in threading.enumerate():
        if thread is threading.current_thread() or thread.daemon:
            continue
        # Idle pool threads exit as soon as they see the pool shut down.
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            lingering.append(thread.name)
    if not lingering:
        return
    logger.warning(
        "%d handler thread(s) still running after the worker stopped (%s); exiting without them",
        len(lingering),
        ", ".join(lingering),
    )
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


async def retention_round(app: App, kept: Retention) -> None:
    """One retention round on a pool of its own (``tick --no-run``: no worker runs to do it)."""
    opened = await app.db.open_async_pool(name="cronbase-tick", min_size=1, max_size=1)
    try:
        removed = await prune_once(opened, app.db, kept)
    finally:
        await opened.close()
    if removed is None:
        logger.info("tick: another process is pruning; skipped")
