"""``cronbase workers``: the workers an operator sees (alive or not, busy slots, jobs done,
attempts failed, jobs in hand), grouped by host and supervisor; ``cronbase workers prune``
deletes the rows of workers gone for long."""

from __future__ import annotations

from datetime import timedelta

import click
from rich.table import Table
from rich.text import Text

from ..durations import duration_text, span
from ..operations.fleet import WorkerInfo, group_key, prune_workers
from .common import Settings, age_option, cli_actor, listed
from .main import cli


def _age(seconds: float) -> str:
    return f"{span(seconds, minutes_from=90, hours_from=5400)} ago"


def _listed(names: list[str] | None, everything: str) -> str:
    if names is None:
        return everything
    return ", ".join(names) if len(names) <= 4 else f"{', '.join(names[:3])} +{len(names) - 3}"


def code_version(worker: WorkerInfo) -> str:
    """The code a worker runs, as the package version and the newest migration it knows:
    ``0.1.0 m19``; ``older`` for a release before 0016, which did not record it."""
    if worker.schema_version is None:
        return "older"
    return f"{worker.version or '?'} m{worker.schema_version}"


def workers_table(found: list[WorkerInfo]) -> Table:
    """One row per worker, grouped by host and supervisor (a line between groups); the
    supervisor column only when a supervisor runs some of them (``--processes``)."""
    supervised = any(w.supervisor is not None for w in found)
    table = Table(title="workers")
    columns = ["worker", "host", "supervisor", "pid", "version", "state", "busy", "queues", "tasks"]
    for column in columns if supervised else [c for c in columns if c != "supervisor"]:
        table.add_column(column, justify="right" if column in ("pid", "busy") else "left")
    table.add_column("jobs done", justify="right")
    table.add_column("attempts failed", justify="right")
    table.add_column("heartbeat")
    table.add_column("jobs in hand")
    previous = None
    for w in found:
        if previous is not None and group_key(w) != previous:
            table.add_section()
        previous = group_key(w)
        state = Text("alive", style="green") if w.alive else Text("gone", style="red")
        jobs = ", ".join(f"{job_id} {task}" for job_id, task in w.jobs[:3])
        if w.busy > 3:
            jobs += f" +{w.busy - 3}"
        cells = [Text(w.id), Text(w.hostname)]
        if supervised:
            cells.append(Text(w.supervisor or "-"))
        table.add_row(
            *cells,
            str(w.pid),
            Text(code_version(w)),
            state,
            f"{w.busy}/{w.concurrency}",
            Text(_listed(w.queues, "all")),
            Text(_listed(w.tasks, "any")),
            _count(w.succeeded_jobs),
            _count(w.failed_attempts),
            _age(w.heartbeat_age),
            Text(jobs),
        )
    return table


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)  # None: a release before 0021 does not count


@cli.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def workers(ctx: click.Context, as_json: bool) -> None:
    """Registered workers: alive or gone, host, supervisor, code version, busy slots, queues,
    tasks, jobs done, attempts failed, jobs in hand; grouped by host and supervisor (the
    processes of one ``worker --processes N``). ``workers prune`` deletes gone ones' rows."""
    if ctx.invoked_subcommand is None:
        show(ctx.obj, as_json)


@workers.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_command(settings: Settings, as_json: bool) -> None:
    """The same as ``cronbase workers``."""
    show(settings, as_json)


@workers.command("prune")
@age_option(
    "--older-than",
    "Gone (no heartbeat) for longer than this, e.g. 1h, 7d; never less than a minute, when a "
    "worker counts as gone.",
    default="1h",
    show_default=True,
)
@click.pass_obj
def prune_command(settings: Settings, older_than: timedelta) -> None:
    """Delete the rows of workers gone for longer than AGE (killed, or their host down); a row
    whose worker still holds a running job stays until the job is taken back. Retention does
    the same in the background (Retention(workers=...), 1 day by default)."""
    removed = prune_workers(settings.app().db, older_than, actor=cli_actor())
    named = f": {', '.join(removed)}" if removed else ""
    click.echo(
        f"pruned {len(removed)} workers gone for more than {duration_text(older_than)}{named}"
    )


def show(settings: Settings, as_json: bool) -> None:
    """Print the workers, as a table or JSON, and what an operator should know of them."""
    found = settings.app().workers()
    out = listed(
        settings, found, as_json, "no workers registered: start one with `cronbase worker`"
    )
    if out is None or not found:
        return
    out.print(workers_table(found))
    for w in found:
        for o in w.overruns:
            out.print(
                Text(
                    f"worker {w.id}: job {o.job_id} ({o.task}) attempt {o.attempt} runs "
                    f"{o.seconds_past:.0f}s past its timeout (cancelled; its handler ignores "
                    "it and keeps its slot)",
                    style="yellow",
                )
            )
    gone = sum(1 for w in found if not w.alive)
    if gone:
        out.print(
            f"{gone} worker(s) not seen for over a minute: stopped without unregistering "
            "(killed, or the host is down); their jobs return once their leases run out"
        )
