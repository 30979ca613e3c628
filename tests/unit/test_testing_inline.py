"""cronbase.testing.inline: deferred jobs run at once, in process, as a worker runs them; no
database (the App's URL points nowhere: any database access would fail the test)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import cronbase
from cronbase.errors import CronbaseError, PayloadError
from cronbase.hooks import DeferCall
from cronbase.testing import InlineJobContext, inline

NOWHERE = "postgresql://inline-mode-must-not-connect@127.0.0.1:1/none"
NEVER_SOON = cronbase.Backoff(base=timedelta(hours=1), jitter=0)


@pytest.fixture
def app() -> Iterator[cronbase.App]:
    application = cronbase.App(database_url=NOWHERE)
    yield application
    assert application.db._pool is None, "inline mode opened a connection pool"


def test_defer_runs_the_handler_at_once_and_run_jobs_says_what_ran(app: cronbase.App) -> None:
    @app.task(queue="emails")
    def send(invoice_id: int, to: str = "x@example.com") -> str:
        return f"sent {invoice_id} to {to}"

    with inline(app) as run:
        first = send.defer(invoice_id=812)
        second = send.configure(priority=5, delay=timedelta(hours=1)).defer(invoice_id=813, to="y")
        many = send.defer_many([{"invoice_id": 814}, {"invoice_id": 815}])
        by_name = app.defer("send", {"invoice_id": 816})

    assert (first, second, many, by_name) == (1, 2, [3, 4], 5)
    assert [(j.id, j.task, j.queue, j.payload, j.status, j.attempts) for j in run.jobs] == [
        (1, "send", "emails", {"invoice_id": 812}, "succeeded", 1),
        (2, "send", "emails", {"invoice_id": 813, "to": "y"}, "succeeded", 1),
        (3, "send", "emails", {"invoice_id": 814}, "succeeded", 1),
        (4, "send", "emails", {"invoice_id": 815}, "succeeded", 1),
        (5, "send", "emails", {"invoice_id": 816}, "succeeded", 1),
    ]
    assert run.job(2).result == "sent 813 to y"
    assert run.job(2).options.priority == 5  # recorded, though the job ran at once
    assert run.job(1).error is None
    assert run.jobs_of(send) == run.jobs_of("send") == run.jobs
    with pytest.raises(KeyError, match="no inline job with id 9; deferred in this block: 1, 2"):
        run.job(9)


def test_current_job_gives_id_attempt_and_progress(
    app: cronbase.App, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[tuple[int, int, int, str]] = []

    @app.task(max_attempts=3)
    def report(team: str) -> None:
        logging.getLogger("reports").warning("report for %s", team)
        job = cronbase.current_job()
        seen.append((job.id, job.attempt, job.max_attempts, job.task))
        job.set_progress(40, stage="rendering")
        job.set_progress(90)

    with inline(app) as run:
        report.defer(team="a")
        report.defer(team="b")

    assert seen == [(1, 1, 3, "report"), (2, 1, 3, "report")]
    assert (run.jobs[1].progress, run.jobs[1].stage) == (90.0, "rendering")
    assert cronbase.context.running_job() is None  # not left set after the block
    # As on a worker, what a handler logs carries its job.
    logged = [(r.getMessage(), r.job_id, r.attempt) for r in caplog.records if r.name == "reports"]
    assert logged == [("report for a", 1, 1), ("report for b", 2, 1)]


def test_an_exception_is_raised_from_defer_after_the_job_is_recorded_failed(
    app: cronbase.App,
) -> None:
    @app.task(retry=NEVER_SOON)
    def boom(n: int) -> None:
        raise ValueError(f"bad {n}")

    @app.task(max_attempts=1)
    def once(n: int) -> None:
        raise KeyError(n)

    with inline(app) as run:
        with pytest.raises(ValueError, match="bad 1"):
            boom.defer(n=1)
        with pytest.raises(KeyError):
            once.defer(n=2)

    assert [(j.task, j.status, j.attempts, repr(j.error)) for j in run.jobs] == [
        ("boom", "failed", 1, "ValueError('bad 1')"),  # attempts left: a worker would retry
        ("once", "dead", 1, "KeyError(2)"),  # none left
    ]


def test_with_retries_a_job_runs_again_at_once_until_it_succeeds_or_is_dead(
    app: cronbase.App,
) -> None:
    calls: list[tuple[int, int]] = []

    @app.task(max_attempts=4, retry=NEVER_SOON)  # an hour of backoff: never slept
    def flaky(fail_times: int) -> str:
        attempt = cronbase.current_job().attempt
        calls.append((fail_times, attempt))
        if attempt <= fail_times:
            raise RuntimeError(f"attempt {attempt}")
        return "ok"

    ends: list[tuple[int, int, str, str]] = []

    @app.on_job_end
    def end(job: cronbase.JobContext, outcome: str, error: Any, took: timedelta) -> None:
        ends.append((job.id, job.attempt, outcome, repr(error)))

    with inline(app, retries=True) as run:
        assert flaky.defer(fail_times=2) == 1
        assert flaky.configure(max_attempts=2).defer(fail_times=9) == 2  # not raised

    assert [(j.status, j.attempts, j.result, repr(j.error)) for j in run.jobs] == [
        ("succeeded", 3, "ok", "None"),
        ("dead", 2, None, "RuntimeError('attempt 2')"),
    ]
    assert calls == [(2, 1), (2, 2), (2, 3), (9, 1), (9, 2)]
    assert ends == [
        (1, 1, "failed", "RuntimeError('attempt 1')"),
        (1, 2, "failed", "RuntimeError('attempt 2')"),
        (1, 3, "succeeded", "None"),
        (2, 1, "failed", "RuntimeError('attempt 1')"),
        (2, 2, "dead", "RuntimeError('attempt 2')"),
    ]


def test_a_handler_that_defers_runs_the_nested_job_then_and_there(app: cronbase.App) -> None:
    order: list[str] = []

    @app.task
    def receipt(order_id: int) -> None:
        order.append(f"receipt {order_id} as job {cronbase.current_job().id}")

    @app.task
    def place(order_id: int) -> None:
        order.append(f"place {order_id} as job {cronbase.current_job().id}")
        receipt.defer(order_id=order_id)
        # The nested job's context ended with it: this is still the outer job.
        order.append(f"back in job {cronbase.current_job().id}")

    with inline(app) as run:
        place.defer(order_id=7)

    assert order == ["place 7 as job 1", "receipt 7 as job 2", "back in job 1"]
    assert [(j.id, j.task, j.status) for j in run.jobs] == [
        (1, "place", "succeeded"),
        (2, "receipt", "succeeded"),
    ]


def test_a_nested_failure_propagates_into_the_outer_handler(app: cronbase.App) -> None:
    @app.task(retry=NEVER_SOON)
    def inner() -> None:
        raise LookupError("inner failed")

    @app.task(retry=NEVER_SOON)
    def outer() -> None:
        inner.defer()

    with inline(app) as run, pytest.raises(LookupError, match="inner failed"):
        outer.defer()
    assert [(j.task, j.status) for j in run.jobs] == [("outer", "failed"), ("inner", "failed")]


def test_the_payload_takes_the_json_round_trip_the_worker_sees(app: cronbase.App) -> None:
    got: list[Any] = []

    @app.task
    def stamp(when: datetime, tags: list[str]) -> None:
        got.append((when, tags))

    when = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
    with inline(app) as run:
        stamp.defer(when=when, tags=("a", "b"))  # a tuple is a JSON array: a list comes back
        with pytest.raises(PayloadError, match=r"payload\['tags'\]\[0\]"):
            stamp.defer(when=when, tags=[object()])

    assert got == [(when, ["a", "b"])]  # the handler's annotation asks for a datetime
    assert run.jobs[0].payload == {"when": "2026-03-01T12:30:00+00:00", "tags": ["a", "b"]}
    assert len(run.jobs) == 1  # the refused defer recorded nothing


def test_transaction_fails_saying_inline_mode_has_no_database(app: cronbase.App) -> None:
    @app.task
    def writes() -> None:
        with cronbase.current_job().transaction():
            pass

    with inline(app) as run, pytest.raises(CronbaseError) as raised:
        writes.defer()
    message = str(raised.value)
    assert "needs a database and inline mode has none" in message
    assert "cronbase.testing.drain(app)" in message
    assert "\n" not in message
    assert run.jobs[0].status == "failed"


def test_middleware_and_hooks_run_around_each_attempt(app: cronbase.App) -> None:
    tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="-")
    events: list[str] = []

    @app.middleware
    def use_tenant(job: cronbase.JobContext) -> Iterator[None]:
        token = tenant.set(str(job.payload["tenant"]))
        events.append(f"enter {job.id}")
        try:
            yield
        except ValueError:
            events.append(f"middleware saw the error of {job.id}")
            raise
        finally:
            tenant.reset(token)

    @app.on_job_start
    def start(job: cronbase.JobContext) -> None:
        assert isinstance(job, InlineJobContext)
        events.append(f"start {job.id}")

    @app.on_job_end
    def end(job: cronbase.JobContext, outcome: str, error: Any, took: timedelta) -> None:
        assert took >= timedelta(0)
        events.append(f"end {job.id} {outcome}")

    @app.task(retry=NEVER_SOON)
    def work(tenant: str, fail: bool = False) -> None:
        events.append(f"handler in {tenant_var()}")
        if fail:
            raise ValueError("no")

    def tenant_var() -> str:
        return tenant.get()

    with inline(app):
        work.defer(tenant="acme")
        with pytest.raises(ValueError, match="no"):
            work.defer(tenant="globex", fail=True)

    assert events == [
        "start 1",
        "enter 1",
        "handler in acme",
        "end 1 succeeded",
        "start 2",
        "enter 2",
        "handler in globex",
        "middleware saw the error of 2",
        "end 2 failed",
    ]
    assert tenant.get() == "-"


def test_defer_middleware_runs_and_its_metadata_reaches_the_job(app: cronbase.App) -> None:
    calls: list[DeferCall] = []
    seen: list[Any] = []

    @contextlib.contextmanager
    def stamp(call: DeferCall) -> Iterator[None]:
        call.metadata["origin"] = {"request": "r-1"}
        yield
        calls.append(call)

    app.hooks.defer_middleware.append(stamp)

    @app.task
    def job() -> None:
        seen.append(cronbase.current_job().metadata)

    with inline(app) as run:
        job.defer()
        job.defer_many([{}, {}])

    assert seen == [{"origin": {"request": "r-1"}}] * 3
    assert [(c.task, c.ids) for c in calls] == [("job", [1]), ("job", [2, 3])]
    assert run.jobs[2].metadata == {"origin": {"request": "r-1"}}


def test_an_idempotency_key_already_used_returns_the_first_job_and_runs_nothing(
    app: cronbase.App,
) -> None:
    runs: list[int] = []

    @app.task
    def charge(order_id: int) -> None:
        runs.append(order_id)

    with inline(app) as run:
        first = charge.configure(idempotency_key="order-7").defer(order_id=7)
        again = charge.configure(idempotency_key="order-7").defer(order_id=7)
        other = charge.configure(dedupe_key="order-7").defer(order_id=7)  # the first has finished

    assert (first, again, other) == (1, 1, 2)
    assert runs == [7, 7]
    assert len(run.jobs) == 2


def test_the_interceptor_is_restored_on_exit_even_after_an_error(app: cronbase.App) -> None:
    @app.task
    def noop() -> None: ...

    assert app.hooks.interceptor is None

    def nest_then_fail() -> None:
        with inline(app) as outer:
            with inline(app, retries=True) as inner:
                assert app.hooks.interceptor is inner
            assert app.hooks.interceptor is outer
            raise RuntimeError("test body")

    with pytest.raises(RuntimeError, match="test body"):
        nest_then_fail()
    assert app.hooks.interceptor is None
    # Outside the block a defer goes to the database again (here: nowhere).
    with pytest.raises(cronbase.DatabaseURLError, match="inline-mode-must-not-connect"):
        noop.defer()
    app.close()


def test_an_async_handler_runs_from_sync_defer_when_no_loop_runs(app: cronbase.App) -> None:
    @app.task
    async def fetch(url: str) -> str:
        await asyncio.sleep(0)
        return f"{url} fetched by job {cronbase.current_job().id}"

    with inline(app) as run:
        fetch.defer(url="a")
    assert run.jobs[0].result == "a fetched by job 1"


@pytest.mark.anyio
async def test_defer_async_runs_async_and_sync_handlers(app: cronbase.App) -> None:
    threads: list[int] = []

    @app.task
    def sync_handler(n: int) -> int:
        threads.append(threading.get_ident())
        return cronbase.current_job().id * 10

    @app.task
    async def async_handler(n: int) -> int:
        await sync_handler.defer_async(n=n)
        sync_handler.defer(n=n)  # sync defer of a sync handler: runs in this (loop) thread
        return cronbase.current_job().id

    with inline(app) as run:
        assert await async_handler.defer_async(n=1) == 1
        assert await async_handler.configure(queue="q").defer_many_async([{"n": 2}]) == [4]
        assert await app.defer_async("sync_handler", {"n": 3}) == 7

    assert [(j.id, j.task, j.status, j.result) for j in run.jobs] == [
        (1, "async_handler", "succeeded", 1),
        (2, "sync_handler", "succeeded", 20),
        (3, "sync_handler", "succeeded", 30),
        (4, "async_handler", "succeeded", 4),
        (5, "sync_handler", "succeeded", 50),
        (6, "sync_handler", "succeeded", 60),
        (7, "sync_handler", "succeeded", 70),
    ]
    here = threading.get_ident()
    # Via defer_async a sync handler runs in a thread, as on a worker; via defer, right here.
    assert [t == here for t in threads] == [False, True, False, True, False]
    assert cronbase.context.running_job() is None


@pytest.mark.anyio
async def test_sync_defer_of_an_async_task_inside_a_loop_says_to_use_defer_async(
    app: cronbase.App,
) -> None:
    @app.task
    async def fetch(url: str) -> None: ...

    with inline(app) as run, pytest.raises(CronbaseError) as raised:
        fetch.defer(url="a")
    assert "use `await fetch.defer_async(...)`" in str(raised.value)
    assert run.jobs == []


@pytest.mark.anyio
async def test_defer_async_raises_the_handler_error_and_retries_when_asked(
    app: cronbase.App,
) -> None:
    @app.task(max_attempts=2, retry=NEVER_SOON)
    async def fails() -> None:
        raise ValueError(f"attempt {cronbase.current_job().attempt}")

    with inline(app) as run, pytest.raises(ValueError, match="attempt 1"):
        await fails.defer_async()
    with inline(app, retries=True) as retried:
        await fails.defer_async()
    assert [(j.status, j.attempts) for j in run.jobs] == [("failed", 1)]
    assert [(j.status, j.attempts, str(j.error)) for j in retried.jobs] == [
        ("dead", 2, "attempt 2")
    ]


# -- steering and results (issue 14) --------------------------------------------------------------


def test_inline_mode_honours_snooze_cancel_retry_on_and_result_checks(app: cronbase.App) -> None:
    @app.task(max_snoozes=1)
    def later(n: int) -> None:
        raise cronbase.Snooze(timedelta(minutes=5))

    @app.task
    def refuse() -> None:
        raise cronbase.Cancel("nothing to do")

    @app.task(retry_on=(OSError,), retry=NEVER_SOON)
    def typed(kind: str) -> None:
        raise ValueError(kind) if kind == "value" else OSError(kind)

    @app.task
    def opaque() -> object:
        return object()

    with inline(app, retries=True) as run:
        later.defer(n=1)
        run_job = run.jobs[0]
        assert (run_job.status, run_job.attempts, run_job.snoozes) == ("queued", 0, 1)
        refuse.defer()
        typed.defer(kind="value")
        typed.defer(kind="io")
        opaque.defer()
    by_task = {(j.task, j.payload.get("kind")): j for j in run.jobs}
    assert by_task[("refuse", None)].status == "cancelled"
    assert str(by_task[("refuse", None)].error) == "nothing to do"
    assert (by_task[("typed", "value")].status, by_task[("typed", "value")].attempts) == ("dead", 1)
    assert (by_task[("typed", "io")].status, by_task[("typed", "io")].attempts) == ("dead", 20)
    assert by_task[("opaque", None)].status == "dead"
    assert isinstance(by_task[("opaque", None)].error, cronbase.ResultError)
    with inline(app) as run:
        # Without simulated retries a handler's failure is raised from defer, steering is not.
        refuse.defer()
        with pytest.raises(ValueError, match="value"):
            typed.defer(kind="value")
    assert [j.status for j in run.jobs] == ["cancelled", "dead"]
