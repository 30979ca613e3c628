"""The ``cronbase`` command: click commands, each a few lines over the library.

Errors a user can fix (every :class:`~cronbase.CronbaseError`, and bad options) print one line,
``error: ...``, and exit with code 2; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import click
import psycopg

from ..db import migrate as migrations
from ..db import pool
from ..errors import CronbaseError, WorkerFatalError
from ..job import Payload
from ..operations.retention import move_history

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
    run code too old for it, naming them (docs/guides/upgrade.md), unless --force."""
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
