"""Leases across real processes: a killed worker's job is finished elsewhere, a live one is not."""

from __future__ import annotations

import signal
from datetime import timedelta
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


def test_a_job_whose_worker_is_killed_is_finished_by_another_after_the_lease(
    workers: WorkerProcesses, tasks: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    a = workers.start("A", "--reap-interval", "0.2")
    job_id = tasks.get_task("blocking").configure(lease=timedelta(seconds=2)).defer(flag="go")
    wait_for(lambda: events(db, job_id), timeout=30, what="A to start the job")
    assert job_row(db, job_id)["locked_by"] == "A"

    a.send(signal.SIGKILL)
    assert a.wait_exit() == -signal.SIGKILL
    set_flag(db, "go")  # from now on the handler runs through
    b = workers.start("B", "--reap-interval", "0.2", "--poll-interval", "0.2")
    wait_for(
        lambda: job_row(db, job_id)["status"] == "succeeded", timeout=30, what="B to finish it"
    )

    job = job_row(db, job_id)
    assert job["attempts"] == 2
    assert (job["locked_by"], job["lease_token"]) == ("B", None)  # B ran the final attempt
    # The reaper wrote A's attempt off only once its lease had run out.
    assert history(db, job_id) == [(1, "lost", "A"), (2, "succeeded", "B")]
    lost_at = db.execute(
        "SELECT finished_at - started_at FROM cronbase.job_attempts_all WHERE outcome = 'lost'"
    ).fetchone()
    assert lost_at is not None
    assert lost_at[0] >= timedelta(seconds=2)
    assert events(db, job_id) == [
        (1, "started", a.pid),
        (2, "started", b.pid),
        (2, "effect", b.pid),
    ]


def test_a_job_outliving_its_lease_is_renewed_and_never_stolen(
    workers: WorkerProcesses, tasks: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    workers.start("A")
    job_id = tasks.get_task("blocking").configure(lease=timedelta(seconds=1)).defer(flag="done")
    wait_for(lambda: events(db, job_id), timeout=30, what="A to start the job")
    # B reaps and polls all the time the job runs.
    workers.start("B", "--reap-interval", "0.05", "--poll-interval", "0.05")
    wait_for(lambda: is_registered(db, "B"), timeout=30, what="B to start")

    leases: set[Any] = set()

    def renewed_three_times() -> bool:
        job = job_row(db, job_id)
        assert (job["status"], job["locked_by"], job["attempts"]) == ("running", "A", 1)
        leases.add(job["locked_until"])
        return len(leases) >= 4  # the lease seen first, then three renewals

    wait_for(renewed_three_times, timeout=30, what="three renewals of the 1s lease")
    set_flag(db, "done")
    wait_for(lambda: job_row(db, job_id)["status"] == "succeeded", timeout=30, what="A to finish")

    assert job_row(db, job_id)["attempts"] == 1
    assert history(db, job_id) == [(1, "succeeded", "A")]
    assert [event for _, event, _ in events(db, job_id)] == ["started", "effect"]
