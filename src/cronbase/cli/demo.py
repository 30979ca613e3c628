"""``cronbase demo``: example tasks from everyday apps, run by a worker under a live view.

Everything lives in the schema ``cronbase_demo``, emptied at each start, on the embedded
PostgreSQL unless CRONBASE_DATABASE_URL (or DATABASE_URL) names a server. Read top to bottom:
the tasks, what gets enqueued, then the worker and the view.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from psycopg import sql
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.logging import RichHandler
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

import cronbase

from .. import Backoff, Job, JobStatus
from ..db import pool
from .common import STATUS_STYLES, payload_text, status_text

SCHEMA = "cronbase_demo"
app = cronbase.App(schema=SCHEMA)

# Retries after 0.5 s, then 1 s, without jitter, so the demo is quick and the same each time.
# (The default is 5 s, doubling, with 20% jitter.)
QUICK_RETRY = Backoff(base=timedelta(seconds=0.5), jitter=0)

INVOICES = {1001: "ana@example.com", 1002: "bo@example.com", 1003: "chen@example.com"}
FLAKY_INVOICE = 1004  # its mail server times out twice, then takes the email
BOUNCING_INVOICE = 1005  # its address does not exist: every attempt fails, the job goes dead
DUPLICATE_KEY = "reminder:1001"
CACHE_KEYS = ("prices", "inventory", "homepage")

CONCURRENCY = 4
REFRESHES_PER_SECOND = 5
DEADLINE = timedelta(seconds=90)  # the demo takes about 6 s; this only guards against a hang


class Outbox:
    """Where the demo's emails go instead of a mail server."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sent: list[tuple[str, str]] = []

    def send(self, to: str, subject: str) -> None:
        with self._lock:
            self.sent.append((to, subject))


outbox = Outbox()


# -- the tasks -----------------------------------------------------------------------------------


@app.task(queue="emails", max_attempts=5, retry=QUICK_RETRY)
def send_invoice_reminder(invoice_id: int, email: str) -> None:
    """A sync handler: runs in the worker's thread pool."""
    time.sleep(0.4)  # talking to the mail server
    if invoice_id == FLAKY_INVOICE and cronbase.current_job().attempt < 3:
        raise ConnectionError("mail server timed out")
    if invoice_id == BOUNCING_INVOICE:
        raise LookupError(f"mailbox {email} does not exist")
    outbox.send(email, f"Invoice {invoice_id} is due")


@app.task(queue="cache")
async def refresh_cache(key: str) -> None:
    """An async handler: runs on the worker's event loop."""
    await asyncio.sleep(0.6)  # fetching fresh data


@app.task(queue="reports", lease=timedelta(seconds=10))
def weekly_report(team: str) -> None:
    """Reports its progress; the worker stores it with the lease renewals."""
    job = cronbase.current_job()
    stages = [(5, "collecting orders"), (30, "totalling"), (55, "rendering PDF"), (80, "emailing")]
    for percent, stage in stages:
        job.set_progress(percent, stage=stage)
        time.sleep(1)
    outbox.send(f"{team}@example.com", f"Weekly report for {team}")


@app.task(queue="maintenance")
def cleanup(older_than_days: int) -> None:
    time.sleep(0.3)  # deleting old sessions


# -- what the demo enqueues ----------------------------------------------------------------------


def reset() -> None:
    """Empty the demo schema so every run starts the same."""
    with pool.connect(app.database_url) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    app.migrate()


def enqueue(console: Console) -> None:
    reminders = {
        invoice_id: send_invoice_reminder.configure(idempotency_key=f"reminder:{invoice_id}").defer(
            invoice_id=invoice_id, email=email
        )
        for invoice_id, email in INVOICES.items()
    }
    send_invoice_reminder.defer(invoice_id=FLAKY_INVOICE, email="dana@slow-mail.example")
    send_invoice_reminder.configure(max_attempts=3).defer(
        invoice_id=BOUNCING_INVOICE, email="nobody@bounce.invalid"
    )
    refresh_cache.defer_many([{"key": key} for key in CACHE_KEYS])  # one round trip
    weekly_report.defer(team="sales")
    cleanup.configure(delay=timedelta(seconds=2)).defer(older_than_days=30)
    # The same key again: the first job's id comes back and nothing is inserted.
    again = send_invoice_reminder.configure(idempotency_key=DUPLICATE_KEY).defer(
        invoice_id=1001, email=INVOICES[1001]
    )
    same = "the same job: nothing inserted" if again == reminders[1001] else "a new job?!"
    console.print(f"deferred again with idempotency_key={DUPLICATE_KEY!r}: job {again}, {same}")


# -- the worker and the live view ----------------------------------------------------------------


async def run_worker_with_live_view(console: Console) -> list[Job]:
    """Run a worker on this loop, redraw the jobs table until every job is final."""
    worker = app.worker(
        concurrency=CONCURRENCY,
        poll_interval=timedelta(milliseconds=200),
        install_signal_handlers=False,
    )
    running = asyncio.create_task(worker.run())
    started = time.monotonic()
    try:
        with Live(console=console, auto_refresh=False) as live:
            while True:
                jobs = sorted(await app.jobs.list_async(limit=1000), key=lambda j: j.id)
                elapsed = time.monotonic() - started
                live.update(live_view(jobs, elapsed), refresh=True)
                if all(job.status.is_final for job in jobs):
                    return jobs
                if running.done():
                    running.result()  # raises what stopped the worker
                    raise cronbase.CronbaseError("the demo's worker stopped before the jobs ended")
                if elapsed > DEADLINE.total_seconds():
                    raise cronbase.CronbaseError(f"the demo did not finish within {DEADLINE}")
                await asyncio.sleep(1 / REFRESHES_PER_SECOND)
    finally:
        worker.stop()
        try:
            await running
        finally:
            await app.aclose()


def jobs_table(jobs: Sequence[Job], columns: Sequence[str], **title: Any) -> Table:
    """The demo's tables: a row per job, these columns of it (CELLS)."""
    table = Table(**title)
    for column in columns:
        table.add_column(column, overflow="fold")
    for job in jobs:
        table.add_row(*(CELLS[column](job) for column in columns))
    return table


def live_view(jobs: Sequence[Job], elapsed: float) -> Table:
    done = sum(job.status.is_final for job in jobs)
    columns = ("id", "task", "payload", "status", "attempt", "progress", "stage", "last error")
    title = f"cronbase demo: {done}/{len(jobs)} jobs final after {elapsed:.1f}s"
    return jobs_table(jobs, columns, title=title)


def progress_cell(job: Job) -> Table | str:
    if job.progress is None:
        return ""
    cell = Table.grid(padding=(0, 1))
    cell.add_row(ProgressBar(total=100, completed=job.progress, width=12), f"{job.progress:3.0f}%")
    return cell


# What each column of the demo's tables shows of a job.
CELLS: dict[str, Callable[[Job], RenderableType]] = {
    "id": lambda job: str(job.id),
    "task": lambda job: job.task,
    "payload": lambda job: payload_text(job.payload),
    "status": lambda job: status_text(job.status),
    "attempt": lambda job: f"{job.attempts}/{job.max_attempts}",
    "attempts": lambda job: str(job.attempts),
    "progress": progress_cell,
    "stage": lambda job: Text(job.stage or ""),
    "last error": lambda job: Text(job.current_error or "", style="red"),
}


def summary(jobs: Sequence[Job]) -> Group:
    tables = []
    for status in JobStatus:
        group = [job for job in jobs if job.status is status]
        if not group:
            continue
        table = jobs_table(
            group,
            ("id", "task", "payload", "attempts", "last error"),
            title=f"{status.value}: {len(group)} job{'' if len(group) == 1 else 's'}",
            title_style=STATUS_STYLES[status],
            title_justify="left",
        )
        tables.append(table)
    return Group(*tables)


@contextlib.contextmanager
def warnings_above(live_console: Console) -> Iterator[None]:
    """Show the worker's warnings (failed attempts) above the live view, not through it."""
    root = logging.getLogger()
    saved = root.handlers[:]
    handler = RichHandler(
        console=live_console, show_path=False, level=logging.WARNING, log_time_format="%H:%M:%S"
    )
    root.handlers = [handler]
    try:
        yield
    finally:
        root.handlers = saved


def this_command() -> str:
    """How the user ran cronbase, for the hints: ``cronbase`` when on PATH, else its path."""
    script = Path(sys.argv[0])
    if script.name != "cronbase":
        return "python -m cronbase"
    on_path = shutil.which("cronbase")
    if on_path and Path(on_path).resolve() == script.resolve():
        return "cronbase"
    return os.path.relpath(script)


def run_demo() -> None:
    console = Console(highlight=False, markup=False)  # what we print is data, not markup
    reset()
    console.print(
        Text.assemble(
            ("cronbase demo", "bold"),
            f" on {pool.masked(app.database_url)}, schema {SCHEMA!r} (emptied)",
        )
    )
    enqueue(console)
    with warnings_above(console):
        jobs = asyncio.run(run_worker_with_live_view(console))
    console.print()
    console.print(summary(jobs))
    console.print(f"\nOutbox (fake): {len(outbox.sent)} emails")
    for to, subject in outbox.sent:
        console.print(f"  to {to}: {subject}")
    dead = [job.id for job in jobs if job.status is JobStatus.DEAD]
    command = f"{this_command()} --schema {SCHEMA}"
    console.print(f"\nLook closer:\n  {command} jobs list")
    if dead:
        console.print(f"  {command} jobs show {dead[0]}")
    app.close()
