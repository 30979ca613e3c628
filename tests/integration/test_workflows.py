"""Chains and groups on the real database: results passed on, the fan-in once with every result
in order, the workflow's id, atomic defers, bad graphs refused; and the same in inline mode."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import cronbase
import cronbase.hooks
from cronbase import JobStatus as S
from cronbase.testing import inline


def drain(app: cronbase.App) -> None:
    app.run_worker(burst=True, install_signal_handlers=False, concurrency=20)


def register(app: cronbase.App) -> dict[str, cronbase.Task[Any, Any]]:
    @app.task
    def double(n: int) -> int:
        return n * 2

    @app.task
    def add(previous: int, k: int = 1) -> int:
        return previous + k

    @app.task
    def total(previous: list[int]) -> int:
        return sum(previous)

    @app.task
    def label(text: str, invoice: dict[str, Any] | None = None) -> str:
        return f"{text}:{invoice}"

    @app.task
    def invoice(n: int) -> dict[str, Any]:
        return {"n": n, "paid": True}

    @app.task(max_attempts=1)
    def fails(n: int) -> int:
        raise RuntimeError(f"no {n}")

    return {t.name: t for t in (double, add, total, label, invoice, fails)}


def test_a_chain_passes_each_result_on_and_its_id_follows_the_last_job(
    app: cronbase.App,
) -> None:
    t = register(app)
    workflow = cronbase.chain(t["double"].s(n=3), t["add"].s(k=10), t["add"].s()).defer()
    jobs = app.jobs.list(limit=10)
    assert sorted(j.status for j in jobs) == [S.PENDING, S.PENDING, S.QUEUED]
    assert max(j.id for j in jobs) == workflow  # the last job's id
    drain(app)
    assert app.jobs.wait(workflow, timeout=5).result == 17  # (3*2 + 10) + 1


def test_receive_names_the_parameter_the_previous_result_goes_to(app: cronbase.App) -> None:
    t = register(app)
    workflow = cronbase.chain(t["invoice"].s(n=7), t["label"].s(text="sent").receive("invoice"))
    job_id = workflow.defer()
    drain(app)
    assert app.jobs.get(job_id).result == "sent:{'n': 7, 'paid': True}"


def test_a_group_fans_in_once_with_every_result_in_order(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    t = register(app)
    workflow = cronbase.group([t["double"].s(n=i) for i in range(1000)]).then(t["total"].s())
    callback = workflow.defer()
    assert app.jobs.get(callback).status is S.PENDING
    drain(app)
    job = app.jobs.get(callback)
    assert (job.status, job.result, job.attempts) == (S.SUCCEEDED, 999_000, 1)
    assert job.payload["previous"] == [i * 2 for i in range(1000)]
    # Every node carries the workflow's id: the callback's.
    assert db.execute(
        "SELECT count(*) FROM cronbase.jobs_all WHERE workflow_id = %s", (callback,)
    ).fetchone() == (1001,)


def test_a_group_in_a_chain_gets_the_result_before_it_and_passes_the_list_on(
    app: cronbase.App,
) -> None:
    t = register(app)
    job_id = cronbase.chain(
        t["double"].s(n=5),  # 10
        cronbase.group(
            [t["add"].s(k=1), t["add"].s(k=2), cronbase.chain(t["add"].s(), t["add"].s())]
        ),
        t["total"].s(),
    ).defer()
    drain(app)
    assert app.jobs.get(job_id).result == 11 + 12 + 12


def test_a_failed_member_cancels_the_callback_and_its_retry_resumes_the_workflow(
    app: cronbase.App,
) -> None:
    t = register(app)
    attempts: list[int] = []

    @app.task(max_attempts=1)
    def once_flaky(n: int) -> int:
        attempts.append(n)
        if attempts.count(n) == 1 and n == 2:
            raise RuntimeError("flaky")
        return n

    callback = cronbase.group([once_flaky.s(n=i) for i in range(4)]).then(t["total"].s()).defer()
    drain(app)
    job = app.jobs.get(callback)
    assert (job.status, job.error_type) == (S.CANCELLED, "ParentFailed")
    dead = [j for j in app.jobs.list(status="dead")]
    assert len(dead) == 1
    app.jobs.retry(dead[0].id)
    drain(app)
    assert app.jobs.get(callback).result == 0 + 1 + 2 + 3


def test_a_member_that_may_fail_still_lets_the_callback_run(app: cronbase.App) -> None:
    t = register(app)

    @app.task
    def count(previous: list[int | None]) -> int:
        return sum(1 for p in previous if p is None)

    callback = (
        cronbase.group([t["double"].s(n=1), t["fails"].s(n=2)])
        .then(count.s().set(on_parent_failure="run"))
        .defer()
    )
    drain(app)
    assert app.jobs.get(callback).result == 1  # the dead member's result is null


def test_a_workflow_deferred_in_the_callers_transaction(
    app: cronbase.App, database_url: str, db: psycopg.Connection[Any]
) -> None:
    t = register(app)
    workflow = cronbase.chain(t["double"].s(n=1), t["add"].s())
    with psycopg.connect(database_url) as conn:
        workflow.configure(connection=conn).defer()
        conn.rollback()
        assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (0,)
        job_id = workflow.configure(connection=conn).defer()
        conn.commit()
    drain(app)
    assert app.jobs.get(job_id).result == 3


@pytest.mark.anyio
async def test_defer_async(app: cronbase.App) -> None:
    t = register(app)
    job_id = (
        await cronbase.group([t["double"].s(n=i) for i in range(3)])
        .then(t["total"].s())
        .defer_async()
    )
    assert (await app.jobs.get_async(job_id)).status is S.PENDING
    await app.aclose()


def test_a_bare_groups_id_is_its_first_job(app: cronbase.App) -> None:
    t = register(app)
    first = cronbase.group([t["double"].s(n=i) for i in range(3)]).defer()
    jobs = sorted(app.jobs.list(limit=10), key=lambda j: j.id)
    assert first == jobs[0].id
    assert all(j.status is S.QUEUED for j in jobs)


def test_bad_graphs_are_refused_with_one_line_naming_the_problem(app: cronbase.App) -> None:
    t = register(app)
    cases: list[tuple[Any, str]] = [
        (lambda: cronbase.chain(), "a chain needs at least one job"),
        (lambda: cronbase.group([]), "a group needs at least one job"),
        (
            lambda: cronbase.chain(t["double"]),
            "chain() takes task.s(...), chains and groups, got <Task double queue=default> "
            "(call task.s(...) to make one)",
        ),
        (
            lambda: cronbase.group([cronbase.group([t["double"].s(n=1)])]),
            "a group cannot hold a group directly: its members' results would be a list of "
            "lists; wrap it in a chain, or flatten it",
        ),
        (
            lambda: t["add"].s(previous=1),
            "task 'add': 'previous' is given in the payload and would be replaced by the "
            "previous result; leave it out, or receive(None)",
        ),
        (
            lambda: t["double"].s(n=1).receive("total"),
            "task 'double' has no parameter 'total' to receive the previous result in "
            "(it takes: n)",
        ),
        (
            lambda: t["add"].s().set(on_parent_failure="skip"),
            "on_parent_failure must be 'cancel' or 'run', got 'skip'",
        ),
        (lambda: t["double"].s(m=1), None),  # the task's own payload check
    ]
    for make, message in cases:
        with pytest.raises(cronbase.CronbaseError) as refused:
            make()
        assert "\n" not in str(refused.value)
        if message is not None:
            assert str(refused.value) == message
    assert app.jobs.list() == []


def test_inline_mode_runs_workflows_in_order(app: cronbase.App) -> None:
    t = register(app)
    with inline(app) as run:
        chained = cronbase.chain(t["double"].s(n=3), t["add"].s(k=10), t["add"].s()).defer()
        assert run.job(chained).result == 17
        fanned = cronbase.group([t["double"].s(n=i) for i in range(5)]).then(t["total"].s())
        assert run.job(fanned.defer()).result == 20
        parent = t["double"].defer(n=1)
        after = t["double"].configure(after=[parent]).defer(n=2)
        assert run.job(after).status is S.SUCCEEDED
        with pytest.raises(cronbase.WorkflowError, match="unknown parent job"):
            t["double"].configure(after=[999]).defer(n=2)
    with inline(app, retries=True) as run:
        callback = (
            cronbase.group([t["fails"].s(n=1), t["double"].s(n=2)]).then(t["total"].s()).defer()
        )
        assert run.job(callback).status is S.CANCELLED
    assert app.jobs.list() == []  # nothing reached the database


def test_a_workflow_goes_through_the_defer_middleware_and_connection_sources(
    app: cronbase.App, database_url: str, db: psycopg.Connection[Any]
) -> None:
    """As a single defer does: the middleware's metadata (a trace context) on every job, and
    the connection a source gives (Django's, in the integration) used for the insert."""
    t = register(app)
    calls: list[tuple[str, int]] = []

    @contextlib.contextmanager
    def trace(call: cronbase.hooks.DeferCall) -> Iterator[None]:
        call.metadata["trace"] = "abc"
        yield
        calls.append((call.task, len(call.ids)))

    app.hooks.defer_middleware.append(trace)
    with psycopg.connect(database_url) as conn:
        app.hooks.connection_sources.append(lambda: conn)
        cronbase.chain(t["double"].s(n=1), t["add"].s()).defer()
        conn.rollback()  # the source's transaction: the workflow goes with it
        assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (0,)
        job_id = cronbase.chain(t["double"].s(n=1), t["add"].s()).defer()
        conn.commit()
    assert calls == [("double", 2), ("double", 2)]
    rows = db.execute("SELECT metadata FROM cronbase.jobs_all ORDER BY id").fetchall()
    assert rows == [({"trace": "abc"},), ({"trace": "abc"},)]
    app.hooks.connection_sources.clear()
    drain(app)
    assert app.jobs.get(job_id).result == 3
