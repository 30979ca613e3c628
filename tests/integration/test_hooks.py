"""app.on_job_start / on_job_end / middleware, defer middleware and connection sources, with a
real worker on the test database: what they see, and that a hook that raises changes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.hooks import DeferCall
from tests.e2e.harness import running_worker

NO_RETRY_SOON = cronbase.Backoff(base=timedelta(hours=1), jitter=0)


def run_burst(app: cronbase.App) -> None:
    app.run_worker(burst=True, install_signal_handlers=False, schedule=False, retention=None)


def test_start_and_end_hooks_see_each_attempt_and_how_it_ended(app: cronbase.App) -> None:
    seen: list[tuple[Any, ...]] = []

    @app.task(max_attempts=2, retry=cronbase.Backoff(base=timedelta(milliseconds=1), jitter=0))
    def flaky(n: int) -> None:
        if n > 0:
            raise ValueError(f"bad {n}")

    @app.on_job_start
    def start(job: cronbase.JobContext) -> None:
        seen.append(("start", job.id, job.attempt, job.payload))

    @app.on_job_end
    def end(job: cronbase.JobContext, outcome: str, error: BaseException | None, took: Any) -> None:
        assert isinstance(took, timedelta)
        assert took >= timedelta(0)
        seen.append(("end", job.id, job.attempt, outcome, repr(error)))

    ok = flaky.defer(n=0)
    bad = flaky.defer(n=1)
    run_burst(app)  # the failed attempt is due again at once (no backoff)
    run_burst(app)
    assert sorted(seen, key=lambda s: (s[1], s[2], s[0] == "end")) == [
        ("start", ok, 1, {"n": 0}),
        ("end", ok, 1, "succeeded", "None"),
        ("start", bad, 1, {"n": 1}),
        ("end", bad, 1, "failed", "ValueError('bad 1')"),
        ("start", bad, 2, {"n": 1}),
        ("end", bad, 2, "dead", "ValueError('bad 1')"),  # no attempt left
    ]
    assert app.jobs.get(bad).status is cronbase.JobStatus.DEAD


def test_hooks_that_raise_are_logged_and_change_no_outcome(
    app: cronbase.App, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[int] = []

    @app.task(retry=NO_RETRY_SOON)
    def work(n: int) -> None:
        ran.append(n)
        if n == 2:
            raise RuntimeError("handler failed")

    @app.on_job_start
    def broken_start(job: cronbase.JobContext) -> None:
        raise KeyError("start hook")

    @app.on_job_end
    def broken_end(job: cronbase.JobContext, *args: Any) -> None:
        raise KeyError("end hook")

    @app.middleware
    @contextlib.contextmanager
    def broken_on_entry(job: cronbase.JobContext) -> Iterator[None]:
        raise KeyError("middleware entry")
        yield

    @app.middleware
    def broken_on_exit(job: cronbase.JobContext) -> Iterator[None]:
        try:
            yield
        finally:
            raise KeyError("middleware exit")  # replaces the handler's error, if any

    ok, failing = work.defer(n=1), work.defer(n=2)
    with caplog.at_level(logging.ERROR, logger="cronbase"):
        run_burst(app)
    assert sorted(ran) == [1, 2]
    assert app.jobs.get(ok).status is cronbase.JobStatus.SUCCEEDED
    failed = app.jobs.get(failing)
    assert failed.status is cronbase.JobStatus.FAILED
    assert failed.last_error == "RuntimeError: handler failed"  # not the middleware's KeyError
    logged = [r.getMessage() for r in caplog.records]
    for what in ("broken_start", "broken_end", "broken_on_entry", "broken_on_exit"):
        assert sum(what in line and "ignored" in line for line in logged) == 2, (what, logged)


def test_middleware_wraps_sync_handlers_in_their_thread_outermost_first(
    app: cronbase.App,
) -> None:
    events: list[str] = []
    threads: dict[str, int] = {}
    local = threading.local()

    @app.middleware
    def outer(job: cronbase.JobContext) -> Iterator[None]:
        threads["middleware"] = threading.get_ident()
        local.tenant = job.payload["tenant"]
        events.append(f"outer in {job.id}")
        try:
            yield
        except ValueError as exc:
            events.append(f"outer saw {exc}")
            raise
        finally:
            events.append("outer out")

    @app.middleware
    def inner(job: cronbase.JobContext) -> Iterator[None]:
        events.append("inner in")
        yield
        events.append("inner out")

    @app.task(retry=NO_RETRY_SOON)
    def handler(tenant: str) -> None:
        threads["handler"] = threading.get_ident()
        events.append(f"handler for {local.tenant}")
        raise ValueError("boom")

    job_id = handler.defer(tenant="acme")
    run_burst(app)
    assert threads["middleware"] == threads["handler"] != threading.get_ident()
    # The inner middleware does not catch: its "out" never runs, the exception passes through.
    assert events == [f"outer in {job_id}", "inner in", "handler for acme", "outer saw boom",
                      "outer out"]  # fmt: skip
    assert app.jobs.get(job_id).status is cronbase.JobStatus.FAILED


def test_a_middleware_cannot_swallow_the_handlers_error(app: cronbase.App) -> None:
    @app.middleware
    @contextlib.contextmanager
    def swallow(job: cronbase.JobContext) -> Iterator[None]:
        with contextlib.suppress(Exception):
            yield

    @app.task(retry=NO_RETRY_SOON)
    async def failing() -> None:
        raise LookupError("handler's own")

    job_id = failing.defer()
    run_burst(app)
    job = app.jobs.get(job_id)
    assert (job.status, job.last_error) == (cronbase.JobStatus.FAILED, "LookupError: handler's own")


def test_async_handlers_run_inside_the_middleware_with_the_job(app: cronbase.App) -> None:
    seen: list[Any] = []

    @app.middleware
    def note(job: cronbase.JobContext) -> Iterator[None]:
        seen.append(("in", job.id))
        yield
        seen.append(("out", job.id))

    @app.task
    async def handler() -> None:
        seen.append(("handler", cronbase.current_job().id))

    job_id = handler.defer()
    run_burst(app)
    assert seen == [("in", job_id), ("handler", job_id), ("out", job_id)]


def test_defer_middleware_stores_metadata_the_handler_reads(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    calls: list[DeferCall] = []
    got: list[Any] = []

    @contextlib.contextmanager
    def trace(call: DeferCall) -> Iterator[None]:
        call.metadata["trace"] = {"id": len(calls)}
        calls.append(call)
        yield
        assert call.ids, "ids are filled before the middleware exits"

    app.hooks.defer_middleware.append(trace)

    @app.task
    def handler(n: int) -> None:
        got.append((n, cronbase.current_job().metadata))

    one = handler.defer(n=1)
    many = handler.defer_many([{"n": 2}, {"n": 3}])
    keyed = handler.configure(idempotency_key="k").defer(n=4)
    assert [c.ids for c in calls] == [[one], many, [keyed]]
    assert [(c.task, c.queue, list(c.payloads)) for c in calls][1] == (
        "handler",
        "default",
        [{"n": 2}, {"n": 3}],
    )
    stored = dict(db.execute("SELECT id, metadata FROM cronbase.jobs_all").fetchall())
    assert stored == {
        one: {"trace": {"id": 0}},
        many[0]: {"trace": {"id": 1}},
        many[1]: {"trace": {"id": 1}},
        keyed: {"trace": {"id": 2}},
    }
    run_burst(app)
    assert sorted(got) == [(1, {"trace": {"id": 0}}), (2, {"trace": {"id": 1}}),
                           (3, {"trace": {"id": 1}}), (4, {"trace": {"id": 2}})]  # fmt: skip


def test_a_job_without_metadata_stores_null_and_bad_metadata_from_sql_is_ignored(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    got: list[Any] = []

    @app.task
    def handler(n: int) -> None:
        got.append((n, cronbase.current_job().metadata))

    plain = handler.defer(n=1)
    odd = handler.defer(n=2)
    assert db.execute(
        "SELECT metadata FROM cronbase.jobs_all WHERE id = %s", [plain]
    ).fetchone() == (None,)
    db.execute("UPDATE cronbase.jobs SET metadata = '[1, 2]' WHERE id = %s", [odd])
    run_burst(app)
    assert sorted(got) == [(1, None), (2, None)]
    assert app.jobs.get(odd).status is cronbase.JobStatus.SUCCEEDED


def test_a_defer_middleware_that_raises_loses_no_job(
    app: cronbase.App, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    @contextlib.contextmanager
    def broken(call: DeferCall) -> Iterator[None]:
        raise RuntimeError("tracing is down")
        yield

    app.hooks.defer_middleware.append(broken)

    @app.task
    def handler() -> None: ...

    with caplog.at_level(logging.ERROR, logger="cronbase"):
        job_id = handler.defer()
    assert db.execute("SELECT id FROM cronbase.jobs_all").fetchall() == [(job_id,)]
    assert any("broken raised on entry; ignored" in r.getMessage() for r in caplog.records)


def test_a_connection_source_puts_sync_defers_in_its_transaction(
    app: cronbase.App, database_url: str, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def handler(n: int) -> None: ...

    with psycopg.connect(database_url) as conn:
        current: list[psycopg.Connection[Any]] = []
        app.hooks.connection_sources.append(lambda: current[0] if current else None)
        current.append(conn)
        handler.defer(n=1)
        handler.defer_many([{"n": 2}])
        assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (0,)
        conn.rollback()
        handler.defer(n=3)
        conn.commit()
        current.clear()  # no source answers: the App's own pool, committed at once
        handler.defer(n=4)
    rows = db.execute("SELECT payload->>'n' FROM cronbase.jobs_all ORDER BY id").fetchall()
    assert rows == [("3",), ("4",)]


def test_end_hooks_hear_of_a_job_whose_payload_does_not_fit(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    ended: list[tuple[Any, ...]] = []
    started: list[int] = []

    @app.task
    def handler(n: int) -> None: ...

    app.on_job_start(lambda job: started.append(job.id))
    app.on_job_end(lambda job, outcome, error, took: ended.append((job.id, outcome, type(error))))
    job_id = handler.defer(n=1)
    db.execute("UPDATE cronbase.jobs SET payload = '{\"m\": 1}' WHERE id = %s", [job_id])
    run_burst(app)
    assert (started, ended) == ([], [(job_id, "dead", cronbase.PayloadError)])
    assert app.jobs.get(job_id).status is cronbase.JobStatus.DEAD


@pytest.mark.anyio
async def test_end_hooks_hear_of_an_attempt_cancelled_at_shutdown(app: cronbase.App) -> None:
    running = asyncio.Event()
    events: list[tuple[Any, ...]] = []

    @app.task
    async def forever() -> None:
        running.set()
        await asyncio.sleep(3600)

    app.on_job_start(lambda job: events.append(("start", job.id)))
    app.on_job_end(
        lambda job, outcome, error, took: events.append(("end", job.id, outcome, type(error)))
    )
    job_id = await forever.defer_async()
    async with running_worker(app, shutdown_grace=timedelta(milliseconds=200)):
        await asyncio.wait_for(running.wait(), 20)
    assert events == [("start", job_id), ("end", job_id, "released", asyncio.CancelledError)]
    job = await app.jobs.get_async(job_id)
    assert (job.status, job.attempts) == (cronbase.JobStatus.QUEUED, 0)  # handed back, uncounted


def test_a_failing_middleware_entry_does_not_chain_to_the_handlers_error(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.middleware
    def broken(job: cronbase.JobContext) -> Iterator[None]:
        raise KeyError("middleware entry")
        yield

    @app.task(retry=NO_RETRY_SOON)
    def handler() -> None:
        raise ValueError("the handler's own")

    job_id = handler.defer()
    run_burst(app)
    (traceback,) = db.execute(
        "SELECT traceback FROM cronbase.job_attempts_all WHERE job_id = %s", [job_id]
    ).fetchone() or ("",)
    assert "ValueError: the handler's own" in traceback
    assert "middleware entry" not in traceback  # no "During handling of ..." from the middleware


def test_metadata_json_cannot_hold_is_dropped_not_the_defer(
    app: cronbase.App, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    def odd(call: DeferCall) -> Iterator[None]:  # a generator function works as middleware too
        call.metadata["seen"] = {1, 2}  # a set: not JSON
        yield

    app.hooks.defer_middleware.append(odd)  # type: ignore[arg-type]

    @app.task
    def handler() -> None: ...

    with caplog.at_level(logging.ERROR, logger="cronbase"):
        job_id = handler.defer()
    assert db.execute("SELECT id, metadata FROM cronbase.jobs_all").fetchall() == [(job_id, None)]
    assert any("metadata of a defer of handler dropped" in r.getMessage() for r in caplog.records)
