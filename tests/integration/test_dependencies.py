"""Dependencies on the real database: configure(after=...), the pending state, what a parent's
death, cancellation or retry does to its dependents, and parents ended by other SQL."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase import JobStatus as S


def drain(app: cronbase.App) -> None:
    app.run_worker(burst=True, install_signal_handlers=False)


def status(app: cronbase.App, job_id: int) -> S:
    return app.jobs.get(job_id).status


def test_a_job_waits_pending_until_every_parent_succeeded(app: cronbase.App) -> None:
    ran: list[str] = []

    @app.task
    def step(name: str) -> None:
        ran.append(name)

    first = step.defer(name="a")
    second = step.configure(queue="later").defer(name="b")
    child = step.configure(after=[first, second]).defer(name="child")
    assert status(app, child) is S.PENDING
    assert app.jobs.get(child).run_at is not None
    app.run_worker(burst=True, install_signal_handlers=False, queues=["default"])
    # One parent done: still pending (the other waits on a queue nobody served).
    assert (status(app, first), status(app, second), status(app, child)) == (
        S.SUCCEEDED,
        S.QUEUED,
        S.PENDING,
    )
    assert ran == ["a"]
    drain(app)
    assert ran == ["a", "b", "child"]
    assert status(app, child) is S.SUCCEEDED


def test_a_dead_parent_cancels_its_dependents_and_theirs(app: cronbase.App) -> None:
    @app.task(max_attempts=1)
    def fails() -> None:
        raise RuntimeError("card declined")

    @app.task
    def step() -> None: ...

    parent = fails.defer()
    child = step.configure(after=[parent]).defer()
    grandchild = step.configure(after=[child]).defer()
    runs_anyway = step.configure(after=[parent], on_parent_failure="run").defer()
    drain(app)
    assert status(app, parent) is S.DEAD
    job = app.jobs.get(child)
    assert (job.status, job.error_type, job.last_error) == (
        S.CANCELLED,
        "ParentFailed",
        f"parent job {parent} (fails) is dead",
    )
    grand = app.jobs.get(grandchild)
    assert (grand.status, grand.last_error) == (
        S.CANCELLED,
        f"parent job {child} (step) is cancelled",
    )
    assert status(app, runs_anyway) is S.SUCCEEDED


def test_retrying_the_dead_parent_resumes_its_dependents(app: cronbase.App) -> None:
    attempts: list[int] = []

    @app.task(max_attempts=1)
    def flaky() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("first time")

    @app.task
    def step() -> None: ...

    parent = flaky.defer()
    child = step.configure(after=[parent]).defer()
    grandchild = step.configure(after=[child]).defer()
    drain(app)
    assert (status(app, child), status(app, grandchild)) == (S.CANCELLED, S.CANCELLED)
    app.jobs.retry(parent)
    # Back to waiting, the whole line below the retried job.
    job = app.jobs.get(child)
    assert (job.status, job.last_error, job.finished_at) == (S.PENDING, None, None)
    assert status(app, grandchild) is S.PENDING
    drain(app)
    assert [status(app, j) for j in (parent, child, grandchild)] == [S.SUCCEEDED] * 3


def test_a_retried_parent_leaves_a_child_whose_other_parent_failed_cancelled(
    app: cronbase.App,
) -> None:
    @app.task(max_attempts=1)
    def fails() -> None:
        raise RuntimeError("no")

    @app.task
    def step() -> None: ...

    one, two = fails.defer(), fails.defer()
    child = step.configure(after=[one, two]).defer()
    drain(app)
    assert status(app, child) is S.CANCELLED
    app.jobs.retry(one)
    assert status(app, child) is S.CANCELLED  # `two` is still dead


def test_parents_that_ended_before_the_defer(app: cronbase.App) -> None:
    @app.task(max_attempts=1)
    def fails() -> None:
        raise RuntimeError("no")

    @app.task
    def step() -> None: ...

    done, dead = step.defer(), fails.defer()
    drain(app)
    assert status(app, step.configure(after=[done]).defer()) is S.QUEUED
    cancelled = app.jobs.get(step.configure(after=[done, dead]).defer())
    assert (cancelled.status, cancelled.last_error) == (
        S.CANCELLED,
        f"parent job {dead} (fails) is dead",
    )
    assert cancelled.finished_at is not None
    anyway = step.configure(after=[dead], on_parent_failure="run").defer()
    assert status(app, anyway) is S.QUEUED


def test_unknown_parents_are_refused_and_nothing_is_deferred(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def step(n: int) -> None: ...

    known = step.defer(n=1)
    with pytest.raises(cronbase.WorkflowError) as err:
        step.configure(after=[known, 424242, 99]).defer_many([{"n": 2}, {"n": 3}])
    assert str(err.value) == "unknown parent job(s) in after=: 99, 424242; nothing was deferred"
    assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (1,)
    for bad, message in [
        ([0], "after must list job ids (positive integers), got 0"),
        (["7"], "after must list job ids (positive integers), got '7'"),
        (5, "after must be a list of job ids, got 5"),
    ]:
        with pytest.raises(cronbase.WorkflowError) as refused:
            step.configure(after=bad)  # type: ignore[arg-type]
        assert str(refused.value) == message
    with pytest.raises(cronbase.WorkflowError, match="on_parent_failure must be 'cancel' or 'run'"):
        step.configure(after=[known], on_parent_failure="ignore")  # type: ignore[arg-type]
    with pytest.raises(cronbase.CronbaseError, match=r"after=\[1\] cannot be combined"):
        step.configure(after=[known], idempotency_key="k")


def test_a_pending_job_can_be_cancelled_but_not_retried(app: cronbase.App) -> None:
    @app.task
    def step() -> None: ...

    parent = step.configure(queue="nobody").defer()
    child = step.configure(after=[parent]).defer()
    with pytest.raises(cronbase.JobStateError, match="it is pending"):
        app.jobs.retry(child)
    assert app.jobs.cancel(child).status is S.CANCELLED
    drain(app)
    assert status(app, child) is S.CANCELLED  # the parent's success no longer concerns it


def test_parents_ended_by_other_sql_release_and_cancel_their_dependents(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def step() -> None: ...

    one, two, three = step.defer(), step.defer(), step.defer()
    waits_two = step.configure(after=[one, two]).defer()
    waits_three = step.configure(after=[three]).defer()
    db.execute("UPDATE cronbase.jobs SET status = 'succeeded' WHERE id IN (%s, %s)", (one, two))
    db.execute("UPDATE cronbase.jobs SET status = 'cancelled' WHERE id = %s", (three,))
    row = db.execute(
        "SELECT status, parents_left FROM cronbase.jobs_all WHERE id = %s", (waits_two,)
    ).fetchone()
    assert row == ("queued", 0)
    assert status(app, waits_three) is S.CANCELLED


def test_a_defer_in_the_callers_transaction_commits_or_rolls_back_with_it(
    app: cronbase.App, database_url: str, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def step() -> None: ...

    parent = step.defer()
    with psycopg.connect(database_url) as conn:
        step.configure(after=[parent], connection=conn).defer()
        conn.rollback()
        child = step.configure(after=[parent], connection=conn).defer()
        conn.commit()
    assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (2,)
    drain(app)
    assert status(app, child) is S.SUCCEEDED


def test_many_parents_finishing_at_once_release_the_child_exactly_once(
    app: cronbase.App, database_url: str, db: psycopg.Connection[Any]
) -> None:
    """Parents finished by many connections at the same moment (as many workers would): the
    child's counter reaches zero once, it is released once, and no finish deadlocks."""

    @app.task
    def step() -> None: ...

    parents = step.defer_many([{} for _ in range(200)])
    children = [step.configure(after=parents).defer() for _ in range(3)]
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def finish(mine: list[int]) -> None:
        try:
            with psycopg.connect(database_url, autocommit=True) as conn:
                barrier.wait()
                for job_id in mine:
                    conn.execute(
                        "UPDATE cronbase.jobs SET status = 'succeeded' WHERE id = %s", (job_id,)
                    )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=finish, args=(parents[n::8],)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    rows = db.execute(
        "SELECT status, parents_left FROM cronbase.jobs_all WHERE id = ANY(%s)", (children,)
    ).fetchall()
    assert rows == [("queued", 0)] * 3


def test_pending_jobs_show_in_the_stats(app: cronbase.App) -> None:
    @app.task
    def step() -> None: ...

    parent = step.configure(queue="nobody").defer()
    step.configure(after=[parent]).defer_many([{}, {}])
    totals = app.stats().totals()
    assert (totals[S.PENDING], totals[S.QUEUED]) == (2, 1)
