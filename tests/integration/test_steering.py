"""Handlers steer their job: Snooze, Cancel, retry_on / dont_retry_on, is_cancelled(); and
results with app.jobs.wait. Real workers on the real database."""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from tests.integration.test_worker_resilience import run_in_thread


def drain(app: cronbase.App) -> None:
    app.run_worker(burst=True, install_signal_handlers=False)


def row(db: psycopg.Connection[Any], job_id: int) -> tuple[Any, ...]:
    found = db.execute(
        "SELECT status, attempts, snoozes, last_error, error_type FROM cronbase.jobs_all WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert found is not None
    return tuple(found)


def history(app: cronbase.App, job_id: int) -> list[tuple[int, str, str | None]]:
    return [(a.attempt, a.outcome, a.error_type) for a in app.jobs.attempts(job_id)]


@contextlib.contextmanager
def running_worker(app: cronbase.App) -> Iterator[cronbase.Worker]:
    """A long-running worker of the app's tasks (registered before), in a thread."""
    worker = app.worker(
        install_signal_handlers=False, poll_interval=timedelta(seconds=0.2), schedule=False
    )
    thread, errors = run_in_thread(worker)
    deadline = time.monotonic() + 15
    while not worker.started.is_set() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield worker
    finally:
        worker.stop()  # from this thread: passed to the worker's loop
        thread.join(30)
    assert errors == []


# -- Snooze ---------------------------------------------------------------------------------------


def test_snoozes_do_not_count_attempts(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    calls: list[int] = []

    @app.task(max_attempts=2)
    def poll_export(export_id: int) -> str:
        calls.append(cronbase.current_job().attempt)
        if len(calls) <= 3:
            raise cronbase.Snooze(timedelta(milliseconds=20))
        return "ready"

    job_id = poll_export.defer(export_id=1)
    for _ in range(4):
        drain(app)
        time.sleep(0.03)
    assert calls == [1, 1, 1, 1]
    assert row(db, job_id) == ("succeeded", 1, 3, None, None)
    assert history(app, job_id) == [
        (1, "snoozed", "Snooze"),
        (1, "snoozed", "Snooze"),
        (1, "snoozed", "Snooze"),
        (1, "succeeded", None),
    ]
    assert app.jobs.get(job_id).result == "ready"


def test_snoozing_past_max_snoozes_is_dead(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    @app.task(max_snoozes=2)
    def never_ready() -> None:
        raise cronbase.Snooze(0)

    job_id = never_ready.defer()
    for _ in range(3):
        drain(app)
    status, attempts, snoozes, error, error_type = row(db, job_id)
    assert (status, attempts, snoozes, error_type) == ("dead", 1, 2, "SnoozeLimit")
    assert error == "snoozed 3 times: the task allows 2 (max_snoozes)"
    assert [outcome for _, outcome, _ in history(app, job_id)] == ["snoozed", "snoozed", "dead"]


def test_a_snooze_waits_its_delay(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    @app.task
    def later() -> None:
        raise cronbase.Snooze(timedelta(hours=1))

    job_id = later.defer()
    drain(app)
    status, attempts, *_ = row(db, job_id)
    assert (status, attempts) == ("queued", 0)
    wait = db.execute(
        "SELECT extract(epoch FROM run_at - now()) FROM cronbase.jobs_all WHERE id = %s", (job_id,)
    ).fetchone()
    assert wait is not None
    assert 3500 < wait[0] <= 3600


@pytest.mark.parametrize(
    ("delay", "message"),
    [
        (-1, "Snooze delay must be a timedelta or seconds from 0 to 366 days, got -1"),
        (timedelta(days=400), "got datetime.timedelta(days=400)"),
        (math.nan, "Snooze delay must be a finite number of seconds, got nan"),
    ],
)
def test_a_bad_snooze_delay_is_refused(delay: Any, message: str) -> None:
    with pytest.raises(cronbase.ConfigurationError, match=re.escape(message)):
        cronbase.Snooze(delay)
    with pytest.raises(TypeError, match="Snooze delay must be a timedelta or a number of seconds"):
        cronbase.Snooze("soon")  # type: ignore[arg-type]


# -- Cancel and retry_on --------------------------------------------------------------------------


def test_cancel_ends_the_job_with_its_reason(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(max_attempts=5)
    def charge(order_id: int) -> None:
        raise cronbase.Cancel(f"order {order_id} was refunded")

    job_id = charge.defer(order_id=9)
    drain(app)
    drain(app)
    assert row(db, job_id) == ("cancelled", 1, 0, "order 9 was refunded", "Cancel")
    assert history(app, job_id) == [(1, "cancelled", "Cancel")]
    with pytest.raises(cronbase.ConfigurationError, match="Cancel reason must be a string"):
        cronbase.Cancel(42)  # type: ignore[arg-type]


def test_retry_on_and_dont_retry_on_decide_by_exception_type(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    seen: list[str] = []

    @app.task(retry_on=(OSError,), retry=cronbase.Backoff(base=timedelta(milliseconds=1), jitter=0))
    def fetch(kind: str) -> None:
        seen.append(kind)
        if kind == "value":
            raise ValueError("bad input")
        if kind == "io" and seen.count("io") == 1:
            raise OSError("connection reset")

    @app.task(dont_retry_on=(KeyError,), retry_on=(LookupError,))
    def lookup(key: str) -> None:
        raise KeyError(key)

    value = fetch.defer(kind="value")
    io = fetch.defer(kind="io")
    key = lookup.defer(key="k")
    for _ in range(3):
        drain(app)
    assert row(db, value)[:2] == ("dead", 1)
    assert row(db, key)[:2] == ("dead", 1)
    assert row(db, io)[:2] == ("succeeded", 2)
    assert [outcome for _, outcome, _ in history(app, io)] == ["failed", "succeeded"]


# -- is_cancelled ---------------------------------------------------------------------------------


def test_a_sync_handler_sees_is_cancelled_within_a_heartbeat(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    started = threading.Event()
    seen: list[float] = []

    @app.task(lease=timedelta(seconds=3))
    def long_export() -> None:
        started.set()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if cronbase.current_job().is_cancelled():
                seen.append(time.monotonic())
                return
            time.sleep(0.05)

    job_id = long_export.defer()
    with running_worker(app):
        assert started.wait(15)
        cancelled_at = time.monotonic()
        app.jobs.cancel(job_id)
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
    assert seen, "the handler never saw is_cancelled()"
    # A heartbeat comes every third of the lease (1 s here).
    assert seen[0] - cancelled_at < 2.5
    assert row(db, job_id)[0] == "cancelled"


# -- results and wait -----------------------------------------------------------------------------


def test_results_are_stored_and_wait_returns_them(
    app: cronbase.App,
    db: psycopg.Connection[Any],
    database_url: str,
) -> None:
    @app.task
    def total(items: list[int]) -> dict[str, int]:
        time.sleep(0.2)
        return {"total": sum(items)}

    @app.task
    def nothing() -> None:
        return None

    with (
        running_worker(app),
        psycopg.connect(database_url, autocommit=True) as listener,
    ):
        listener.execute("LISTEN cronbase_done")
        job_id = total.defer(items=[1, 2, 3])
        job = app.jobs.wait(job_id, timeout=15)
        assert job.status is cronbase.JobStatus.SUCCEEDED
        assert job.result == {"total": 6}
        assert app.jobs.get(job_id).result == {"total": 6}
        # The final state was announced, by id, because someone waited.
        notes = [n.payload for n in listener.notifies(timeout=1, stop_after=1)]
        assert notes == [str(job_id)]
        # A job nobody waits for finishes without a NOTIFY.
        quiet = nothing.defer()
        assert app.jobs.wait(quiet, timeout=15).result is None
        unwatched = nothing.defer()
        deadline = time.monotonic() + 10
        while app.jobs.get(unwatched).status is not cronbase.JobStatus.SUCCEEDED:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        notes = [n.payload for n in listener.notifies(timeout=0.5)]
        assert str(unwatched) not in ",".join(notes)


def test_wait_polls_without_a_listener_and_times_out(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    # Through a transaction pooler there is no LISTEN: waits poll (here, a direct URL told so).
    app = cronbase.App(database_url, pooler="transaction")

    @app.task
    def square(n: int) -> int:
        return n * n

    try:
        job_id = square.defer(n=7)
        with pytest.raises(
            TimeoutError, match=f"job {job_id} \\(square\\) is still queued after 0.2s"
        ):
            app.jobs.wait(job_id, timeout=0.2)

        def work_soon() -> None:
            time.sleep(0.3)
            drain(app)

        thread = threading.Thread(target=work_soon)
        thread.start()
        assert app.jobs.wait(job_id, timeout=timedelta(seconds=15)).result == 49
        thread.join()
        with pytest.raises(cronbase.JobNotFoundError):
            app.jobs.wait(999_999, timeout=1)
        with pytest.raises(cronbase.ConfigurationError, match="timeout must be a duration of 0"):
            app.jobs.wait(job_id, timeout=-1)
        with pytest.raises(TypeError, match="timeout must be a timedelta or a number of seconds"):
            app.jobs.wait(job_id, timeout="1")  # type: ignore[arg-type]
    finally:
        app.close()


def test_wait_async_returns_a_cancelled_job(app: cronbase.App) -> None:
    @app.task
    def never_run() -> None: ...

    job_id = never_run.defer()

    async def main() -> cronbase.Job:
        waiting = asyncio.create_task(app.jobs.wait_async(job_id, timeout=15))
        await asyncio.sleep(0.2)
        await app.jobs.cancel_async(job_id)
        return await waiting

    job = asyncio.run(main())
    assert job.status is cronbase.JobStatus.CANCELLED


def test_a_result_that_cannot_be_stored_is_dead_with_a_one_line_reason(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    app = cronbase.App(database_url, max_result_bytes=100)

    @app.task
    def opaque() -> object:
        return object()

    @app.task
    def huge() -> str:
        return "x" * 200

    try:
        a, b = opaque.defer(), huge.defer()
        drain(app)
        status, attempts, _, error, error_type = row(db, a)
        assert (status, attempts, error_type) == ("dead", 1, "cronbase.errors.ResultError")
        assert error.startswith(
            f"ResultError: job {a} (task 'opaque'): its result cannot be stored as JSON: <object object at"
        )
        status, _, _, error, _ = row(db, b)
        assert status == "dead"
        assert error == (
            f"ResultError: job {b} (task 'huge'): its result is 202 bytes of JSON, more than the "
            "100 allowed (App(max_result_bytes=...)); store large data elsewhere and return its key"
        )
        assert "\n" not in error
    finally:
        app.close()
