"""Many jobs over several worker processes: each runs exactly once."""

from __future__ import annotations

import signal
from functools import partial
from typing import Any

import psycopg
import pytest

import cronbase
from tests.conftest import wait_for
from tests.e2e.harness import WorkerProcesses, is_registered

pytestmark = pytest.mark.slow

JOBS = 1000
WORKERS = ("A", "B", "C")


def count(db: psycopg.Connection[Any], query: str) -> int:
    row = db.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def test_a_thousand_jobs_over_three_workers_each_run_exactly_once(
    workers: WorkerProcesses, tasks: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    processes = [workers.start(name, "--concurrency", "8") for name in WORKERS]
    for name in WORKERS:
        # All are up before the jobs arrive, so all of them compete for the same jobs.
        wait_for(partial(is_registered, db, name), timeout=30, what=f"worker {name} to start")

    ids = tasks.get_task("execute_once").defer_many([{"n": n} for n in range(JOBS)])
    assert len(set(ids)) == JOBS
    wait_for(
        lambda: (
            count(db, "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'succeeded'") == JOBS
        ),
        timeout=90,
        what=f"{JOBS} jobs to succeed",
    )

    executions = db.execute("SELECT job_id, n FROM test_executions").fetchall()
    assert len(executions) == JOBS
    assert {job_id for job_id, _ in executions} == set(ids)
    assert sorted(n for _, n in executions) == list(range(JOBS))
    assert count(db, "SELECT count(*) FROM cronbase.jobs_all WHERE attempts <> 1") == 0
    # Every attempt succeeded, so each job's row records its only attempt (no history rows).
    assert count(db, "SELECT count(*) FROM cronbase.job_attempts_all") == 0
    attempts = db.execute(
        "SELECT status, locked_by, count(*) FROM cronbase.jobs_all GROUP BY status, locked_by"
    ).fetchall()
    assert {outcome for outcome, _, _ in attempts} == {"succeeded"}
    assert sum(n for _, _, n in attempts) == JOBS
    assert len({worker for _, worker, _ in attempts}) > 1, f"one worker did all: {attempts}"

    for process in processes:
        process.send(signal.SIGTERM)
    assert [process.wait_exit() for process in processes] == [0, 0, 0]
