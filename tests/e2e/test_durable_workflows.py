"""Workflows and durable handlers in real worker processes that get SIGKILLed
(``python -m tests.e2e.durable_app``): steps never run again once finished, a sleep outlives its
worker, an event is handled once whenever it comes, a fan-in runs once with every result, and a
dead parent's dependents end as they asked.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import cronbase
from tests.conftest import wait_for
from tests.e2e.durable_app import DURABLE_TABLE, SLEEP_SECONDS, make_durable_app
from tests.e2e.harness import WorkerProcess, WorkerProcesses

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

FAST = ("--concurrency", "8", "--poll-interval", "0.2", "--reap-interval", "0.2")


@pytest.fixture
def durable(database_url: str, db: psycopg.Connection[Any]) -> Iterator[cronbase.App]:
    db.execute(DURABLE_TABLE)
    app = make_durable_app(database_url)
    yield app
    app.close()


@pytest.fixture
def workers(database_url: str, tmp_path: Path) -> Iterator[WorkerProcesses]:
    with WorkerProcesses(database_url, tmp_path, module="tests.e2e.durable_app") as processes:
        yield processes


def runs(db: psycopg.Connection[Any], job_id: int) -> list[tuple[str, str, int]]:
    return [
        (what, phase, pid)
        for what, phase, pid in db.execute(
            "SELECT what, phase, pid FROM durable_runs WHERE job_id = %s ORDER BY id", (job_id,)
        ).fetchall()
    ]


def status(db: psycopg.Connection[Any], job_id: int) -> tuple[Any, ...]:
    row = db.execute(
        "SELECT status, result, attempts FROM cronbase.jobs_all WHERE id = %s", (job_id,)
    ).fetchone()
    assert row is not None
    return tuple(row)


def kill(process: WorkerProcess) -> None:
    process.send(signal.SIGKILL)
    process.wait_exit(timeout=30)


def test_a_five_step_handler_killed_in_each_step_never_reruns_a_finished_one(
    durable: cronbase.App, workers: WorkerProcesses, db: psycopg.Connection[Any]
) -> None:
    job_id = durable.tasks["five_steps"].defer()
    for n in range(1, 6):
        worker = workers.start(f"k{n}", *FAST)
        # Killed while step n runs (started, not ended) in this worker.
        wait_for(
            lambda n=n, pid=worker.pid: (f"step{n}", "start", pid) in runs(db, job_id),
            timeout=60,
            what=f"step{n} to start in worker k{n}",
        )
        kill(worker)
    last = workers.start("last", *FAST)
    wait_for(lambda: status(db, job_id)[0] == "succeeded", timeout=60, what="the job to finish")
    assert status(db, job_id)[1] == 10 + 20 + 30 + 40 + 50
    seen = runs(db, job_id)
    for n in range(1, 6):
        phases = [phase for what, phase, _ in seen if what == f"step{n}"]
        # Step n was cut once (a start without an end), then ran to its end exactly once;
        # nothing started it again after that end.
        assert phases == ["start", "start", "end"], (n, phases)
    last.send(signal.SIGTERM)
    assert last.wait_exit(timeout=60) == 0


def test_a_sleeping_job_resumes_on_time_on_another_worker(
    durable: cronbase.App, workers: WorkerProcesses, db: psycopg.Connection[Any]
) -> None:
    job_id = durable.tasks["sleeper"].defer()
    first = workers.start("first", *FAST)
    wait_for(
        lambda: (
            db.execute(
                "SELECT status = 'queued' AND run_at > now() FROM cronbase.jobs_all WHERE id = %s",
                (job_id,),
            ).fetchone()
            == (True,)
        ),
        timeout=60,
        what="the job to be suspended",
    )
    row = db.execute(
        "SELECT run_at, attempts, extract(epoch FROM run_at - now()) FROM cronbase.jobs_all "
        "WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    wake_at, attempts, left = row
    assert attempts == 0  # the suspended attempt is not counted
    assert 0 < left <= SLEEP_SECONDS
    kill(first)  # the worker that ran it is gone: nothing in memory carries the sleep
    second = workers.start("second", *FAST)
    wait_for(lambda: status(db, job_id)[0] == "succeeded", timeout=60, what="the job to wake")
    resumed = db.execute(
        "SELECT min(at) FROM durable_runs WHERE job_id = %s AND what = 'after'", (job_id,)
    ).fetchone()
    assert resumed is not None
    assert wake_at <= resumed[0] <= wake_at + timedelta(seconds=3)  # the poll interval's slack
    seen = runs(db, job_id)
    assert [w for w, _, _ in seen] == ["before", "after"]  # each step once
    assert (seen[0][2], seen[1][2]) == (first.pid, second.pid)
    history = db.execute(
        "SELECT outcome FROM cronbase.job_attempts_all WHERE job_id = %s ORDER BY id", (job_id,)
    ).fetchall()
    assert history == [("suspended",)]


def test_an_event_emitted_before_during_or_after_the_wait_is_handled_once(
    durable: cronbase.App, workers: WorkerProcesses, db: psycopg.Connection[Any]
) -> None:
    awaits = durable.tasks["awaits_event"]
    assert durable.events.emit("paid:before", {"amount": 1}) is True
    before = awaits.defer(key="paid:before")
    during = awaits.defer(key="paid:during")
    workers.start("w1", *FAST)
    workers.start("w2", *FAST)
    wait_for(lambda: status(db, before)[0] == "succeeded", timeout=60, what="the early event")
    wait_for(
        lambda: (
            db.execute(
                "SELECT waiting_for FROM cronbase.jobs_all WHERE id = %s", (during,)
            ).fetchone()
            == ("paid:during",)
        ),
        timeout=60,
        what="the second job to wait",
    )
    assert durable.events.emit("paid:during", {"amount": 2}) is True
    wait_for(lambda: status(db, during)[0] == "succeeded", timeout=60, what="the woken job")
    # After: emitting again changes nothing, and the first payload stays.
    assert durable.events.emit("paid:during", {"amount": 3}) is False
    assert durable.events.emit("paid:before", {"amount": 4}) is False
    after = awaits.defer(key="paid:during")  # a later waiter gets the event at once
    wait_for(lambda: status(db, after)[0] == "succeeded", timeout=60, what="the late waiter")
    assert [status(db, j)[1] for j in (before, during, after)] == [
        {"amount": 1},
        {"amount": 2},
        {"amount": 2},
    ]
    for job_id in (before, during, after):
        handled = [r for r in runs(db, job_id) if r[0] == "handled"]
        assert len(handled) == 1, (job_id, runs(db, job_id))
        assert [w for w, _, _ in runs(db, job_id)].count("before") == 1


def test_a_thousand_child_fan_in_runs_once_with_every_result_through_kills(
    durable: cronbase.App, workers: WorkerProcesses, db: psycopg.Connection[Any]
) -> None:
    t = durable.tasks
    callback = cronbase.group([t["square"].s(n=n) for n in range(1000)]).then(t["gather"].s())
    callback_id = callback.defer()
    fleet = [workers.start(f"f{n}", *FAST) for n in range(3)]
    wait_for(
        lambda: (
            db.execute(
                "SELECT count(*) >= 300 FROM cronbase.jobs_all WHERE task = 'square' "
                "AND status = 'succeeded'"
            ).fetchone()
            == (True,)
        ),
        timeout=60,
        what="a third of the children done",
    )
    kill(fleet[0])  # mid-drain: its leased children are reaped and run again elsewhere
    wait_for(
        lambda: status(db, callback_id)[0] == "succeeded", timeout=120, what="the fan-in to run"
    )
    assert status(db, callback_id)[1] == sum(n * n for n in range(1000))
    gathered = db.execute(
        "SELECT value FROM durable_runs WHERE job_id = %s AND what = 'gather'", (callback_id,)
    ).fetchall()
    assert gathered == [([n * n for n in range(1000)],)]  # once, every result, in order


def test_dependents_of_a_dead_parent_end_as_they_asked(
    durable: cronbase.App, workers: WorkerProcesses, db: psycopg.Connection[Any]
) -> None:
    t = durable.tasks
    # A parent that goes dead at once: a row other SQL wrote, whose payload no defer accepts.
    row = db.execute(
        "INSERT INTO cronbase.jobs (task, payload, max_attempts) "
        """VALUES ('square', '{"n": "not a number"}', 1) RETURNING id"""
    ).fetchone()
    assert row is not None
    parent = int(row[0])
    cancelled = t["square"].configure(after=[parent]).defer(n=2)
    runs_anyway = t["square"].configure(after=[parent], on_parent_failure="run").defer(n=3)
    workers.start("d", *FAST)
    wait_for(lambda: status(db, runs_anyway)[0] == "succeeded", timeout=60, what="the 'run' one")
    assert status(db, parent)[0] == "dead"
    assert status(db, cancelled)[0] == "cancelled"
