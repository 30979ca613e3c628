"""A worker never dies with jobs in hand: rows written by other SQL, tasks it does not know, and
database errors that pass or last."""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from tests.conftest import wait_for
from tests.e2e.harness import eventually, running_worker

POISON = {
    # Deeper than MAX_JSON_DEPTH (Python's JSON decoder recurses per level: RecursionError).
    "deep": "'{\"x\": ' || repeat('[', 10000) || repeat(']', 10000) || '}'",
    # Python refuses to turn more than 4,300 digits into an int: ValueError.
    "digits": "'{\"n\": ' || repeat('9', 5001) || '}'",
}


def insert_by_sql(db: psycopg.Connection[Any], task: str, payload_sql: str, **columns: str) -> int:
    """A job row written by other SQL, as an operator's script or another program would."""
    names = ", ".join(["task", "payload", *columns])
    values = ", ".join([f"'{task}'", f"({payload_sql})::jsonb", *columns.values()])
    row = db.execute(
        f"INSERT INTO cronbase.jobs ({names}) VALUES ({values}) RETURNING id"
    ).fetchone()
    assert row is not None
    return int(row[0])


def job_state(db: psycopg.Connection[Any], job_id: int) -> tuple[str, int, str | None]:
    row = db.execute(
        "SELECT status, attempts, last_error FROM cronbase.jobs_all WHERE id = %s", [job_id]
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def test_undecodable_rows_die_alone_and_their_batch_mates_run(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    ran: list[int] = []

    @app.task
    def work(n: int = 0, x: Any = None) -> None:
        ran.append(n)

    healthy = work.defer_many([{"n": n} for n in range(1, 11)])
    poison = {name: insert_by_sql(db, "work", sql) for name, sql in POISON.items()}
    # A lease the claim could not add to now() would fail every claim: the table refuses it.
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_lease_range"):
        insert_by_sql(db, "work", "'{}'", lease="interval '100000000 years'")
    # All of them in one claim: the poison shares a batch with the healthy jobs.
    app.run_worker(burst=True, install_signal_handlers=False, concurrency=20)

    assert sorted(ran) == list(range(1, 11))
    assert {job_state(db, i)[:2] for i in healthy} == {("succeeded", 1)}
    for name, job_id in poison.items():
        status, attempts, error = job_state(db, job_id)
        assert (status, attempts) == ("dead", 1), name
        assert error is not None
        assert f"job {job_id} (task 'work') cannot be decoded" in error, error
    assert "nested deeper than 100 levels" in (job_state(db, poison["deep"])[2] or "")
    assert "ValueError" in (job_state(db, poison["digits"])[2] or "")


def test_a_worker_claims_only_the_tasks_it_registers(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def known() -> None: ...

    mine = known.defer()
    # Deferred by another project, or by a newer version of this one mid-deploy.
    foreign = insert_by_sql(db, "not_registered_here", "'{}'")
    app.run_worker(burst=True, install_signal_handlers=False)

    assert job_state(db, mine)[:2] == ("succeeded", 1)
    # Untouched: no attempt burnt, waiting for a worker that knows the task.
    assert job_state(db, foreign) == ("queued", 0, None)


def test_the_worker_registry_records_its_tasks_and_stats_show_unserved_ones(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def known() -> None: ...

    @app.task
    def other() -> None: ...

    insert_by_sql(db, "orphan", "'{}'")
    insert_by_sql(db, "orphan", "'{}'")
    worker = app.worker(install_signal_handlers=False, schedule=False)

    async def main() -> list[dict[str, Any]]:
        task = asyncio.create_task(worker.run())
        await worker.started.wait()
        try:
            return await app.db.fetch_all_async(app.queries.list_workers)
        finally:
            worker.stop()
            await task

    workers = asyncio.run(main())
    assert [w["tasks"] for w in workers] == [["known", "other"]]
    # The worker has gone; so nobody serves the orphan jobs (nor would it have).
    unserved = app.unserved_jobs()
    assert [(u.task, u.queue, u.waiting) for u in unserved] == [("orphan", "default", 2)]


def run_in_thread(worker: cronbase.worker.Worker) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(worker.run())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, errors


def test_a_claim_error_that_passes_does_not_end_the_worker(
    app: cronbase.App, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[int] = []

    @app.task
    def work(n: int) -> None:
        ran.append(n)

    worker = app.worker(
        install_signal_handlers=False,
        schedule=False,
        poll_interval=timedelta(milliseconds=50),
        fatal_after=timedelta(minutes=5),
    )
    thread, errors = run_in_thread(worker)
    wait_for(lambda: worker.started.is_set(), what="the worker to start")
    # An operator's mistake, put right: every claim fails (a ProgrammingError, not an
    # OperationalError) until the table is back.
    with caplog.at_level(logging.WARNING, logger="cronbase"):
        db.execute("ALTER TABLE cronbase.queues RENAME TO queues_away")
        wait_for(lambda: "claiming jobs failed" in caplog.text, what="a failed claim")
        work.defer(n=1)
        assert thread.is_alive()
        db.execute("ALTER TABLE cronbase.queues_away RENAME TO queues")
        wait_for(lambda: ran == [1], what="the job to run once the table is back")
    worker.stop()
    thread.join(30)
    assert not thread.is_alive()
    assert errors == []
    # Logged once for the run of failures, not once per retry.
    assert caplog.text.count("claiming jobs failed") == 1
    assert "claiming jobs works again" in caplog.text


def test_a_fatal_error_that_lasts_hands_back_the_jobs_and_ends_the_worker(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    started = threading.Event()
    release = threading.Event()

    @app.task
    def slow() -> None:
        started.set()
        release.wait(30)

    job_id = slow.defer()
    worker = app.worker(
        install_signal_handlers=False,
        schedule=False,
        poll_interval=timedelta(milliseconds=50),
        fatal_after=timedelta(seconds=1),
        concurrency=2,
    )
    thread, errors = run_in_thread(worker)
    assert started.wait(15)
    db.execute("ALTER TABLE cronbase.queues RENAME TO queues_away")
    try:
        thread.join(30)
        assert not thread.is_alive()
    finally:
        release.set()
        db.execute("ALTER TABLE cronbase.queues_away RENAME TO queues")
    assert len(errors) == 1, errors
    assert isinstance(errors[0], cronbase.WorkerFatalError), errors
    assert "queues" in str(errors[0].__cause__)
    # Handed back at once (attempt not counted), not left running until the lease expires.
    assert job_state(db, job_id)[:2] == ("queued", 0)


@pytest.mark.anyio
async def test_jobs_claimed_by_a_lost_reply_are_handed_back_not_left_to_expire(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    ran: list[int] = []

    @app.task
    def work(n: int) -> None:
        ran.append(n)

    async with running_worker(app, poll_interval=timedelta(milliseconds=50)) as worker:
        # What a claim whose reply a restart swallowed leaves behind: a job leased to this
        # worker, under a token it never saw, for an hour.
        row = db.execute(
            "INSERT INTO cronbase.jobs (task, payload, status, attempts, locked_by, locked_until,"
            " lease_token, started_at) VALUES ('work', '{\"n\": 7}', 'running', 1, %s,"
            " now() + interval '1 hour', gen_random_uuid(), now()) RETURNING id",
            [worker.id],
        ).fetchone()
        assert row is not None
        # The worker's claim failed with its connection (as it does in a restart).
        worker.parts.claimer.may_hold_orphans = True
        worker._wake.set()
        await eventually(lambda: ran == [7], what="the orphaned job to run here, now")
    job = app.jobs.get(row[0])
    # Handed back (attempt not counted), then run: one attempt, not a lease expiry and a retry.
    assert (job.status, job.attempts) == (cronbase.JobStatus.SUCCEEDED, 1)
    attempts = app.jobs.attempts(row[0])
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "released"), (1, "succeeded")]
    assert (
        attempts[0].error
        == "claimed by a statement whose reply was lost; handed back by its worker"
    )
