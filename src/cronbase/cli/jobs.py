"""``cronbase jobs list|show|retry|cancel``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ..job import GRAPH_LIMIT, Job, JobAttempt, JobGraph, JobStatus
from .common import (
    INT8_MAX,
    STATUS_STYLES,
    Settings,
    cli_actor,
    console,
    json_text,
    listed,
    relative,
    status_text,
    when,
)
from .main import cli


@cli.group()
def jobs() -> None:
    """List, inspect, retry and cancel jobs."""


@jobs.command("list")
@click.option("--status", type=click.Choice([s.value for s in JobStatus]))
@click.option("--queue")
@click.option("--task")
@click.option("--limit", type=click.IntRange(min=1, max=INT8_MAX), default=50, show_default=True)
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
    out = listed(settings, found, as_json, "no jobs match")
    if out is None:
        return
    if found:
        out.print(jobs_table(found))
    overview = app.stats()
    totals = overview.totals()
    summary = Text("all jobs: ")
    for job_status in JobStatus:
        if job_status is JobStatus.QUEUED:  # due apart from scheduled (run_at still ahead)
            due = totals[job_status] - overview.scheduled
            summary.append(f"queued (due) {due}  scheduled {overview.scheduled}  ")
        else:
            summary.append(f"{job_status.value} {totals[job_status]}  ")
    out.print(summary)


def jobs_table(found: Sequence[Job], title: str | None = None) -> Table:
    table = Table(title=title)
    columns = ("id", "task", "queue", "status", "attempts", "runs", "run at", "finished")
    for column in (*columns, "last error"):
        # Short values stay whole; the long ones fold into the width left.
        whole = column in ("id", "status", "runs", "run at", "finished")
        table.add_column(column, overflow="fold", no_wrap=whole)
    now = datetime.now(UTC)
    for job in found:
        table.add_row(
            str(job.id),
            Text(job.task),
            Text(job.queue),
            status_text(job.status),
            f"{job.attempts}/{job.max_attempts}",
            relative(job.run_at, now),
            when(job.run_at) if job.run_at.year != 9999 else "",
            relative(job.finished_at, now),
            Text(job.current_error or "", style="red"),
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
    graph = app.jobs.graph(job_id, limit=GRAPH_LIMIT)
    in_graph = graph.total > 1
    if as_json:
        shown: dict[str, Any] = {"job": job.to_json(), "attempts": [a.to_json() for a in attempts]}
        if in_graph:
            shown["graph"] = graph.to_json()
        click.echo(json.dumps(shown, indent=2))
        return
    out = console(settings.width)
    out.print(job_details(job))
    if in_graph:
        out.print(graph_text(graph, job.id))
    for attempt in attempts:
        out.print(attempt_text(attempt))


def graph_text(graph: JobGraph, current: int) -> Text:
    """The workflow by levels: each job of a short level with its status and result, a long
    level (a group's members) counted by task and status."""
    title = f"workflow {graph.workflow_id}" if graph.workflow_id else "dependencies"
    text = Text(f"\n{title}: {graph.total} jobs", style="bold")
    if graph.total > len(graph.jobs):
        text.append(f" (the first {len(graph.jobs)} shown)")
    for number, level in enumerate(graph.shown(), 1):
        text.append(f"\n  {number}. ")
        if not level.jobs:
            text.append(f"{level.size} jobs of {', '.join(level.tasks)}: ")
            for n, (status, count) in enumerate(level.counts):
                text.append(", " if n else "")
                text.append(f"{count} {status.value}", style=STATUS_STYLES[status])
            continue
        for n, job in enumerate(level.jobs):
            text.append("\n     " if n else "")
            marker = "> " if job.id == current else ""
            text.append(f"{marker}#{job.id} {job.task} ", style="bold" if marker else "")
            text.append(job.status.value, style=STATUS_STYLES[job.status])
            if job.status is JobStatus.PENDING:
                text.append(f" (waits for {job.parents_left} of {len(job.parents)})")
            if job.result is not None:
                text.append(" -> " + _short(json_text(job.result).plain))
            elif job.last_error and job.status is not JobStatus.SUCCEEDED:
                text.append(" " + _short(job.last_error), style="red")
    return text


def _short(value: str, width: int = 60) -> str:
    return value if len(value) <= width else value[: width - 1] + "…"


def job_details(job: Job) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    rows: list[tuple[str, str | Text]] = [
        ("job", str(job.id)),
        ("task", Text(job.task)),
        ("task version", "" if job.task_version is None else str(job.task_version)),
        ("queue", Text(job.queue)),
        ("status", status_text(job.status)),
        (
            "attempts",
            f"{job.attempts} of {job.max_attempts}"
            + (f", snoozed {job.snoozes} times" if job.snoozes else ""),
        ),
        ("priority", job.priority_label),
        ("payload", json_text(job.payload)),
        *([("encrypted", f"with key {job.encrypted_with!r}")] if job.encrypted_with else []),
        ("result", "" if job.result is None else json_text(job.result)),
        ("run at", when(job.run_at)),
        ("created at", when(job.created_at)),
        ("started at", when(job.started_at)),
        ("finished at", when(job.finished_at)),
        ("worker", Text(job.locked_by or "")),
        ("locked until", when(job.locked_until)),
        ("idempotency key", Text(job.idempotency_key or "")),
        ("dedupe key", Text(job.dedupe_key or "")),
        ("progress", "" if job.progress is None else f"{job.progress:.0f}%"),
        ("stage", Text(job.stage or "")),
        ("waiting for", Text(f"event {job.waiting_for}" if job.waiting_for else "")),
        ("last error", Text(job.current_error or "", style="red")),
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
    text.append(f"  worker {attempt.worker or '?'}  {when(attempt.started_at)} -> ")
    text.append(when(attempt.finished_at))
    if attempt.error:
        text.append(f"\n  {attempt.error}", style="red")
    if attempt.traceback:
        text.append("\n" + attempt.traceback.rstrip(), style="dim")
    return text


@jobs.command("retry")
@click.argument("job_id", metavar="ID", type=int, required=False)
@click.option("--dead", is_flag=True, help="Every dead job instead (narrow with --task/--queue).")
@click.option("--task", help="With --dead: only this task's jobs.")
@click.option("--queue", help="With --dead: only this queue's jobs.")
@click.option("--json", "as_json", is_flag=True, help="Print the job (or the ids) as JSON.")
@click.pass_obj
def retry_job(
    settings: Settings,
    job_id: int | None,
    dead: bool,
    task: str | None,
    queue: str | None,
    as_json: bool,
) -> None:
    """Run a job again now (any state but running), or with --dead every dead job."""
    app = settings.app()
    if dead and job_id is not None:
        raise click.UsageError("give a job ID or --dead (with --task/--queue), not both")
    if not dead and job_id is None:
        raise click.UsageError(
            "which job? give its ID (cronbase jobs retry 812), or --dead to retry every dead job "
            "(narrow with --task/--queue)"
        )
    if job_id is not None:
        if task or queue:
            raise click.UsageError("--task and --queue go with --dead")
        job = app.jobs.retry(job_id, actor=cli_actor())
        if as_json:
            click.echo(json.dumps(job.to_json(), indent=2))
            return
        click.echo(f"job {job.id} is {job.status.value} again (attempts so far: {job.attempts})")
        return
    ids = app.jobs.requeue_dead(task=task, queue=queue, actor=cli_actor())
    scope = " ".join(f"{k}={v}" for k, v in (("task", task), ("queue", queue)) if v) or "all"
    if as_json:
        click.echo(json.dumps({"requeued": ids}, indent=2))
        return
    click.echo(f"{len(ids)} dead jobs queued again ({scope})")


@jobs.command("cancel")
@click.argument("job_id", metavar="ID", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@click.pass_obj
def cancel_job(settings: Settings, job_id: int, as_json: bool) -> None:
    """Cancel a waiting or running job."""
    app = settings.app()
    job = app.jobs.cancel(job_id, actor=cli_actor())
    if as_json:
        click.echo(json.dumps(job.to_json(), indent=2))
        return
    click.echo(f"job {job.id} is {job.status.value}")
