"""The effects ledger across real worker processes, real SIGKILLs and a real SMTP server.

The monthly report of ``examples/monthly_report.py`` is sent to an aiosmtpd sink on loopback
whose log is the truth about what was sent; ``tests/e2e/effects_app.py`` runs it with pauses at
named points, where a test kills the worker (see that module for the marker files).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import cronbase
from examples import monthly_report
from examples.smtp_sink import SmtpSink
from tests.conftest import wait_for
from tests.e2e.effects_app import TEST_ROWS, make_app
from tests.e2e.harness import (
    QUERIES,
    REPO,
    WorkerProcess,
    WorkerProcesses,
    history,
    is_registered,
    job_row,
    run_example,
)
from tests.e2e.test_cli import cronbase as run_cli
from tests.e2e.test_cli import ok

pytestmark = pytest.mark.slow

ANA = {"user_email": "ana@example.com", "period": "2026-10"}
KEY = monthly_report.effect_key(**ANA)
MESSAGE_ID = monthly_report.message_id_for(KEY)


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[SmtpSink]:
    with SmtpSink(tmp_path / "sink.jsonl") as running:
        yield running


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    folder = tmp_path / "markers"
    folder.mkdir()
    return folder


@pytest.fixture
def workers(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path, sink: SmtpSink, markers: Path
) -> Iterator[WorkerProcesses]:
    db.execute(TEST_ROWS)
    env = {
        "SMTP_HOST": sink.host,
        "SMTP_PORT": str(sink.port),
        "SMTP_SINK_LOG": str(sink.log_path),
        "EFFECTS_TEST_DIR": str(markers),
    }
    with WorkerProcesses(
        database_url, tmp_path, module="tests.e2e.effects_app", env=env
    ) as processes:
        yield processes


@pytest.fixture
def tasks(database_url: str, db: psycopg.Connection[Any]) -> Iterator[cronbase.App]:
    """The worker processes' app, on the test database, for deferring its tasks."""
    app = make_app(database_url)
    yield app
    app.close()


# -- helpers -------------------------------------------------------------------------------------


def emails(sink: SmtpSink) -> list[str]:
    """The Message-IDs the sink accepted, in order."""
    return [message["message_id"] for message in sink.received()]


def effect(db: psycopg.Connection[Any], key: str = KEY) -> dict[str, Any]:
    with db.cursor(row_factory=dict_row) as cur:
        found = cur.execute("SELECT * FROM cronbase.effects WHERE key = %s", (key,)).fetchone()
    assert found is not None, f"no effect {key!r}"
    return found


def attempts(db: psycopg.Connection[Any], job_id: int) -> list[tuple[str, str | None]]:
    """(outcome, error) of each attempt of a job, oldest first."""
    rows = db.execute(QUERIES.list_job_attempts, {"id": job_id}).fetchall()
    return [(outcome, error) for *_, outcome, error, _, _ in rows]


def wait_paused(markers: Path, point: str, job_id: int) -> int:
    """Until job ``job_id`` stops at ``point``; the pid of the process that stopped there."""
    marker = markers / f"{point}-{job_id}"
    wait_for(
        lambda: marker.exists() and marker.read_text(), timeout=30, what=f"job {job_id} at {point}"
    )
    return int(marker.read_text())


def release(markers: Path, point: str) -> None:
    (markers / f"{point}.release").touch()


def wait_status(db: psycopg.Connection[Any], job_id: int, status: str) -> None:
    wait_for(
        lambda: job_row(db, job_id)["status"] == status,
        timeout=30,
        what=f"job {job_id} to be {status}",
    )


def wait_stale(db: psycopg.Connection[Any], stale_after: timedelta, key: str = KEY) -> None:
    """Until the database clock says the effect has been processing longer than stale_after."""

    def is_stale() -> bool:
        found = db.execute(
            "SELECT status = 'processing' AND started_at < now() - %s::interval "
            "FROM cronbase.effects WHERE key = %s",
            (stale_after, key),
        ).fetchone()
        return bool(found and found[0])

    wait_for(is_stale, timeout=30, what=f"effect {key!r} to go stale")


def kill(process: WorkerProcess) -> None:
    process.send(signal.SIGKILL)
    assert process.wait_exit() == -signal.SIGKILL


def send_report(tasks: cronbase.App, **payload: Any) -> int:
    job_id: int = tasks.get_task("send_report").defer(**ANA, **payload)
    return job_id


# -- racing, dying, hanging ----------------------------------------------------------------------


def test_two_workers_racing_on_one_key_send_one_email(
    workers: WorkerProcesses,
    tasks: cronbase.App,
    db: psycopg.Connection[Any],
    sink: SmtpSink,
    markers: Path,
) -> None:
    # The same report enqueued twice (no idempotency key): two jobs, one effect.
    pauses = ["before_once", "before_send"]
    jobs = [send_report(tasks, stale_after=60, pauses=pauses) for _ in range(2)]
    workers.start("A")
    workers.start("B")
    pids = {wait_paused(markers, "before_once", job_id) for job_id in jobs}
    assert len(pids) == 2, "both jobs should run, each in its own worker process"
    release(markers, "before_once")  # both enter once() now

    def owner_and_turned_away() -> tuple[int, int] | None:
        owners = [j for j in jobs if (markers / f"before_send-{j}").exists()]
        others = [j for j in jobs if j not in owners]
        # Turned away: queued again to look later, the attempt not counted (not failed).
        if len(owners) == 1 and attempts(db, others[0]):
            return owners[0], others[0]
        return None

    winner, loser = wait_for(owner_and_turned_away, timeout=30, what="one owner, one turned away")
    assert (effect(db)["status"], effect(db)["job_id"]) == ("processing", winner)
    assert attempts(db, loser)[0][1] is not None
    assert f"is in progress by job {winner} attempt 1" in (attempts(db, loser)[0][1] or "")
    assert emails(sink) == []

    release(markers, "before_send")
    wait_status(db, winner, "succeeded")
    wait_status(db, loser, "succeeded")

    assert emails(sink) == [MESSAGE_ID]
    row = effect(db)
    assert (row["status"], row["job_id"], row["takeovers"], row["result"]) == (
        "done",
        winner,
        0,
        {"message_id": MESSAGE_ID},
    )
    assert attempts(db, winner) == [("succeeded", None)]
    loser_attempts = attempts(db, loser)
    assert loser_attempts[-1] == ("succeeded", None)
    assert len(loser_attempts) >= 2
    assert job_row(db, loser)["attempts"] == 1  # waiting for the winner's effect cost none
    for outcome, error in loser_attempts[:-1]:
        assert outcome == "snoozed"
        assert error is not None
        assert error.startswith(f"EffectInProgress: effect '{KEY}' is in progress by job {winner}")


def test_a_worker_killed_before_sending_sends_once_after_the_retry(
    workers: WorkerProcesses,
    tasks: cronbase.App,
    db: psycopg.Connection[Any],
    sink: SmtpSink,
    markers: Path,
) -> None:
    job_id = send_report(tasks, stale_after=1, pauses=["before_send"])
    a = workers.start("A")
    assert wait_paused(markers, "before_send", job_id) == a.pid
    assert (effect(db)["status"], effect(db)["attempt"]) == ("processing", 1)
    kill(a)
    wait_stale(db, timedelta(seconds=1))

    workers.start("B")
    wait_status(db, job_id, "succeeded")

    assert emails(sink) == [MESSAGE_ID]
    assert history(db, job_id) == [(1, "lost", "A"), (2, "succeeded", "B")]
    row = effect(db)
    # reconcile was asked (the sink's log had nothing), then attempt 2 took over and sent.
    assert (row["status"], row["attempt"], row["takeovers"], row["reconciled"]) == (
        "done",
        2,
        1,
        False,
    )
    assert row["result"] == {"message_id": MESSAGE_ID}


@pytest.mark.parametrize(
    ("reconcile", "sent"),
    [
        pytest.param(True, [MESSAGE_ID], id="with-reconcile-one-email"),
        # The documented at-least-once case: nothing can tell that the email went out.
        pytest.param(False, [MESSAGE_ID, MESSAGE_ID], id="without-reconcile-two-emails"),
    ],
)
def test_a_worker_killed_after_sending_before_record(
    workers: WorkerProcesses,
    tasks: cronbase.App,
    db: psycopg.Connection[Any],
    sink: SmtpSink,
    markers: Path,
    reconcile: bool,
    sent: list[str],
) -> None:
    job_id = send_report(tasks, stale_after=1, reconcile=reconcile, pauses=["after_send"])
    a = workers.start("A")
    wait_paused(markers, "after_send", job_id)
    assert emails(sink) == [MESSAGE_ID]
    kill(a)
    assert effect(db)["status"] == "processing"  # record() never ran
    wait_stale(db, timedelta(seconds=1))

    workers.start("B")
    wait_status(db, job_id, "succeeded")

    assert emails(sink) == sent
    assert history(db, job_id) == [(1, "lost", "A"), (2, "succeeded", "B")]
    row = effect(db)
    assert (row["status"], row["takeovers"], row["reconciled"]) == ("done", 1, reconcile)
    if reconcile:
        # Marked done from the sink's log; the row still names attempt 1, which sent it.
        assert (row["attempt"], row["result"]) == (
            1,
            {"message_id": MESSAGE_ID, "found_in": "smtp log"},
        )
    else:
        assert (row["attempt"], row["result"]) == (2, {"message_id": MESSAGE_ID})


def test_a_hung_owner_is_taken_over_after_stale_after_and_cannot_finish(
    workers: WorkerProcesses,
    tasks: cronbase.App,
    db: psycopg.Connection[Any],
    sink: SmtpSink,
    markers: Path,
) -> None:
    stale_after = timedelta(seconds=2)
    hung = send_report(tasks, stale_after=2, pauses=["before_send"])
    workers.start("A")  # concurrency 1: busy with the hung job from now on
    wait_paused(markers, "before_send", hung)
    first = effect(db)
    # Fresh: any caller allowing it more time is turned away, naming who holds it.
    with (
        pytest.raises(cronbase.EffectInProgress, match=f"in progress by job {hung} attempt 1"),
        tasks.effects.once(KEY, stale_after=timedelta(hours=1)),
    ):
        pytest.fail("the block ran while job A held the effect")

    other = send_report(tasks, stale_after=2)
    workers.start("B")
    wait_status(db, other, "succeeded")

    row = effect(db)
    assert (row["status"], row["job_id"], row["takeovers"]) == ("done", other, 1)
    assert row["started_at"] - first["started_at"] >= stale_after  # not a moment before
    assert job_row(db, hung)["status"] == "running"  # its worker is alive and renewing
    assert job_row(db, other)["attempts"] == 1
    for outcome, error in attempts(db, other)[:-1]:
        assert outcome == "snoozed"  # waited, the attempt not counted
        assert (error or "").startswith("EffectInProgress")
    assert emails(sink) == [MESSAGE_ID]

    # The hung owner wakes up and sends as well (it cannot know; this is what stale_after
    # risks), then finds it lost the effect: its attempt fails, the retry sees it done.
    release(markers, "before_send")
    wait_status(db, hung, "succeeded")
    assert emails(sink) == [MESSAGE_ID, MESSAGE_ID]
    hung_attempts = attempts(db, hung)
    assert [outcome for outcome, _ in hung_attempts] == ["failed", "succeeded"]
    assert "was taken over by another owner" in (hung_attempts[0][1] or "")
    assert (effect(db)["job_id"], effect(db)["takeovers"]) == (other, 1)


# -- forgetting ----------------------------------------------------------------------------------


def test_forget_allows_a_resend(
    workers: WorkerProcesses,
    tasks: cronbase.App,
    database_url: str,
    db: psycopg.Connection[Any],
    sink: SmtpSink,
) -> None:
    workers.start("A")
    wait_for(partial(is_registered, db, "A"), timeout=30, what="worker A to start")

    def run_report() -> None:
        wait_status(db, send_report(tasks), "succeeded")

    run_report()
    run_report()  # already done: no second email
    assert emails(sink) == [MESSAGE_ID]

    out = ok(run_cli(database_url, "effects", "forget", KEY))
    assert f"effect '{KEY}' forgotten (it was done)" in out
    run_report()
    assert emails(sink) == [MESSAGE_ID] * 2

    assert tasks.effects.forget(KEY).status == "done"
    run_report()
    assert emails(sink) == [MESSAGE_ID] * 3
    assert effect(db)["status"] == "done"


# -- transactional completion --------------------------------------------------------------------


def written_rows(db: psycopg.Connection[Any]) -> list[tuple[int, int, int]]:
    rows = db.execute("SELECT job_id, attempt, n FROM effects_test_rows ORDER BY id").fetchall()
    return [(job_id, attempt, n) for job_id, attempt, n in rows]


TRANSACTION_TASKS = ["write_in_transaction", "write_in_transaction_async"]


@pytest.mark.parametrize("task", TRANSACTION_TASKS)
def test_transaction_rolls_back_writes_and_success_when_the_handler_raises(
    workers: WorkerProcesses, tasks: cronbase.App, db: psycopg.Connection[Any], task: str
) -> None:
    job_id = tasks.get_task(task).defer(n=7, fail_attempts=1)
    workers.start("A")
    wait_status(db, job_id, "succeeded")

    # Attempt 1 wrote, then raised: its row and its success rolled back together (else the
    # job would have succeeded at attempt 1). Attempt 2 committed both.
    assert written_rows(db) == [(job_id, 2, 7)]
    assert attempts(db, job_id) == [
        ("failed", "RuntimeError: attempt 1 fails on purpose"),
        ("succeeded", None),
    ]
    job = job_row(db, job_id)
    assert (job["attempts"], job["locked_by"], job["lease_token"]) == (2, "A", None)


@pytest.mark.parametrize("task", TRANSACTION_TASKS)
def test_transaction_commits_writes_and_success_together_or_neither(
    workers: WorkerProcesses,
    tasks: cronbase.App,
    db: psycopg.Connection[Any],
    markers: Path,
    task: str,
) -> None:
    job_id = tasks.get_task(task).defer(n=8, pauses=["in_transaction"])
    a = workers.start("A")
    wait_paused(markers, "in_transaction", job_id)
    # Written but not committed: neither the row nor the success shows.
    assert written_rows(db) == []
    assert job_row(db, job_id)["status"] == "running"
    # Killed inside the transaction: both are gone; the retry commits both, once.
    kill(a)
    assert written_rows(db) == []
    workers.start("B")
    wait_status(db, job_id, "succeeded")

    assert written_rows(db) == [(job_id, 2, 8)]
    assert history(db, job_id) == [(1, "lost", "A"), (2, "succeeded", "B")]


# -- the example ---------------------------------------------------------------------------------


def test_the_example_sends_each_report_once(database_url: str, db: psycopg.Connection[Any]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SMTP_PORT")}
    env.update(CRONBASE_DATABASE_URL=database_url, PYTHONPATH=str(REPO))
    result = run_example("monthly_report", env)
    assert "3 report jobs: succeeded, succeeded, succeeded" in result.stdout
    assert "the SMTP sink received 2 emails:" in result.stdout
    assert MESSAGE_ID in result.stdout
    done = db.execute(
        "SELECT key, result->>'message_id' FROM cronbase.effects WHERE status = 'done' ORDER BY key"
    ).fetchall()
    assert done == [
        (KEY, MESSAGE_ID),
        (
            "monthly_report:2026-10:bo@example.com",
            monthly_report.message_id_for("monthly_report:2026-10:bo@example.com"),
        ),
    ]
