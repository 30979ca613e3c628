"""``cronbase stats``, ``queues``, ``prune`` and ``check``: the operator's commands."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ..app import App
from ..checks import check_name
from ..durations import span
from ..errors import InvalidNameError
from ..flow import Rate
from ..job import JobStatus
from ..operations.demand import DEFAULT_CONCURRENCY, MOST_CONCURRENCY, QueueDemand
from ..operations.queues import (
    DEFAULT_AGING_STEP,
    FairKey,
    Queues,
    QueueState,
    aging_params,
    limit_params,
    rate_params,
    weight_params,
)
from ..operations.retention import PRUNABLE
from ..operations.stats import WINDOWS, Overview
from ..operations.storage import Storage, human_bytes
from .common import (
    EXIT_FAILED,
    STATUS_STYLES,
    Settings,
    age_option,
    cli_actor,
    console,
    duration_text,
    duration_value,
    listed,
    status_text,
    when,
)
from .main import cli


def _seconds(value: float | None) -> str:
    if value is None:
        return ""
    if value < 1:
        return f"{value * 1000:.0f}ms"
    return f"{value:.1f}s" if value < 120 else span(value)


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
    app = settings.app()
    overview, stored = app.stats(), app.storage()
    if as_json:
        click.echo(json.dumps({**overview.to_json(), "storage": stored.to_json()}, indent=2))
        return
    out = console(settings.width)
    out.print(stats_table(overview) if overview.queues else "no jobs")
    done = sum(m.succeeded for m in overview.minutes)
    failed = sum(m.failed for m in overview.minutes)
    out.print(f"last hour: {done} attempts succeeded, {failed} failed")
    for line in unserved_lines(overview):
        out.print(line)
    out.print(storage_table(stored))
    oldest = stored.oldest
    out.print(
        "vacuum: nothing holds it back"
        if oldest is None
        else f"vacuum: the oldest transaction holding it back: {oldest.describe()}"
    )


def storage_table(stored: Storage) -> Table:
    """The cronbase tables on disk: sizes, rows, last vacuum."""
    table = Table(title="tables")
    for column in ("table", "heap", "indexes", "live rows", "dead rows", "last vacuum"):
        table.add_column(column, justify="left" if column in ("table", "last vacuum") else "right")
    for t in stored.tables:
        vacuumed = max((v for v in (t.last_vacuum, t.last_autovacuum) if v), default=None)
        name = t.name if t.partitions is None else f"{t.name} ({t.partitions} partitions)"
        table.add_row(
            Text(name),
            human_bytes(t.heap_bytes),
            human_bytes(t.index_bytes),
            str(t.live_rows),
            str(t.dead_rows),
            when(vacuumed) if vacuumed else "never",
        )
    return table


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
    out = listed(settings, found, as_json, f"no attempt ended in the last {window}")
    if out is None or not found:
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
        f"{u.waiting} due jobs of task {u.task!r} (queue {u.queue!r}) wait for a worker: {u.reason}"
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
    if q.aging is not None:
        state += f", waiting jobs gain {q.aging.step} priority every {duration_text(q.aging.every)}"
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


# --force, as the commands that change a queue take it (known_queue says why).
force_option = click.option(
    "--force", is_flag=True, help="Even if no task, job or worker uses the queue."
)


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


def _number_or_none(convert: Callable[[str], float], what: str, hint: str) -> Callable[[str], Any]:
    """A parser of a command's number argument: ``none`` is None, else ``convert(value)``; a
    usage error saying it is not ``what`` otherwise."""

    def parse(value: str) -> float | None:
        if value.lower() == "none":
            return None
        try:
            return convert(value)
        except ValueError:
            raise click.BadParameter(f"{value!r} is not {what}", param_hint=hint) from None

    return parse


_limit_value = _number_or_none(int, "a number of jobs (or none to remove the limit)", "N")
_weight_value = _number_or_none(float, "a number (or none to go back to 1)", "WEIGHT")


def _rate_value(value: str) -> str | None:
    return None if value.lower() == "none" else value


def _queue_setting(
    verb: str,
    metavar: str,
    parse: Callable[[str], Any],
    check: Callable[[str, Any], object],
    act: Callable[..., QueueState],
    doc: str,
) -> None:
    """``queues limit`` and ``queues rate``: one command but for the value's parsing, check and
    library call."""

    @queues.command(verb, help=doc)
    @click.argument("name")
    @click.argument("value", metavar=metavar)
    @force_option
    @click.pass_obj
    def setting(settings: Settings, name: str, value: str, force: bool) -> None:
        app = settings.app()
        parsed = parse(value)
        check(name, parsed)  # a bad name or value is refused as such first
        known_queue(app, name, force)
        click.echo(describe_queue(act(app.queues, name, parsed, actor=cli_actor())))


_queue_setting(
    "limit",
    "N",
    _limit_value,
    limit_params,
    Queues.set_limit,
    "At most N running jobs of queue NAME across all workers (N = none removes the limit).",
)
_queue_setting(
    "rate",
    "RATE",
    _rate_value,
    rate_params,
    Queues.set_rate,
    "At most RATE starts of queue NAME's jobs in any window, e.g. 100/minute (none removes it).",
)


@queues.command("aging")
@click.argument("name")
@click.argument("every", metavar="EVERY")
@click.option(
    "--step",
    type=click.IntRange(min=1),
    help=f"Priority a waiting job gains each EVERY [default: the queue's, or {DEFAULT_AGING_STEP}].",
)
@force_option
@click.pass_obj
def aging_queue(settings: Settings, name: str, every: str, step: int | None, force: bool) -> None:
    """Priority aging: a waiting job of queue NAME gains STEP priority (lower runs first) for
    each EVERY it has been due (e.g. 5m), down to 0 at most; none turns it off."""
    app = settings.app()
    interval = None if every.lower() == "none" else duration_value(every)
    aging_params(name, interval, step)  # a bad name or interval is refused as such first
    known_queue(app, name, force)
    click.echo(describe_queue(app.queues.set_aging(name, interval, step=step, actor=cli_actor())))


@queues.command("weight")
@click.argument("name")
@click.argument("key")
@click.argument("weight")
@force_option
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
    found = settings.app().queues.fair_keys(name, limit=limit)
    out = listed(settings, found, as_json, "no fair keys")
    if out is not None and found:
        out.print(fair_table(found))


def demand_table(found: list[QueueDemand]) -> Table:
    table = Table(title=f"demand (workers of {found[0].concurrency} slots)")
    table.add_column("queue")
    for column in ("due", "running", "oldest due", "arrivals/min", "completions/min"):
        table.add_column(column, justify="right")
    table.add_column("workers needed", justify="right")
    for d in found:
        table.add_row(
            d.queue,
            str(d.due),
            str(d.running),
            _seconds(d.oldest_due_age),
            f"{d.arrivals_per_minute:.1f}",
            f"{d.completions_per_minute:.1f}",
            str(d.workers_needed),
        )
    return table


@queues.command("demand")
@click.option("--queue", "names", multiple=True, help="Only this queue (repeatable).")
@click.option(
    "--concurrency",
    type=click.IntRange(1, MOST_CONCURRENCY),
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    help="Each worker's concurrency (cronbase worker --concurrency).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def demand_command(
    settings: Settings, names: tuple[str, ...], concurrency: int, as_json: bool
) -> None:
    """Per queue: due and running jobs, the oldest due job's age, arrivals and completions per
    minute (the last 5 minutes), and the workers needed: ceil((running + due) / concurrency)."""
    app = settings.app()
    task_queues = {task.defaults.queue for task in app.tasks.values()}
    for name in names:  # a typo would otherwise show a queue of zeros
        try:
            app.queues.check_used(name, task_queues=task_queues)
        except InvalidNameError as exc:
            raise click.UsageError(str(exc)) from None
    found = app.queues.demand(names or None, concurrency=concurrency)
    out = listed(settings, found, as_json, "no queue has jobs")
    if out is not None and found:
        out.print(demand_table(found))


def _queue_switch(verb: str, act: Callable[..., object], done: str, doc: str) -> None:
    """``queues pause`` and ``queues resume``: one command but for the library call."""

    @queues.command(verb, help=doc)
    @click.argument("name")
    @force_option
    @click.pass_obj
    def switch(settings: Settings, name: str, force: bool) -> None:
        app = settings.app()
        known_queue(app, name, force)
        act(app.queues, name, actor=cli_actor())
        click.echo(f"queue {name!r} {done}")


_queue_switch(
    "pause", Queues.pause, "paused", "Stop workers claiming from queue NAME (running jobs finish)."
)
_queue_switch("resume", Queues.resume, "resumed", "Let workers claim from queue NAME again.")


@cli.command("prune")
@age_option("--older-than", "Finished longer ago than this, e.g. 7d, 12h.", required=True)
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
@age_option("--max-wait", "Fail when a due job has waited longer than this, e.g. 5m.")
@age_option(
    "--max-xmin-age",
    "Fail when a transaction open longer than this holds back vacuum (0: never fail).",
    default="1h",
    show_default=True,
)
@click.option("--queue", help="Only this queue.")
@click.pass_context
def check(
    ctx: click.Context,
    max_dead: int | None,
    max_wait: timedelta | None,
    max_xmin_age: timedelta,
    queue: str | None,
) -> None:
    """Exit 1 with the reason when a threshold is crossed (for cron or a monitor), else 0.
    Always checks what holds back vacuum (--max-xmin-age)."""
    settings: Settings = ctx.obj
    app = settings.app()
    overview = app.stats()
    found = [q for q in overview.queues if queue is None or q.queue == queue]
    problems = []
    if max_xmin_age > timedelta(0) and (held := app.storage().too_old(max_xmin_age)):
        problems.append(held)
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
    out = listed(settings, found, as_json, "no operator actions recorded yet")
    if out is None or not found:
        return
    table = Table(title="audit log")
    for column in ("at", "who", "action", "target", "detail"):
        table.add_column(column)
    for e in found:
        detail = json.dumps(e.detail, separators=(",", ":")) if e.detail else ""
        table.add_row(when(e.at), Text(e.actor), Text(e.action), Text(e.target), Text(detail))
    out.print(table)
