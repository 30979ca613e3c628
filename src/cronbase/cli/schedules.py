"""``cronbase schedules list|add|pause|resume|remove``: schedules kept in the database."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Unpack

import click
from rich.table import Table
from rich.text import Text

from ..operations.schedules import Schedules
from ..schedule.scheduler import CATCH_UP_POLICIES, MOST_CATCH_UP, Schedule, ScheduleOptions
from .common import (
    Settings,
    app_option,
    cli_actor,
    listed,
    payload_option,
    payload_text,
    relative,
)
from .main import cli


def schedules_table(found: list[Schedule], now: datetime) -> Table:
    table = Table()
    for column in ("key", "task", "when", "catch-up", "last run", "next run", "payload"):
        table.add_column(column, overflow="fold", no_wrap=column in ("last run", "next run"))
    for s in found:
        next_run = (
            Text("paused", style="yellow")
            if s.is_paused
            else Text(f"{s.local_text(s.next_fire_at)} ({relative(s.next_fire_at, now)})")
        )
        if s.overdue(now):
            next_run.append(" overdue: is a scheduler running?", style="bold red")
        table.add_row(
            Text(s.key),
            Text(s.task),
            Text(f"{s.described}\n{s.cron}"),
            s.catch_up if s.catch_up != "all" else f"all (max {s.max_catch_up})",
            s.local_text(s.last_fired_at),
            next_run,
            payload_text(s.payload),
        )
    return table


def describe(schedule: Schedule) -> str:
    state = (
        "paused" if schedule.is_paused else f"next run {schedule.local_text(schedule.next_fire_at)}"
    )
    return (
        f"schedule {schedule.key!r} ({schedule.task}, {schedule.described}, cron "
        f"{schedule.cron!r}): {state}"
    )


@cli.group()
def schedules() -> None:
    """List, add, pause, resume and remove schedules."""


@schedules.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_schedules(settings: Settings, as_json: bool) -> None:
    """Every schedule, with its last and next run in its own time zone."""
    found = settings.app().schedules.list()
    out = listed(settings, found, as_json, "no schedules")
    if out is None:
        return
    now = datetime.now(UTC)
    if found:
        out.print(schedules_table(found, now))
    late = [s.key for s in found if s.overdue(now)]
    if late:
        out.print(
            f"overdue: {', '.join(late)}: their next run has passed and nothing fired them; run "
            "a worker (it ticks schedules) or `cronbase tick` from cron"
        )


@schedules.command("add")
@app_option
@click.argument("task")
@click.option("--cron", "cron_expr", required=True, metavar="EXPR", help="e.g. '0 8 * * MON'.")
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone of the expression.")
@click.option("--key", help="The schedule's name (default: the task name).")
@payload_option
@click.option("--queue", help="Queue of its jobs (default: the task's).")
@click.option(
    "--catch-up",
    type=click.Choice(CATCH_UP_POLICIES),
    default="latest",
    show_default=True,
    help="After an outage: run the latest missed slot, all of them, or none.",
)
@click.option(
    "--max-catch-up",
    type=click.IntRange(min=1, max=MOST_CATCH_UP),
    default=100,
    show_default=True,
    help="With --catch-up all: at most this many missed slots.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the schedule as JSON.")
@click.pass_obj
def add_schedule(
    settings: Settings,
    task: str,
    cron_expr: str,
    as_json: bool,
    **options: Unpack[ScheduleOptions],
) -> None:
    """Run TASK on a cron schedule (kept in the database until removed)."""
    app = settings.app(needs_tasks=True)
    schedule = app.schedules.add(task, cron=cron_expr, actor=cli_actor(), **options)
    shown(schedule, as_json)


def _schedule_switch(verb: str, act: Callable[..., Schedule], doc: str) -> None:
    """``schedules pause`` and ``schedules resume``: one command but for the library call."""

    @schedules.command(verb, help=doc)
    @click.argument("key")
    @click.option("--json", "as_json", is_flag=True, help="Print the schedule as JSON.")
    @click.pass_obj
    def switch(settings: Settings, key: str, as_json: bool) -> None:
        shown(act(settings.app().schedules, key, actor=cli_actor()), as_json)


_schedule_switch(
    "pause", Schedules.pause, "Stop firing a schedule (slots while paused are skipped)."
)
_schedule_switch("resume", Schedules.resume, "Fire a paused schedule again, from its next slot.")


def shown(schedule: Schedule, as_json: bool) -> None:
    """A schedule changed by a command: its line, or its record as JSON."""
    click.echo(json.dumps(schedule.to_json(), indent=2) if as_json else describe(schedule))


@schedules.command("run-now")
@click.argument("key")
@click.pass_obj
def run_now(settings: Settings, key: str) -> None:
    """Enqueue schedule KEY's job now, once (its slots stay as they were); print its id."""
    app = settings.app()
    job_id = app.schedules.run_now(key, actor=cli_actor())
    click.echo(job_id)


@schedules.command("remove")
@click.argument("key")
@click.pass_obj
def remove_schedule(settings: Settings, key: str) -> None:
    """Delete a schedule (a schedule declared in code comes back when its app next starts)."""
    settings.app().schedules.remove(key, actor=cli_actor())
    click.echo(f"schedule {key!r} removed")
