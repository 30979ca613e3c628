"""Inline testing mode and the worker decide the same: each steering scenario (a snooze past
its cap, a cancel, retry_on, retries that end in success, a parent that fails, a suspension and
its event) runs on a test database through real worker runs, and inline, and ends the same."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import cronbase
import cronbase.testing
from cronbase.worker import executor

SOON = cronbase.Backoff(base=timedelta(milliseconds=1), jitter=0)


def tasks(app: cronbase.App) -> dict[str, Callable[[], int]]:
    """The scenarios: each defers its job(s) and returns the id of the job to compare."""

    @app.task(max_snoozes=2)
    def snoozes() -> None:
        raise cronbase.Snooze(timedelta(hours=1))

    @app.task(max_snoozes=0)
    def snoozes_past_its_cap() -> None:
        raise cronbase.Snooze(timedelta(hours=1))

    @app.task(retry=SOON)
    def cancels() -> None:
        raise cronbase.Cancel("not needed")

    @app.task(retry_on=(OSError,), retry=SOON)
    def raises_unretried() -> None:
        raise ValueError("not an OSError")

    @app.task(max_attempts=3, retry=SOON)
    def fails_twice() -> int:
        attempt = cronbase.current_job().attempt
        if attempt < 3:
            raise OSError(f"attempt {attempt}")
        return attempt

    @app.task(max_attempts=1)
    def always_fails() -> None:
        raise RuntimeError("parent fails")

    @app.task
    def child(previous: Any = None) -> None:
        return None

    @app.task
    def waits_for_event() -> Any:
        return cronbase.current_job().wait_for("invoice_paid:812")

    def parent_failure() -> int:
        return cronbase.chain(always_fails.s(), child.s()).defer()

    return {
        "snooze": lambda: snoozes.defer(),
        "snooze past its cap": lambda: snoozes_past_its_cap.defer(),
        "cancel": lambda: cancels.defer(),
        "retry_on": lambda: raises_unretried.defer(),
        "retries, then success": lambda: fails_twice.defer(),
        "parent failure": parent_failure,
        "suspension": lambda: waits_for_event.defer(),
    }


def state(job: Any) -> tuple[str, int, int]:
    return (str(job.status), job.attempts, job.snoozes)


SCENARIOS = [
    ("snooze", ("queued", 0, 1)),
    ("snooze past its cap", ("dead", 1, 0)),
    ("cancel", ("cancelled", 1, 0)),
    ("retry_on", ("dead", 1, 0)),
    ("retries, then success", ("succeeded", 3, 0)),
    ("parent failure", ("cancelled", 0, 0)),
    ("suspension", ("queued", 0, 0)),
]


@pytest.mark.parametrize(("scenario", "expected"), SCENARIOS, ids=[s for s, _ in SCENARIOS])
def test_inline_mode_and_the_worker_end_each_scenario_the_same(
    app: cronbase.App, db: psycopg.Connection[Any], scenario: str, expected: tuple[str, int, int]
) -> None:
    run_it = tasks(app)[scenario]
    # On the database: real worker runs until nothing is due (a retry after 1 ms comes due; a
    # snooze of an hour waits, as inline mode leaves a snoozed job waiting).
    job_id = run_it()
    for _ in range(5):
        cronbase.testing.drain(app)
    on_worker = state(app.jobs.get(job_id))
    # Inline: retries simulated, as the worker retries.
    with cronbase.testing.inline(app, retries=True) as run:
        inline_id = run_it()
        inline = state(run.job(inline_id))
    assert on_worker == inline == expected


def test_an_event_wakes_a_suspended_job_the_same_in_both(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    run_it = tasks(app)["suspension"]
    job_id = run_it()
    cronbase.testing.drain(app)
    app.events.emit("invoice_paid:812", {"amount": 12})
    cronbase.testing.drain(app)
    on_worker = app.jobs.get(job_id)
    with cronbase.testing.inline(app, retries=True) as run:
        inline_id = run_it()
        app.events.emit("invoice_paid:812", {"amount": 12})
        inline = run.job(inline_id)
    assert state(on_worker) == state(inline) == ("succeeded", 1, 0)
    assert on_worker.result == inline.result == {"amount": 12}


def test_a_change_to_the_workers_attempt_reaches_inline_mode_too(
    app: cronbase.App, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inline mode runs the worker's own attempt (worker/executor.py), not a copy of it: what
    the attempt gives a handler (here, patched into the executor, a context variable set beside
    current_job()) reaches sync and async handlers on a worker and inline, from defer and from
    defer_async."""
    feature: contextvars.ContextVar[str] = contextvars.ContextVar("feature", default="absent")
    set_current = executor.set_current

    def set_current_and_the_feature(context: cronbase.JobContext) -> None:
        set_current(context)
        feature.set(f"given to {context.task}")

    monkeypatch.setattr(executor, "set_current", set_current_and_the_feature)

    @app.task
    def sync_handler() -> str:
        return feature.get()

    @app.task
    async def async_handler() -> str:
        return feature.get()

    ids = [sync_handler.defer(), async_handler.defer()]
    cronbase.testing.drain(app)
    on_worker = [app.jobs.get(job_id).result for job_id in ids]

    async def defer_async() -> list[int]:
        return [await sync_handler.defer_async(), await async_handler.defer_async()]

    with cronbase.testing.inline(app) as run:
        ids = [sync_handler.defer(), async_handler.defer(), *asyncio.run(defer_async())]
    inline = [run.job(job_id).result for job_id in ids]
    assert on_worker == ["given to sync_handler", "given to async_handler"]
    assert inline == on_worker * 2
    assert feature.get() == "absent"  # set in each attempt's own context only
