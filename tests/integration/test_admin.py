"""app.jobs against PostgreSQL: get, list, attempts, retry, cancel, counts, and their refusals."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase import JobStatus
from tests.conftest import claim_rows
from tests.e2e.harness import job_row

S = JobStatus
NO_RETRY_SOON = cronbase.Backoff(base=timedelta(hours=1), jitter=0)


def db_now(db: psycopg.Connection[Any]) -> datetime:
    now = db.execute("SELECT now()").fetchone()
    assert now is not None
    return now[0]  # type: ignore[no-any-return]


def run_burst(app: cronbase.App) -> None:
    app.run_worker(burst=True, install_signal_handlers=False)


def claim_all(app: cronbase.App, db: psycopg.Connection[Any]) -> list[int]:
    return [job.id for job in claim_rows(app, db, 100)[0]]


@pytest.fixture
def tasks(app: cronbase.App) -> dict[str, cronbase.Task[Any, None]]:
    @app.task
    def ok(n: int = 0) -> None: ...

    @app.task(max_attempts=2, retry=NO_RETRY_SOON)
    def fails(n: int = 0) -> None:
        raise ValueError("no")

    return {"ok": ok, "fails": fails}


def job_in(
    app: cronbase.App, db: psycopg.Connection[Any], tasks: dict[str, Any], status: JobStatus
) -> int:
    """A job in ``status``, taken there by a worker or an operator (one job per test)."""
    if status is S.QUEUED:
        return int(tasks["ok"].configure(delay=timedelta(hours=1)).defer())
    if status is S.RUNNING:
        job_id = int(tasks["ok"].defer())
        assert claim_all(app, db) == [job_id]
        return job_id
    if status is S.CANCELLED:
        job_id = int(tasks["ok"].defer())
        app.jobs.cancel(job_id)
        return job_id
    job_id = int((tasks["ok"] if status is S.SUCCEEDED else tasks["fails"]).defer())
    run_burst(app)
    if status is S.DEAD:
        db.execute("UPDATE cronbase.jobs SET run_at = now() WHERE id = %s", (job_id,))
        run_burst(app)
    assert app.jobs.get(job_id).status is status
    return job_id


# -- get, list, attempts, counts -------------------------------------------------------------------


def test_get_and_list(app: cronbase.App, tasks: dict[str, Any]) -> None:
    a = tasks["ok"].defer(n=1)
    b = tasks["ok"].configure(queue="other").defer(n=2)
    c = tasks["fails"].defer(n=3)
    app.jobs.cancel(c)
    job = app.jobs.get(a)
    assert (job.id, job.task, job.payload, job.status) == (a, "ok", {"n": 1}, S.QUEUED)
    assert [j.id for j in app.jobs.list()] == [c, b, a]  # newest first
    assert [j.id for j in app.jobs.list(status="queued")] == [b, a]
    assert [j.id for j in app.jobs.list(status=S.CANCELLED)] == [c]
    assert [j.id for j in app.jobs.list(queue="other")] == [b]
    assert [j.id for j in app.jobs.list(task="fails")] == [c]
    assert [j.id for j in app.jobs.list(limit=1)] == [c]
    assert sorted(app.jobs.counts()) == [
        ("default", S.CANCELLED, 1),
        ("default", S.QUEUED, 1),
        ("other", S.QUEUED, 1),
    ]


def test_unknown_ids_and_bad_filters_are_refused_by_name(
    app: cronbase.App, tasks: dict[str, Any]
) -> None:
    # One rule for every look-up by id: no such job is JobNotFoundError, never an empty answer.
    lookups: list[Callable[[int], object]] = [
        app.jobs.get,
        app.jobs.attempts,
        app.jobs.retry,
        app.jobs.cancel,
        app.jobs.graph,
        lambda job_id: app.jobs.wait(job_id, timeout=0),
    ]
    for call in lookups:
        for missing in (424242, 99999999, 2**70):
            with pytest.raises(cronbase.JobNotFoundError, match=f"no job with id {missing}"):
                call(missing)

    async def twins() -> None:
        try:
            for twin in (app.jobs.get_async, app.jobs.attempts_async, app.jobs.graph_async):
                with pytest.raises(cronbase.JobNotFoundError, match="no job with id 99999999"):
                    await twin(99999999)
        finally:
            await app.aclose()

    asyncio.run(twins())
    assert app.jobs.attempts(tasks["ok"].defer(n=1)) == []  # a job not yet run has none
    with pytest.raises(
        cronbase.CronbaseError, match="unknown status 'bogus'; one of: pending, queued"
    ):
        app.jobs.list(status="bogus")
    with pytest.raises(cronbase.CronbaseError, match="limit must be at least 1, got 0"):
        app.jobs.list(limit=0)


@pytest.mark.anyio
async def test_async_twins(
    app: cronbase.App, db: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    job_id = await tasks["ok"].defer_async(n=5)
    assert (await app.jobs.get_async(job_id)).payload == {"n": 5}
    assert [j.id for j in await app.jobs.list_async(status="queued")] == [job_id]
    assert (await app.jobs.cancel_async(job_id)).status is S.CANCELLED
    assert (await app.jobs.retry_async(job_id)).status is S.QUEUED
    assert await app.jobs.attempts_async(job_id) == []
    with pytest.raises(cronbase.JobNotFoundError):
        await app.jobs.get_async(424242)
    await app.aclose()


# -- retry -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [S.QUEUED, S.FAILED, S.DEAD, S.CANCELLED, S.SUCCEEDED])
def test_retry_queues_any_job_but_a_running_one_to_run_now(
    app: cronbase.App, db: psycopg.Connection[Any], tasks: dict[str, Any], status: JobStatus
) -> None:
    job_id = job_in(app, db, tasks, status)
    before = job_row(db, job_id)
    start = db_now(db)
    job = app.jobs.retry(job_id)
    assert job.status is S.QUEUED
    assert start <= job.run_at <= db_now(db)  # due now, in database time
    assert (job.finished_at, job.locked_by, job.attempts) == (None, None, before["attempts"])
    # Room for one more attempt, so a dead job is not dead again before it runs.
    assert job.max_attempts == max(before["max_attempts"], before["attempts"] + 1)
    assert job_row(db, job_id)["status"] == "queued"


def test_a_retried_dead_job_runs_once_more(
    app: cronbase.App, db: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    job_id = job_in(app, db, tasks, S.DEAD)
    app.jobs.retry(job_id)
    run_burst(app)
    job = app.jobs.get(job_id)
    assert (job.status, job.attempts, job.max_attempts) == (S.DEAD, 3, 3)
    assert [a.outcome for a in app.jobs.attempts(job_id)] == ["failed", "dead", "dead"]


def test_retrying_a_succeeded_job_keeps_its_success_in_the_history(
    app: cronbase.App, db: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    # A success is recorded by the job row alone; the retry writes it to the history before the
    # row starts over, so both successes are listed.
    job_id = job_in(app, db, tasks, S.SUCCEEDED)
    [first] = app.jobs.attempts(job_id)
    app.jobs.retry(job_id)
    assert app.jobs.attempts(job_id) == [first]
    run_burst(app)
    attempts = app.jobs.attempts(job_id)
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "succeeded"), (2, "succeeded")]
    assert attempts[0] == first
    assert attempts[1].worker == app.jobs.get(job_id).locked_by is not None
    assert first.finished_at < attempts[1].finished_at


def test_the_last_hour_counts_each_ended_attempt_once(
    app: cronbase.App, db: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    for _ in range(3):
        tasks["ok"].defer()
    retried = job_in(app, db, tasks, S.SUCCEEDED)  # a fourth success, then run again: a fifth
    app.jobs.retry(retried)
    tasks["fails"].defer()
    run_burst(app)
    minutes = app.stats().minutes
    assert (sum(m.succeeded for m in minutes), sum(m.failed for m in minutes)) == (5, 1)


def test_retry_notifies_idle_workers(
    app: cronbase.App, database_url: str, tasks: dict[str, Any]
) -> None:
    job_id = tasks["ok"].configure(queue="emails", delay=timedelta(hours=1)).defer()
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {app.channel}")
        app.jobs.retry(job_id)
        received = [n.payload for n in listener.notifies(timeout=10, stop_after=1)]
    assert received == ["emails"]


def test_a_running_job_cannot_be_retried(
    app: cronbase.App, db: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    job_id = job_in(app, db, tasks, S.RUNNING)
    token = job_row(db, job_id)["lease_token"]
    message = (
        f"cannot retry job {job_id}: it is running (retry needs any state but running or pending)"
    )
    with pytest.raises(cronbase.JobStateError, match=re.escape(message)):
        app.jobs.retry(job_id)
    row = job_row(db, job_id)
    assert (row["status"], row["lease_token"]) == ("running", token)


@pytest.mark.anyio
async def test_a_running_job_cannot_be_retried_async(
    app: cronbase.App, db: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    job_id = job_in(app, db, tasks, S.RUNNING)
    with pytest.raises(cronbase.JobStateError, match="it is running"):
        await app.jobs.retry_async(job_id)
    await app.aclose()


def test_retry_refuses_when_another_job_holds_the_dedupe_key(
    app: cronbase.App, db: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    old = tasks["ok"].configure(dedupe_key="invoice:812").defer()
    app.jobs.cancel(old)
    holder = tasks["ok"].configure(dedupe_key="invoice:812").defer()
    assert holder != old
    message = (
        f"cannot retry job {old}: another waiting or running job holds its dedupe_key 'invoice:812'"
    )
    with pytest.raises(cronbase.JobStateError, match=re.escape(message)) as caught:
        app.jobs.retry(old)
    assert "\n" not in str(caught.value)
    assert (job_row(db, old)["status"], job_row(db, holder)["status"]) == ("cancelled", "queued")
    # Once the holder has finished, the key is free and the retry goes through.
    app.jobs.cancel(holder)
    assert app.jobs.retry(old).status is S.QUEUED


@pytest.mark.anyio
async def test_retry_async_refuses_when_another_job_holds_the_dedupe_key(
    app: cronbase.App, db: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    old = await tasks["ok"].configure(dedupe_key="k").defer_async()
    await app.jobs.cancel_async(old)
    holder = await tasks["ok"].configure(dedupe_key="k").defer_async()
    assert claim_all(app, db) == [holder]  # a running holder blocks the key just the same
    with pytest.raises(cronbase.JobStateError, match=f"cannot retry job {old}: .* 'k'"):
        await app.jobs.retry_async(old)
    assert job_row(db, old)["status"] == "cancelled"
    await app.aclose()


# -- cancel ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [S.QUEUED, S.FAILED])
def test_cancel_a_waiting_job(
    app: cronbase.App, db: psycopg.Connection[Any], tasks: dict[str, Any], status: JobStatus
) -> None:
    job_id = job_in(app, db, tasks, status)
    attempts_before = app.jobs.attempts(job_id)
    start = db_now(db)
    job = app.jobs.cancel(job_id)
    assert job.status is S.CANCELLED
    assert job.finished_at is not None
    assert start <= job.finished_at <= db_now(db)
    assert app.jobs.attempts(job_id) == attempts_before  # no attempt was running
    db.execute("UPDATE cronbase.jobs SET run_at = now() - interval '1 hour'")
    assert claim_all(app, db) == []  # never claimed, however due


def test_cancel_a_running_job_records_the_interrupted_attempt(
    app: cronbase.App, db: psycopg.Connection[Any], tasks: dict[str, Any]
) -> None:
    job_id = job_in(app, db, tasks, S.RUNNING)
    job = app.jobs.cancel(job_id)
    assert (job.status, job.locked_by, job.locked_until) == (S.CANCELLED, None, None)
    assert job_row(db, job_id)["lease_token"] is None  # the attempt's late outcome is fenced out
    [attempt] = app.jobs.attempts(job_id)
    assert (attempt.attempt, attempt.outcome, attempt.error_type) == (1, "cancelled", "Cancelled")


@pytest.mark.parametrize("status", [S.SUCCEEDED, S.DEAD, S.CANCELLED])
def test_a_finished_job_cannot_be_cancelled(
    app: cronbase.App, db: psycopg.Connection[Any], tasks: dict[str, Any], status: JobStatus
) -> None:
    job_id = job_in(app, db, tasks, status)
    before = job_row(db, job_id)
    message = f"cannot cancel job {job_id}: it is {status.value} (cancel needs pending, queued, failed or running)"
    with pytest.raises(cronbase.JobStateError, match=re.escape(message)):
        app.jobs.cancel(job_id)
    assert job_row(db, job_id) == before
