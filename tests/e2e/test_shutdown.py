"""SIGTERM/SIGINT on a worker process: finish within the grace period, hand back the rest."""

from __future__ import annotations

import signal
from functools import partial
from typing import Any

import psycopg
import pytest

import cronbase
from tests.conftest import wait_for
from tests.e2e.harness import (
    WorkerProcesses,
    events,
    history,
    is_registered,
    job_row,
    set_flag,
)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_job_finishing_within_the_grace_period_succeeds_and_the_rest_stay_queued(
    workers: WorkerProcesses, tasks: cronbase.App, db: psycopg.Connection[Any], sig: signal.Signals
) -> None:
    worker = workers.start("A", "--concurrency", "1", "--shutdown-grace", "60")
    running = tasks.defer("blocking", {"flag": "finish"})
    wait_for(lambda: events(db, running), timeout=30, what="the first job to start")
    waiting = [tasks.defer("blocking", {"flag": "finish"}) for _ in range(2)]

    worker.send(sig)
    worker.wait_for_log(f"{sig.name}: finishing 1 running jobs")
    set_flag(db, "finish")

    assert worker.wait_exit() == 0
    assert job_row(db, running)["status"] == "succeeded"
    assert history(db, running) == [(1, "succeeded", "A")]
    for job_id in waiting:
        job = job_row(db, job_id)
        assert (job["status"], job["attempts"]) == ("queued", 0)
        assert history(db, job_id) == []
    assert not is_registered(db, "A")


def test_jobs_still_running_when_the_grace_period_ends_are_handed_back(
    workers: WorkerProcesses, tasks: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    worker = workers.start("A", "--concurrency", "2", "--shutdown-grace", "1")
    # A sync handler cannot be interrupted: the process must leave without its thread.
    stuck_sync = tasks.defer("blocking", {"flag": "later"})
    stuck_async = tasks.defer("blocking_async", {"flag": "later"})
    for job_id in (stuck_sync, stuck_async):
        wait_for(partial(events, db, job_id), timeout=30, what=f"job {job_id} to start")

    worker.send(signal.SIGTERM)
    assert worker.wait_exit() == 0
    assert "grace period over: handing back 2 running jobs" in worker.log()
    for job_id in (stuck_sync, stuck_async):
        job = job_row(db, job_id)
        assert (job["status"], job["attempts"], job["locked_by"]) == ("queued", 0, None)
        assert history(db, job_id) == [(1, "released", "A")]

    # Handed back, not lost: the next worker runs them as their first counted attempt.
    set_flag(db, "later")
    assert workers.start("B", "--burst").wait_exit() == 0
    for job_id in (stuck_sync, stuck_async):
        job = job_row(db, job_id)
        assert (job["status"], job["attempts"]) == ("succeeded", 1)
        assert history(db, job_id) == [(1, "released", "A"), (1, "succeeded", "B")]


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_second_signal_is_the_same_request_and_the_job_still_finishes(
    workers: WorkerProcesses,
    tasks: cronbase.App,
    db: psycopg.Connection[Any],
    second: signal.Signals,
) -> None:
    worker = workers.start("A", "--shutdown-grace", "600")
    job_id = tasks.defer("blocking", {"flag": "finish"})
    wait_for(lambda: events(db, job_id), timeout=30, what="the job to start")

    worker.send(signal.SIGTERM)
    worker.wait_for_log("SIGTERM: finishing 1 running jobs")
    worker.send(second)
    worker.wait_for_log(f"{second.name}: worker A is already stopping")
    set_flag(db, "finish")

    assert worker.wait_exit(timeout=60) == 0
    assert job_row(db, job_id)["status"] == "succeeded"
    assert history(db, job_id) == [(1, "succeeded", "A")]


def test_sigquit_hands_back_the_running_jobs_at_once_and_exits_0(
    workers: WorkerProcesses, tasks: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    worker = workers.start("A", "--concurrency", "2", "--shutdown-grace", "600")
    jobs = [tasks.defer(name, {"flag": "later"}) for name in ("blocking", "blocking_async")]
    for job_id in jobs:
        wait_for(partial(events, db, job_id), timeout=30, what=f"job {job_id} to start")

    worker.send(signal.SIGTERM)
    worker.wait_for_log("SIGTERM: finishing 2 running jobs")
    worker.send(signal.SIGQUIT)
    # Well inside the 600s grace period: nobody waited for the jobs, and none was lost.
    assert worker.wait_exit(timeout=60) == 0
    assert "SIGQUIT: handing back 2 running jobs now" in worker.log()
    for job_id in jobs:
        job = job_row(db, job_id)
        assert (job["status"], job["attempts"], job["locked_by"]) == ("queued", 0, None)
        assert history(db, job_id) == [(1, "released", "A")]
    assert not is_registered(db, "A")
