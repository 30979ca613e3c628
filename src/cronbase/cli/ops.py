"""``cronbase stats``, ``queues``, ``prune`` and ``check``: the operator's commands."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ..app import App
from ..checks import check_name
from ..errors import InvalidNameError
from ..flow import Rate
from ..job import JobStatus
from ..operations.queues import FairKey, QueueState, limit_params, rate_params, weight_params
from ..operations.retention import PRUNABLE
from ..operations.stats import WINDOWS, Overview
from .common import (
    EXIT_FAILED,
    STATUS_STYLES,
    Settings,
    cli_actor,
    console,
    duration_text,
    parse_duration,
    status_text,
    when,
)
from .main import cli


def _seconds(value: float | None) -> str:
    if value is None:
        return ""
    if value < 1:
        return f"{value * 1000:.0f}ms"
    if value < 120:
        return f"{value:.1f}s"
    return f"{value / 60:.0f}m" if value < 7200 else f"{value / 3600:.1f}h"


def stats_table(overview: Overview) -> Table:
    table = Table(title="jobs by queue")
    table.add_column("queue")
    for status in JobStatus:
        if status is JobStatus.QUEUED:  # due now; the scheduled ones (run_at ahead) apart
            table.add_column(Text("queued (due)", style=STATUS_STYLES[status]), justify="right")
            table.add_column("scheduled", justify="right")
        else:
            table.add_column(status_text(status), justify="right")
    for column in ("oldest wait", "wait p50", "wait p95"):
        table.add_column(column, justify="right")
    for q in overview.queues:
        name = f"{q.queue} (paused)" if q.is_paused else q.queue
        counts = [
            str(n)
            for s in JobStatus
            for n in ((q.due, q.scheduled) if s is JobStatus.QUEUED else (q.counts[s],))
        ]
        table.add_row(
            name,
            *counts,
            _seconds(q.oldest_wait),
            _seconds(q.wait_p50),
            _seconds(q.wait_p95),
        )
    return table


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def stats(settings: Settings, as_json: bool) -> None:
    """Jobs by queue and status, waits, and the last hour's throughput."""
    overview = settings.app().stats()
    if as_json:
        click.echo(json.dumps(overview.to_json(), indent=2))
        return
    out = console(settings.width)
    out.print(stats_table(overview) if overview.queues else "no jobs")
    done = sum(m.succeeded for m in overview.minutes)
    failed = sum(m.failed for m in overview.minutes)
    out.print(f"last hour: {done} attempts succeeded, {failed} failed")
    for line in unserved_lines(overview):
        out.print(line)


@cli.command("tasks")
@click.option(
    "--window",
    type=click.Choice(list(WINDOWS)),
    default="1h",
    show_default=True,
    help="Over the last ...",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def tasks_command(settings: Settings, window: str, as_json: bool) -> None:
    """Per task and queue: attempts per minute, failure rate, p50/p95 run time."""
    found = settings.app().task_stats(WINDOWS[window])
    if as_json:
        click.echo(json.dumps([t.to_json() for t in found], indent=2))
        return
    out = console(settings.width)
    if not found:
        out.print(f"no attempt ended in the last {window}")
        return
    table = Table(title=f"tasks, last {window}")
    for column in ("task", "queue", "succeeded", "failed", "failure rate", "per minute"):
        table.add_column(column, justify="left" if column in ("task", "queue") else "right")
    table.add_column("p50", justify="right")
    table.add_column("p95", justify="right")
    for t in found:
        table.add_row(
            Text(t.task),
            Text(t.queue),
            str(t.succeeded),
            str(t.failed),
            f"{t.failure_rate:.1%}",
            f"{t.per_minute:.2f}",
            _seconds(t.p50),
            _seconds(t.p95),
        )
    out.print(table)


def unserved_lines(overview: Overview) -> list[str]:
    """One line per task and queue whose due jobs no live worker will claim."""
    return [
        f"{u.waiting} due jobs of task {u.task!r} (queue {u.queue!r}) wait for a worker: no live "
        "worker registers that task"
        for u in overview.unserved
    ]


@cli.group()
def queues() -> None:
    """Pause, resume and limit queues (workers do not claim from a paused queue)."""


def describe_queue(q: QueueState) -> str:
    state = (
        f"paused since {q.paused_at:%Y-%m-%d %H:%M} by {q.paused_by}" if q.is_paused else "active"
    )
    if q.max_running is not None:
        state += f", at most {q.max_running} running"
    if q.rate is not None:
        state += f", at most {q.rate} starts"
    return f"{q.name}: {state}"


@queues.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_queues(settings: Settings, as_json: bool) -> None:
    """Queues with jobs, whether they are paused, and their limits; then the tasks' limits."""
    app = settings.app()
    if as_json:
        limits = [
            {k: str(v) if isinstance(v, timedelta) else v for k, v in row.items()}
            for row in app.queues.task_limits()
        ]
        shown = {"queues": [q.to_json() for q in app.queues.list()], "task_limits": limits}
        click.echo(json.dumps(shown, indent=2, default=str))
        return
    for q in app.queues.list():
        click.echo(describe_queue(q))
    for row in app.queues.task_limits():
        click.echo(describe_task_limits(row))


def describe_task_limits(row: dict[str, Any]) -> str:
    """A task's limits as its workers last registered them."""
    parts = []
    if row["max_running"] is not None:
        parts.append(f"at most {row['max_running']} running")
    if row["key_max_running"] is not None:
        parts.append(f"at most {row['key_max_running']} running per key")
    if row["rate_n"] is not None:
        parts.append(f"at most {Rate(row['rate_n'], row['rate_period'])} starts")
    if row["key_rate_n"] is not None:
        parts.append(f"at most {Rate(row['key_rate_n'], row['key_rate_period'])} starts per key")
    return f"task {row['task']}: {', '.join(parts) or 'no limit'}"


def known_queue(app: App, name: str, force: bool) -> None:
    """Refuse (exit 2) a queue no job, task (of --app), worker or earlier command uses: a typo
    would otherwise pause or limit nothing, silently. ``--force`` to set it up ahead. The rule
    is the library's (app.queues.check_used), as the dashboard's."""
    check_name("queue", name)  # a bad name is refused as such first
    task_queues = {task.defaults.queue for task in app.tasks.values()}
    try:
        app.queues.check_used(name, task_queues=task_queues, force=force)
    except InvalidNameError as exc:
        raise click.UsageError(f"{exc}; --force to set it up anyway") from None


def _limit_value(value: str) -> int | None:
    if value.lower() == "none":
        return None
    try:
        return int(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a number of jobs (or none to remove the limit)", param_hint="N"
        ) from None


@queues.command("limit")
@click.argument("name")
@click.argument("n")
@click.option("--force", is_flag=True, help="Even if no task, job or worker uses the queue.")
@click.pass_obj
def limit_queue(settings: Settings, name: str, n: str, force: bool) -> None:
    """At most N running jobs of queue NAME across all workers (N = none removes the limit)."""
    app = settings.app()
    limit = _limit_value(n)
    limit_params(name, limit)  # a bad name or number is refused as such first
    known_queue(app, name, force)
    state = app.queues.set_limit(name, limit, actor=cli_actor())
    click.echo(describe_queue(state))


@queues.command("rate")
@click.argument("name")
@click.argument("rate")
@click.option("--force", is_flag=True, help="Even if no task, job or worker uses the queue.")
@click.pass_obj
def rate_queue(settings: Settings, name: str, rate: str, force: bool) -> None:
    """At most RATE starts of queue NAME's jobs in any window, e.g. 100/minute (none removes it)."""
    app = settings.app()
    rate_params(name, None if rate.lower() == "none" else rate)
    known_queue(app, name, force)
    state = app.queues.set_rate(name, None if rate.lower() == "none" else rate, actor=cli_actor())
    click.echo(describe_queue(state))


def _weight_value(value: str) -> float | None:
    if value.lower() == "none":
        return None
    try:
        return float(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a number (or none to go back to 1)", param_hint="WEIGHT"
        ) from None


@queues.command("weight")
@click.argument("name")
@click.argument("key")
@click.argument("weight")
@click.option("--force", is_flag=True, help="Even if no task, job or worker uses the queue.")
@click.pass_obj
def weight_queue(settings: Settings, name: str, key: str, weight: str, force: bool) -> None:
    """Give fair key KEY of queue NAME a share of WEIGHT: 2 gets twice the claims of a key of
    weight 1 (the default) while both have due jobs; none goes back to 1."""
    app = settings.app()
    value = _weight_value(weight)
    weight_params(name, key, value)  # a bad name or weight is refused as such first
    known_queue(app, name, force)
    got = app.queues.set_weight(name, key, value, actor=cli_actor())
    click.echo(f"queue {name!r}: fair key {key!r} has weight {got:g}")


def fair_table(keys: list[FairKey]) -> Table:
    """The busiest fair keys: backlog, running jobs and their share of the running ones."""
    running = sum(k.running for k in keys) or 1
    table = Table(box=None)
    for column in ("queue", "key", "waiting", "running", "share", "weight", "claimed"):
        table.add_column(column, justify="left" if column in ("queue", "key") else "right")
    for k in keys:
        table.add_row(
            k.queue,
            k.key,
            str(k.waiting),
            str(k.running),
            f"{k.running / running:.0%}",
            f"{k.weight:g}",
            str(k.claimed),
        )
    return table


@queues.command("fair")
@click.argument("name", required=False)
@click.option("--limit", default=20, show_default=True, help="How many keys to show.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def fair_queue(settings: Settings, name: str | None, limit: int, as_json: bool) -> None:
    """The busiest fair keys (of queue NAME, or all): waiting and running jobs, each key's share
    of the running ones, weight, and jobs claimed so far."""
    if name is not None:
        check_name("queue", name)
    keys = settings.app().queues.fair_keys(name, limit=limit)
    if as_json:
        click.echo(json.dumps([k.__dict__ for k in keys]))
        return
    console().print(fair_table(keys))


@queues.command("pause")
@click.argument("name")
@click.option("--force", is_flag=True, help="Even if no task, job or worker uses the queue.")
@click.pass_obj
def pause_queue(settings: Settings, name: str, force: bool) -> None:
    """Stop workers claiming from queue NAME (running jobs finish)."""
    app = settings.app()
    known_queue(app, name, force)
    app.queues.pause(name, actor=cli_actor())
    click.echo(f"queue {name!r} paused")


@queues.command("resume")
@click.argument("name")
@click.option("--force", is_flag=True, help="Even if no task, job or worker uses the queue.")
@click.pass_obj
def resume_queue(settings: Settings, name: str, force: bool) -> None:
    """Let workers claim from queue NAME again."""
    app = settings.app()
    known_queue(app, name, force)
    app.queues.resume(name, actor=cli_actor())
    click.echo(f"queue {name!r} resumed")


@cli.command("prune")
@click.option(
    "--older-than",
    required=True,
    callback=parse_duration,
    metavar="AGE",
    help="Finished longer ago than this, e.g. 7d, 12h.",
)
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice([s.value for s in PRUNABLE]),
    help="Only jobs in this status (repeatable). Default: succeeded and cancelled.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be deleted; delete nothing.")
@click.pass_obj
def prune_command(
    settings: Settings, older_than: timedelta, statuses: tuple[str, ...], dry_run: bool
) -> None:
    """Delete finished jobs, and their attempt history, older than AGE."""
    app = settings.app()
    chosen = list(statuses) or [JobStatus.SUCCEEDED.value, JobStatus.CANCELLED.value]
    age = duration_text(older_than)
    if dry_run:
        found = app.jobs.count_prunable(older_than, chosen)
        each = ", ".join(f"{found.get(s, 0)} {s}" for s in chosen)
        click.echo(
            f"would prune {sum(found.values())} jobs ({each}) finished more than {age} ago; "
            "nothing was deleted"
        )
        return
    removed = app.jobs.prune(older_than, chosen, actor=cli_actor())
    click.echo(f"pruned {removed} jobs ({', '.join(chosen)}) finished more than {age} ago")


@cli.command()
@click.option(
    "--max-dead", type=click.IntRange(min=0), help="Fail when more jobs than this are dead."
)
@click.option(
    "--max-wait",
    callback=parse_duration,
    metavar="AGE",
    help="Fail when a due job has waited longer than this, e.g. 5m.",
)
@click.option("--queue", help="Only this queue.")
@click.pass_context
def check(
    ctx: click.Context, max_dead: int | None, max_wait: timedelta | None, queue: str | None
) -> None:
    """Exit 1 with the reason when a threshold is crossed (for cron or a monitor), else 0."""
    if max_dead is None and max_wait is None:
        raise click.UsageError("give --max-dead and/or --max-wait")
    settings: Settings = ctx.obj
    overview = settings.app().stats()
    found = [q for q in overview.queues if queue is None or q.queue == queue]
    problems = []
    if max_wait is not None:
        # Jobs no live worker will claim wait for ever: worth failing on whatever their age.
        problems += [
            line
            for u, line in zip(overview.unserved, unserved_lines(overview), strict=True)
            if queue is None or u.queue == queue
        ]
    if max_dead is not None:
        dead = sum(q.counts[JobStatus.DEAD] for q in found)
        if dead > max_dead:
            problems.append(f"{dead} dead jobs (more than {max_dead})")
    if max_wait is not None:
        for q in found:
            if q.oldest_wait is not None and q.oldest_wait > max_wait.total_seconds():
                problems.append(
                    f"queue {q.queue!r}: a job has waited {_seconds(q.oldest_wait)} "
                    f"(more than {_seconds(max_wait.total_seconds())})"
                )
    if problems:
        click.echo("check failed: " + "; ".join(problems), err=True)
        ctx.exit(EXIT_FAILED)
    click.echo("ok")


@cli.command("audit")
@click.option(
    "--limit", type=click.IntRange(min=1, max=10_000), default=50, show_default=True,
    help="The newest this many entries.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def audit_command(settings: Settings, limit: int, as_json: bool) -> None:
    """Operator actions from the command line and the dashboard, newest first."""
    found = settings.app().audit.list(limit=limit)
    if as_json:
        shown = [{**vars(e), "at": e.at.isoformat()} for e in found]
        click.echo(json.dumps(shown, indent=2, default=str))
        return
    out = console(settings.width)
    if not found:
        out.print("no operator actions recorded yet")
        return
    table = Table(title="audit log")
    for column in ("at", "who", "action", "target", "detail"):
        table.add_column(column)
    for e in found:
        detail = json.dumps(e.detail, separators=(",", ":")) if e.detail else ""
        table.add_row(when(e.at), Text(e.actor), Text(e.action), Text(e.target), Text(detail))
    out.print(table)
