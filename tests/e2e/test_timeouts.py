"""A timed-out attempt is over only when its handler has returned: worker processes running
handlers that ignore their timeout, swallow its cancellation, heed it, or run in a child process
that is killed at it (tests/e2e/timeout_app.py). Two attempts of one job never overlap."""

from __future__ import annotations

import os
import signal
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import psycopg
import pytest

from tests.browser.conftest import running_dashboard
from tests.conftest import wait_for
from tests.e2e.harness import (
    WorkerProcesses,
    events,
    history,
    is_registered,
    job_row,
    set_flag,
)
from tests.servers import free_port

pytestmark = [pytest.mark.slow]


@pytest.fixture
def timeout_app(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """tests.e2e.timeout_app, its module-level App on the test database (to defer its tasks)."""
    monkeypatch.setenv("CRONBASE_DATABASE_URL", database_url)
    from tests.e2e import timeout_app

    yield timeout_app
    timeout_app.app.close()


@pytest.fixture
def processes(workers: WorkerProcesses) -> WorkerProcesses:
    workers.module = "tests.e2e.timeout_app"
    return workers


def finished(db: psycopg.Connection[Any], job_id: int) -> bool:
    return job_row(db, job_id)["status"] in ("succeeded", "dead", "cancelled")


def started_after_previous_ended(steps: list[tuple[int, str, int]]) -> bool:
    """Whether each attempt's first event comes after the last event of the attempt before."""
    last_of: dict[int, int] = {}
    first_of: dict[int, int] = {}
    for index, (attempt, _, _) in enumerate(steps):
        first_of.setdefault(attempt, index)
        last_of[attempt] = index
    return all(first_of[n] > last_of[n - 1] for n in first_of if n - 1 in last_of)


def test_a_sync_handler_past_its_timeout_keeps_its_slot_and_lease_and_its_retry_waits(
    processes: WorkerProcesses,
    timeout_app: ModuleType,
    db: psycopg.Connection[Any],
    database_url: str,
    tmp_path: Path,
) -> None:
    port = free_port()
    worker = processes.start("A", "--metrics-port", str(port), "--reap-interval", "0.2")
    wait_for(partial(is_registered, db, "A"), timeout=60, what="worker A")

    def overrun_shown() -> list[Any]:
        (found,) = [w for w in timeout_app.app.workers() if w.id == "A"]
        return found.overruns

    with running_dashboard(database_url, tmp_path / "dashboard.log") as dashboard:
        # 4 s of sleep past a 1 s timeout, with a 2 s lease that only renewals keep.
        job_id = timeout_app.stubborn.defer(seconds=4.0)
        (overrun,) = wait_for(overrun_shown, timeout=30, what="the overrun in cronbase workers")
        page = httpx.get(f"{dashboard.url}/workers", timeout=10).text
    assert (overrun.job_id, overrun.task, overrun.attempt) == (job_id, "stubborn", 1)
    assert overrun.seconds_past >= 1.0
    assert 'id="overruns"' in page
    assert f'<tr data-job="{job_id}">' in page
    worker.wait_for_log(f"job {job_id} (stubborn) attempt 1 ignores its timeout")

    # Past the lease, the attempt still runs: renewed, not reaped, and no retry is claimable.
    wait_for(
        lambda: (
            db.execute(
                "SELECT now() - started_at > interval '3 seconds' FROM cronbase.jobs_all WHERE id = %s",
                (job_id,),
            ).fetchone()
            == (True,)
        ),
        timeout=30,
        what="3 s since the attempt started",
    )
    row = job_row(db, job_id)
    if row["attempts"] == 1:  # its handler sleeps 4 s: it may have returned just now
        assert row["status"] == "running"
        assert row["locked_until"] > db.execute("SELECT now()").fetchone()[0]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        metrics = reply.read().decode()
    assert 'cronbase_jobs_timed_out_total{queue="default",task="stubborn"} ' in metrics
    assert 'cronbase_jobs_overran_total{queue="default",task="stubborn"} ' in metrics

    wait_for(partial(finished, db, job_id), timeout=60, what="the job to end")
    steps = events(db, job_id)
    assert [(a, e) for a, e, _ in steps] == [
        (1, "started"),
        (1, "ended cancelled=True"),
        (1, "refused: AttemptTimeoutError"),
        (2, "started"),
        (2, "ended cancelled=True"),
        (2, "refused: AttemptTimeoutError"),
    ]
    assert started_after_previous_ended(steps)
    # The effect never committed, and each attempt was recorded as a timeout once it returned.
    assert db.execute("SELECT count(*) FROM test_executions").fetchone() == (0,)
    row = job_row(db, job_id)
    assert (row["status"], row["attempts"]) == ("dead", 2)
    assert row["error_type"] == "TimeoutError"
    assert row["last_error"].startswith("TimeoutError: handler ran past its timeout of 0:00:01")
    assert "after it was cancelled" in row["last_error"]
    assert [outcome for _, outcome, _ in history(db, job_id)] == ["failed", "dead"]
    worker.wait_for_log(f"job {job_id} (stubborn) attempt 2: its handler returned")
    wait_for(lambda: overrun_shown() == [], timeout=10, what="the overrun gone from the list")


def test_an_async_handler_that_swallows_its_cancellation_is_waited_for(
    processes: WorkerProcesses, timeout_app: ModuleType, db: psycopg.Connection[Any]
) -> None:
    processes.start("A", "--reap-interval", "0.2")
    job_id = timeout_app.stubborn_async.defer(seconds=2.0)
    wait_for(partial(finished, db, job_id), timeout=60, what="the job to end")
    steps = events(db, job_id)
    assert [(a, e) for a, e, _ in steps] == [
        (1, "started"),
        (1, "swallowed the cancellation"),
        (1, "ended"),
        (2, "started"),
        (2, "swallowed the cancellation"),
        (2, "ended"),
    ]
    assert started_after_previous_ended(steps)
    row = job_row(db, job_id)
    assert (row["status"], row["attempts"], row["error_type"]) == ("dead", 2, "TimeoutError")
    assert "returned 2.0s after it was cancelled" in row["last_error"]


def test_a_handler_that_polls_is_cancelled_stops_at_its_timeout(
    processes: WorkerProcesses, timeout_app: ModuleType, db: psycopg.Connection[Any]
) -> None:
    processes.start("A")
    job_id = timeout_app.cooperative.defer(seconds=60.0)
    wait_for(partial(finished, db, job_id), timeout=30, what="the job to end")
    assert [(a, e) for a, e, _ in events(db, job_id)] == [(1, "started"), (1, "noticed")]
    row = job_row(db, job_id)
    assert (row["status"], row["error_type"]) == ("dead", "TimeoutError")
    assert row["last_error"] == "TimeoutError: handler ran past its timeout of 0:00:01"


def test_an_isolated_handler_is_killed_at_its_timeout(
    processes: WorkerProcesses, timeout_app: ModuleType, db: psycopg.Connection[Any]
) -> None:
    worker = processes.start("A")
    job_id = timeout_app.isolated_sleeper.defer(seconds=60.0)
    wait_for(partial(finished, db, job_id), timeout=60, what="the job to end")
    steps = events(db, job_id)
    assert [(a, e) for a, e, _ in steps] == [(1, "started"), (2, "started")]
    children = {pid for _, _, pid in steps}
    assert worker.pid not in children
    for pid in children:  # killed, and reaped by the worker
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    row = job_row(db, job_id)
    assert (row["status"], row["attempts"], row["error_type"]) == ("dead", 2, "TimeoutError")
    assert row["last_error"] == (
        "TimeoutError: handler ran past its timeout of 0:00:03; its process was killed"
    )


def test_an_isolated_handler_gets_its_payload_and_returns_its_result_as_json(
    processes: WorkerProcesses, timeout_app: ModuleType, db: psycopg.Connection[Any]
) -> None:
    from datetime import date

    worker = processes.start("A")
    job_id = timeout_app.isolated_value.defer(day=date(2026, 11, 24), label="tuesday")
    wait_for(partial(finished, db, job_id), timeout=60, what="the job to end")
    row = job_row(db, job_id)
    assert row["status"] == "succeeded", row["last_error"]
    result = row["result"]
    assert (result["weekday"], result["label"]) == (2, "TUESDAY")
    assert result["pid"] != worker.pid


def test_an_isolated_handler_whose_process_dies_is_a_failed_attempt(
    processes: WorkerProcesses, timeout_app: ModuleType, db: psycopg.Connection[Any]
) -> None:
    processes.start("A")
    job_id = timeout_app.isolated_crash.defer(status=3)
    wait_for(partial(finished, db, job_id), timeout=60, what="the job to end")
    row = job_row(db, job_id)
    assert (row["status"], row["error_type"]) == ("dead", "cronbase.errors.ProcessDiedError")
    assert "its process exited with status 3 before its handler returned" in row["last_error"]


def test_a_signal_to_the_process_group_leaves_an_isolated_handler_running(
    processes: WorkerProcesses, timeout_app: ModuleType, db: psycopg.Connection[Any]
) -> None:
    """GNU timeout, systemd's control-group kill and Ctrl-C signal the handler's child process
    too: it is the worker's to stop (issue 34), so the attempt finishes in the grace period
    instead of dying of SIGTERM."""
    worker = processes.start("A", "--shutdown-grace", "600", prefix=("setsid",))
    job_id = timeout_app.isolated_waiter.defer(flag="finish")
    wait_for(partial(events, db, job_id), timeout=60, what="the handler to start")
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        os.killpg(worker.pid, sig)
    worker.wait_for_log("finishing 1 running jobs")
    set_flag(db, "finish")
    assert worker.wait_exit(timeout=60) == 0
    row = job_row(db, job_id)
    assert (row["status"], row["attempts"]) == ("succeeded", 1), row["last_error"]
    assert [e for _, e, _ in events(db, job_id)] == ["started", "ended"]


def test_an_isolated_handler_s_timeout_starts_when_its_handler_does(
    processes: WorkerProcesses, timeout_app: ModuleType, db: psycopg.Connection[Any]
) -> None:
    """A child that takes 3 s to start (each import of the app sleeps), for a 1 s timeout: the
    start is not the handler's, so the job succeeds."""
    processes.start("A", env={"TIMEOUT_APP_CHILD_START_SECONDS": "3"})
    job_id = timeout_app.isolated_quick.defer(label="slow start")
    wait_for(partial(finished, db, job_id), timeout=90, what="the job to end")
    row = job_row(db, job_id)
    assert (row["status"], row["result"]) == ("succeeded", {"label": "slow start"}), row


def test_an_isolated_child_that_does_not_start_within_its_limit_is_killed(
    processes: WorkerProcesses, timeout_app: ModuleType, db: psycopg.Connection[Any]
) -> None:
    """The start has a limit of its own (here 1 s: the timeout's, above STARTUP_LIMIT's 0.5):
    a child still starting past it is killed, a failed attempt that says why."""
    env = {"TIMEOUT_APP_CHILD_START_SECONDS": "30", "TIMEOUT_APP_STARTUP_LIMIT_SECONDS": "0.5"}
    processes.start("A", env=env)
    job_id = timeout_app.isolated_quick.defer(label="never starts")
    wait_for(partial(finished, db, job_id), timeout=60, what="the job to end")
    row = job_row(db, job_id)
    assert (row["status"], row["error_type"]) == ("dead", "cronbase.errors.ProcessDiedError")
    assert row["last_error"] == (
        f"ProcessDiedError: job {job_id} (task 'isolated_quick'): its process was killed after "
        "1s of start-up (spawning it, importing the task's module) before its handler returned"
    )


def test_the_app_module_is_importable_by_path(tmp_path: Path) -> None:
    """The children import the tasks by module name: the module must not need the test run."""
    from tests.e2e import timeout_app

    assert timeout_app.isolated_value.func.__module__ == "tests.e2e.timeout_app"
