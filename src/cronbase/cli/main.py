"""The ``cronbase`` command: click commands, each a few lines over the library.

Errors a user can fix (every :class:`~cronbase.CronbaseError`, and bad options) print one line,
``error: ...``, and exit with code 2; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import click
import psycopg

from ..db import migrate as migrations
from ..db import pool
from ..errors import CronbaseError, WorkerFatalError
from ..job import Payload
from ..operations.retention import move_history
from ..worker.options import WorkerOptions
from ..worker.supervised import Supervised
from ..worker.supervisor import Supervisor, available_cores

if TYPE_CHECKING:
    from ..app import App
from .common import (
    DEFAULT_SCHEMA,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    INT4_MAX,
    Settings,
    app_option,
    one_line,
    parse_aware_time,
    payload_option,
    seconds_option,
    setup_logging,
)

logger = logging.getLogger("cronbase")


def run_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--queue`` (repeatable) and ``--concurrency``, shared by ``worker`` and ``tick``."""
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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cronbase")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Log lines for people, or one JSON object per line (job events carry their fields).",
)
@click.option(
    "--database-url",
    metavar="URL",
    help="PostgreSQL URL. Default: CRONBASE_DATABASE_URL, then DATABASE_URL, else the embedded "
    "server.",
)
@click.option(
    "--listen-url",
    metavar="URL",
    help="PostgreSQL URL for LISTEN, when --database-url goes through a transaction pooler (env "
    "CRONBASE_LISTEN_URL). Default: the database URL in session mode, none (poll) in transaction "
    "mode.",
)
@click.option(
    "--pooler",
    type=click.Choice(["session", "transaction"]),
    help="What is between cronbase and PostgreSQL: nothing or a session pooler (session, the "
    "default), or a transaction pooler such as pgbouncer's transaction mode (env CRONBASE_POOLER).",
)
@click.option(
    "--schema", metavar="NAME", help=f"Schema of the cronbase tables. Default: {DEFAULT_SCHEMA}."
)
@click.option(
    "--app",
    "app_path",
    metavar="MODULE:ATTR",
    envvar="CRONBASE_APP",
    help="Your App, e.g. myproject.jobs:app (env CRONBASE_APP). Needed by worker, tick, enqueue and schedules add.",
)
@click.option(
    "--width",
    type=click.IntRange(min=40),
    metavar="COLUMNS",
    help="Width of printed tables. Default: the terminal's; no wrapping when piped.",
)
@click.pass_context
def cli(
    ctx: click.Context,
    debug: bool,
    log_format: str,
    database_url: str | None,
    listen_url: str | None,
    pooler: str | None,
    schema: str | None,
    app_path: str | None,
    width: int | None,
) -> None:
    """cronbase: background and scheduled jobs on PostgreSQL."""
    settings = ctx.ensure_object(Settings)
    settings.debug = debug
    settings.width = width
    settings.schema = schema
    settings.app_path = app_path
    given = {"database_url": database_url, "listen_url": listen_url, "pooler": pooler}
    settings.connection = {name: value for name, value in given.items() if value}
    setup_logging(debug, log_format)
    if database_url:
        pool.check_url(database_url)
        # Exported, so an App() in the user's module (which reads the environment) uses it too.
        os.environ["CRONBASE_DATABASE_URL"] = database_url
    if listen_url:
        pool.check_url(listen_url)
        os.environ["CRONBASE_LISTEN_URL"] = listen_url
    if pooler:
        os.environ["CRONBASE_POOLER"] = pooler
    ctx.call_on_close(settings.close)


@cli.command()
@click.option(
    "--force",
    is_flag=True,
    help="Apply a contract migration even while workers too old for it are alive.",
)
@click.pass_obj
def migrate(settings: Settings, force: bool) -> None:
    """Create or upgrade the cronbase tables. Refuses a contract migration while live workers
    run code too old for it, naming them (README: Rolling deploys), unless --force."""
    app = settings.app()
    others = _cronbase_schemas(app)
    applied = app.migrate(force=force)
    where = f"schema {app.schema!r} on {pool.masked(app.database_url)}"
    for name in applied:
        click.echo(f"applied {name}")
    state = "migrated to" if applied else "up to date at"
    click.echo(f"{where}: {state} version {migrations.LATEST_VERSION}")
    moved = move_history(app.db)
    if moved:
        click.echo(f"moved {moved} finished jobs into the history (migration 0015)")
    if others is not None and app.schema not in others and others:
        # A new schema beside existing ones: say so, a typo in --schema would go unseen.
        names = ", ".join(repr(name) for name in others)
        click.echo(f"note: {app.schema!r} is a new schema; cronbase tables were already in {names}")


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
    "--shutdown-grace", "On SIGTERM/SIGINT, let running jobs finish this long (default 25)."
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
) -> int:
    """Run jobs until SIGTERM/SIGINT.

    With --burst, run what is due and exit (for a worker started by cron). A second signal exits
    at once.
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
    supervised = Supervised.from_environment()
    if processes is not None and supervised is None:
        WorkerOptions.build(**options)  # a bad option fails here once, not in every process
        # The children run this same command line; the environment tells them they are children.
        return Supervisor(
            [sys.executable, "-m", "cronbase", *settings.argv],
            processes,
            db=app.db,
            burst=burst,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
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
def tick(settings: Settings, queues: tuple[str, ...], concurrency: int, no_run: bool) -> None:
    """Fire every due schedule slot once, run what is due, exit: the line for crontab.

    Safe to run every minute from several hosts at once: each slot becomes one job.
    """
    from ..schedule.scheduler import Scheduler

    app = settings.app(needs_tasks=True)
    scheduler = Scheduler(app.db, app.tasks, app.periodic_schedules)
    created = asyncio.run(scheduler.tick())
    logger.info(
        "tick: %d new jobs from schedules (%d slot jobs due)", scheduler.fired, len(created)
    )
    if not no_run:
        app.run_worker(
            queues=worker_queues(queues, concurrency), concurrency=concurrency, burst=True
        )
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


@cli.command()
@app_option
@click.argument("task")
@payload_option
@click.option(
    "--run-at",
    metavar="ISO8601",
    callback=parse_aware_time,
    help="When to run, with a time zone, e.g. 2030-01-31T09:00:00+00:00.",
)
@seconds_option("--delay", "Run this many seconds from now.")
@click.option("--queue", help="Queue (default: the task's).")
@click.option(
    "--priority",
    type=click.IntRange(min=-32768, max=32767),
    help="Lower runs first (default: the task's).",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1, max=INT4_MAX),
    help="Attempts before dead (default: the task's).",
)
@click.option("--idempotency-key", metavar="KEY", help="At most one job ever with this key.")
@click.option(
    "--dedupe-key", metavar="KEY", help="At most one waiting or running job with this key."
)
@click.pass_obj
def enqueue(
    settings: Settings,
    task: str,
    payload: Payload,
    run_at: datetime | None,
    delay: timedelta | None,
    queue: str | None,
    priority: int | None,
    max_attempts: int | None,
    idempotency_key: str | None,
    dedupe_key: str | None,
) -> None:
    """Enqueue a job and print its id.

    TASK is a task name registered on --app. With a key that is already taken, nothing is
    inserted and the existing job's id is printed.
    """
    if run_at is not None and delay is not None:
        raise click.UsageError("give --run-at or --delay, not both")
    app = settings.app(needs_tasks=True)
    keyed = idempotency_key is not None or dedupe_key is not None
    before = app.db.now() if keyed else None
    options = {
        "run_at": run_at,
        "delay": delay,
        "queue": queue,
        "priority": priority,
        "max_attempts": max_attempts,
        "idempotency_key": idempotency_key,
        "dedupe_key": dedupe_key,
    }
    job_id = app.defer(task, payload, **{k: v for k, v in options.items() if v is not None})
    click.echo(job_id)
    if before is not None and app.jobs.get(job_id).created_at < before:
        # Its id only on stdout, for scripts; the word that nothing new was enqueued on stderr.
        key = (
            f"idempotency key {idempotency_key!r}"
            if idempotency_key is not None
            else f"dedupe key {dedupe_key!r}"
        )
        click.echo(f"job {job_id} already existed with {key}: nothing new was enqueued", err=True)


@cli.command()
def demo() -> None:
    """Run example jobs under a live view.

    Uses the schema cronbase_demo (emptied first) on the configured database, else on the
    embedded one.
    """
    from .demo import run_demo

    run_demo()


# -- entry point ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None, *, prog_name: str = "cronbase") -> int:
    """The console script: runs ``cli`` and turns errors into one line and an exit code.

    ``prog_name`` is what help and usage lines call the command (``manage.py cronbase`` when
    Django's management command runs it).
    """
    settings = Settings(argv=list(argv) if argv is not None else sys.argv[1:])
    try:
        result = cli.main(
            args=settings.argv,
            prog_name=prog_name,
            standalone_mode=False,
            obj=settings,
        )
    except click.exceptions.NoArgsIsHelpError as exc:
        exc.show()
        return exc.exit_code
    except click.ClickException as exc:
        return _fail(settings, exc, exc.format_message(), exc.exit_code)
    except WorkerFatalError as exc:
        # Not bad input: the database refused the worker for longer than fatal_after.
        return _fail(settings, exc, str(exc), EXIT_FAILED)
    except CronbaseError as exc:
        return _fail(settings, exc, str(exc), EXIT_BAD_INPUT)
    except (click.Abort, KeyboardInterrupt):
        click.echo("error: interrupted", err=True)
        return EXIT_INTERRUPTED
    except psycopg.errors.UndefinedTable as exc:
        message = _missing_schema(settings, prog_name) or (
            f"{_first_line(exc)}: run `{prog_name} migrate` first"
        )
        return _fail(settings, exc, message, EXIT_BAD_INPUT)
    except psycopg.Error as exc:
        return _fail(settings, exc, f"database error: {_first_line(exc)}", EXIT_FAILED)
    except Exception as exc:
        message = f"unexpected {type(exc).__name__}: {exc} (run with --debug for the traceback)"
        return _fail(settings, exc, message, EXIT_FAILED)
    return result if isinstance(result, int) else 0


def _cronbase_schemas(app: App) -> list[str] | None:
    """The schemas of this database that hold cronbase's tables (None: could not look)."""
    try:
        return app.db.cronbase_schemas()
    except (psycopg.Error, CronbaseError):
        return None


def _missing_schema(settings: Settings, prog_name: str) -> str | None:
    """When the schema itself does not exist (a typo in --schema looks like "no jobs"
    otherwise): say so, and name the schemas that hold cronbase's tables."""
    app = settings._app
    if app is None:
        return None
    try:
        if app.db.schema_exists():
            return None
    except (psycopg.Error, CronbaseError):
        return None
    names = ", ".join(repr(name) for name in _cronbase_schemas(app) or []) or "none"
    return (
        f"schema {app.schema!r} does not exist on {pool.masked(app.database_url)} (schemas with "
        f"cronbase tables: {names}); a typo in --schema? `{prog_name} migrate` creates it"
    )


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _fail(settings: Settings, exc: BaseException, message: str, code: int) -> int:
    if settings.debug:
        traceback.print_exception(exc)
    click.echo(f"error: {one_line(message)}", err=True)
    return code
