"""Fencing by lease token: an attempt that lost its lease can change nothing any more."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import cronbase
from cronbase.worker.claim import ClaimedJob
from cronbase.worker.completer import finish_params
from cronbase.worker.outcomes import Outcome
from tests.conftest import claim_rows, wait_for
from tests.e2e.harness import eventually, running_worker, wait_event


def claim(app: cronbase.App, db: psycopg.Connection[Any], worker: str) -> ClaimedJob:
    rows = claim_rows(app, db, 1, worker)[0]
    assert len(rows) == 1, rows
    return rows[0]


def succeed(
    app: cronbase.App, db: psycopg.Connection[Any], job: ClaimedJob, worker: str
) -> list[int]:
    """The worker's write of a success: carried by its next claim (here one that claims nothing)."""
    return claim_rows(app, db, 0, worker, done=[job])[1]


def reap(app: cronbase.App, db: psycopg.Connection[Any]) -> list[tuple[int, str]]:
    rows = db.execute(app.queries.reap_expired_jobs, {"limit": 100, "channel": app.channel})
    return [(job_id, status) for job_id, status in rows.fetchall()]


def finish(
    app: cronbase.App, db: psycopg.Connection[Any], job: ClaimedJob, outcome: str, worker: str
) -> list[tuple[Any, ...]]:
    if outcome == "succeeded":  # successes are written by complete_jobs (claim_jobs carries it)
        return [(i,) for i in succeed(app, db, job, worker)]
    result = Outcome(job=job, outcome=outcome, retry_in=0.0, error="x", error_type="X")
    return db.execute(app.queries.finish_jobs, finish_params([result], worker)).fetchall()


def heartbeat(
    app: cronbase.App, db: psycopg.Connection[Any], job: ClaimedJob, worker: str
) -> list[tuple[Any, ...]]:
    params = {
        "ids": [job.id],
        "tokens": [job.lease_token],
        "progress": [99.0],
        "stages": ["stale"],
        "worker": worker,
        "overruns": None,
        "succeeded": 0,
        "failed": 0,
    }
    rows = db.execute(app.queries.heartbeat_jobs, params).fetchall()
    # Workers "A" and "B" have no workers row: the row with no job that says so is left out.
    return [r for r in rows if r[0] is not None]


def release(
    app: cronbase.App, db: psycopg.Connection[Any], job: ClaimedJob, worker: str
) -> list[tuple[Any, ...]]:
    params = {
        "ids": [job.id],
        "tokens": [job.lease_token],
        "worker": worker,
        "channel": app.channel,
        "reason": "test",
    }
    return db.execute(app.queries.release_jobs, params).fetchall()


def row(db: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
    with db.cursor(row_factory=dict_row) as cur:
        found = cur.execute("SELECT * FROM cronbase.jobs_all WHERE id = %s", (job_id,)).fetchone()
    assert found is not None
    return found


def history(app: cronbase.App, job_id: int) -> list[tuple[int, str, str | None]]:
    return [(a.attempt, a.outcome, a.worker) for a in app.jobs.attempts(job_id)]


@pytest.mark.parametrize("stale_outcome", ["succeeded", "failed", "dead"])
def test_an_attempt_whose_lease_was_reaped_cannot_touch_the_next_attempt(
    app: cronbase.App, db: psycopg.Connection[Any], stale_outcome: str
) -> None:
    @app.task
    def work() -> None: ...

    job_id = work.configure(lease=timedelta(milliseconds=300)).defer()
    old = claim(app, db, "A")
    # The real lease runs out (database time): no clock is faked.
    wait_for(lambda: reap(app, db) == [(job_id, "failed")], timeout=30, what="the lease to expire")
    new = claim(app, db, "B")
    assert (new.id, new.attempt) == (job_id, 2)
    assert new.lease_token != old.lease_token
    before = row(db, job_id)

    assert finish(app, db, old, stale_outcome, "A") == []
    assert succeed(app, db, old, "A") == []  # successes ride on the worker's claim
    assert heartbeat(app, db, old, "A") == []
    assert release(app, db, old, "A") == []
    assert row(db, job_id) == before  # status, lease, progress, attempts: all untouched
    assert (before["status"], before["locked_by"]) == ("running", "B")
    assert history(app, job_id) == [(1, "lost", "A")]

    # The live attempt's token still works.
    assert [r[0] for r in heartbeat(app, db, new, "B")] == [job_id]
    assert succeed(app, db, new, "B") == [job_id]
    assert history(app, job_id) == [(1, "lost", "A"), (2, "succeeded", "B")]
    done = row(db, job_id)
    assert (done["status"], done["lease_token"], done["progress"]) == ("succeeded", None, 100)
    assert done["finished_at"] is not None


def test_the_table_refuses_a_token_on_a_job_that_is_not_running(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    # Fencing by token alone (no status test) relies on this rule of the table.
    @app.task
    def work() -> None: ...

    work.defer()
    job = claim(app, db, "w1")
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_lease_token_iff_running"):
        db.execute("UPDATE cronbase.jobs SET status = 'succeeded' WHERE id = %s", [job.id])
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_lease_token_iff_running"):
        db.execute("UPDATE cronbase.jobs SET lease_token = NULL WHERE id = %s", [job.id])
    status = db.execute("SELECT status FROM cronbase.jobs_all WHERE id = %s", [job.id]).fetchone()
    assert status == ("running",)


def test_a_made_up_token_matches_nothing(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    @app.task
    def work() -> None: ...

    job_id = work.defer()
    real = claim(app, db, "A")
    forged = ClaimedJob(**{**real.__dict__, "lease_token": uuid.uuid4()})
    assert finish(app, db, forged, "succeeded", "A") == []
    assert row(db, job_id)["status"] == "running"


@pytest.mark.anyio
@pytest.mark.parametrize("swallows_cancel", [False, True], ids=["plain", "swallows-cancel"])
async def test_cancelling_a_running_async_job_stops_its_handler_and_it_stays_cancelled(
    app: cronbase.App, db: psycopg.Connection[Any], swallows_cancel: bool
) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()
    after: list[int] = []

    @app.task(lease=timedelta(seconds=1))  # renewals, so lease checks, every third of a second
    async def forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            if not swallows_cancel:
                raise
            # Returning normally: the worker must still not record a success.

    @app.task
    async def next_job() -> None:
        after.append(1)

    async with running_worker(app, concurrency=1) as worker:
        job_id = await forever.defer_async()
        await wait_event(started, what="the handler to start")
        await app.jobs.cancel_async(job_id)
        await wait_event(cancelled, what="the heartbeat to cancel the handler")
        # Its slot is free again (concurrency 1): another job runs.
        other = await next_job.defer_async()
        await eventually(lambda: row(db, other)["status"] == "succeeded", what="the next job")
        assert worker.parts.completer is not None
        assert worker.parts.completer.fenced_out == 0

    job = row(db, job_id)
    assert (job["status"], job["attempts"], job["lease_token"]) == ("cancelled", 1, None)
    assert history(app, job_id) == [(1, "cancelled", worker.id)]


@pytest.mark.anyio
async def test_a_sync_job_cancelled_and_retried_runs_again_while_the_old_thread_is_stuck(
    app: cronbase.App, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    first_attempt = threading.Event()
    release_first = threading.Event()

    @app.task(lease=timedelta(milliseconds=600))
    def slow(n: int) -> None:
        if cronbase.current_job().attempt == 1:
            first_attempt.set()
            release_first.wait()

    try:
        async with running_worker(app, concurrency=2, poll_interval=timedelta(milliseconds=50)):
            job_id = await slow.defer_async(n=1)
            await eventually(first_attempt.is_set, what="the first attempt to start")
            await app.jobs.cancel_async(job_id)
            caplog.set_level(logging.WARNING, logger="cronbase")
            await eventually(
                lambda: any("lease lost" in r.getMessage() for r in caplog.records),
                what="the worker to notice the lost lease",
            )
            # Same job, new attempt, same worker, while attempt 1 still holds its thread.
            await app.jobs.retry_async(job_id)
            await eventually(lambda: row(db, job_id)["status"] == "succeeded", what="attempt 2")
            release_first.set()
    finally:
        release_first.set()

    job = row(db, job_id)
    assert (job["status"], job["attempts"]) == ("succeeded", 2)
    assert [(a, o) for a, o, _ in history(app, job_id)] == [(1, "cancelled"), (2, "succeeded")]
