"""cronbase.contrib.celery: tasks, calls, retries and results as Celery's, run by real burst
workers on the real database; and what is warned about or refused."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.contrib.celery import (
    AsyncResult,
    Celery,
    CeleryCompatibilityWarning,
    Task,
    shared_task,
    states,
)
from cronbase.contrib.celery.exceptions import (
    MaxRetriesExceededError,
    Retry,
    TaskRevokedError,
    TimeoutError,
)
from cronbase.errors import ConfigurationError, PayloadError

W = CeleryCompatibilityWarning


@shared_task
def shout(word: str) -> str:
    """A shared task defined before any app exists: it binds to the current one at first use."""
    return word.upper()


@pytest.fixture
def capp(app: cronbase.App) -> Iterator[Celery]:
    return Celery("proj", cronbase_app=app)


def drain(capp: Celery) -> None:
    capp.cronbase_app.run_worker(burst=True, install_signal_handlers=False)


def job_row(db: psycopg.Connection[Any], job_id: str | int) -> dict[str, Any]:
    found = db.execute(
        "SELECT task, queue, priority, status, attempts, max_attempts, payload, error_type, "
        "idempotency_key, run_at - now() AS due_in FROM cronbase.jobs_all WHERE id = %s",
        [int(job_id)],
    ).fetchone()
    assert found is not None
    keys = ("task", "queue", "priority", "status", "attempts", "max_attempts", "payload")
    return dict(zip((*keys, "error_type", "idempotency_key", "due_in"), found, strict=True))


def outcomes(capp: Celery, job_id: str) -> list[tuple[str, str | None]]:
    return [(a.outcome, a.error_type) for a in capp.wrapped.jobs.attempts(int(job_id))]


# -- tasks and calls ---------------------------------------------------------------------------


def test_delay_stores_positional_arguments_by_name_and_get_returns_the_result(
    capp: Celery, db: psycopg.Connection[Any]
) -> None:
    @capp.task
    def add(x: int, y: int) -> int:
        return x + y

    result = add.delay(2, y=3)
    row = job_row(db, result.id)
    assert (row["task"], row["queue"], row["payload"]) == (
        "tests.integration.test_celery_contrib.add",
        "celery",
        {"x": 2, "y": 3},
    )
    assert row["max_attempts"] == 4  # max_retries 3, + 1
    assert result.state == states.PENDING
    assert not result.ready()
    drain(capp)
    assert result.get(timeout=10) == 5
    assert (result.state, result.status, result.result) == ("SUCCESS", "SUCCESS", 5)
    assert result.ready()
    assert result.successful()
    assert not result.failed()
    assert AsyncResult(result.id).get(timeout=10) == 5  # the current app
    assert capp.AsyncResult(int(result.id)) == result


def test_calling_a_task_runs_it_here_and_enqueues_nothing(
    capp: Celery, db: psycopg.Connection[Any]
) -> None:
    @capp.task(bind=True)
    def whoami(self: Task, n: int) -> tuple[bool, str | None, int]:
        return (self.request.called_directly, self.request.id, n)

    assert whoami(7) == (True, None, 7)
    assert whoami.s(8)() == (True, None, 8)
    assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (0,)


def test_arguments_that_cannot_be_named_are_refused_before_anything_is_written(
    capp: Celery, db: psycopg.Connection[Any]
) -> None:
    @capp.task
    def add(x: int, y: int) -> int:
        return x + y

    @capp.task
    def many(first: int, *rest: int) -> int:
        return first

    with pytest.raises(PayloadError, match=r"do not fit task .*add' \(x, y\).*too many"):
        add.delay(1, 2, 3)
    with pytest.raises(PayloadError, match=r"unexpected keyword argument 'z'"):
        add.apply_async(kwargs={"x": 1, "y": 2, "z": 3})
    with pytest.raises(PayloadError, match=r"takes \*rest: cronbase stores arguments by name"):
        many.delay(1, 2)
    assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (0,)
    assert job_row(db, many.delay(1).id)["payload"] == {"first": 1}


def test_a_bound_task_reads_its_request_as_a_job(capp: Celery) -> None:
    @capp.task(bind=True, max_retries=1, default_retry_delay=0)
    def inspect_me(self: Task, n: int) -> dict[str, Any]:
        if self.request.retries == 0:
            raise self.retry()
        with pytest.warns(W, match="request.args is empty"):
            args = self.request.args
        return {
            "id": self.request.id,
            "retries": self.request.retries,
            "kwargs": self.request.kwargs,
            "args": list(args),
        }

    result = inspect_me.delay(5)
    drain(capp)
    assert result.get(timeout=10) == {"id": result.id, "retries": 1, "kwargs": {"n": 5}, "args": []}


# -- retries -----------------------------------------------------------------------------------


def test_retry_counts_against_max_retries_then_raises_exc_and_the_job_is_dead(
    capp: Celery, db: psycopg.Connection[Any]
) -> None:
    @capp.task(bind=True, max_retries=2)
    def flaky(self: Task) -> None:
        raise self.retry(exc=ValueError("still down"), countdown=0)

    result = flaky.delay()
    drain(capp)
    row = job_row(db, result.id)
    assert (row["status"], row["attempts"], row["max_attempts"]) == ("dead", 3, 3)
    assert outcomes(capp, result.id) == [
        ("failed", "cronbase.contrib.celery.exceptions.Retry"),
        ("failed", "cronbase.contrib.celery.exceptions.Retry"),
        ("dead", "ValueError"),
    ]
    assert result.state == states.FAILURE
    with pytest.raises(ValueError, match="still down"):
        result.get(timeout=10)
    assert isinstance(result.get(timeout=10, propagate=False), ValueError)
    assert "ValueError: still down" in (result.traceback or "")


def test_retry_without_exc_past_max_retries_raises_max_retries_exceeded(
    capp: Celery, db: psycopg.Connection[Any]
) -> None:
    @capp.task(bind=True, max_retries=0)
    def once(self: Task) -> None:
        raise self.retry(countdown=0)

    result = once.delay()
    drain(capp)
    assert job_row(db, result.id)["error_type"] == (
        "cronbase.contrib.celery.exceptions.MaxRetriesExceededError"
    )
    with pytest.raises(MaxRetriesExceededError):
        result.get(timeout=10)


def test_retry_countdown_and_eta_set_when_the_job_runs_again(
    capp: Celery, db: psycopg.Connection[Any]
) -> None:
    at = datetime.now(UTC) + timedelta(hours=2)

    @capp.task(bind=True)
    def later(self: Task, how: str) -> None:
        if how == "countdown":
            raise self.retry(countdown=3600)
        if how == "eta":
            raise self.retry(eta=at)
        raise self.retry()  # default_retry_delay: 180 s

    ids = {how: later.delay(how) for how in ("countdown", "eta", "default")}
    drain(capp)
    due = {how: job_row(db, r.id)["due_in"].total_seconds() for how, r in ids.items()}
    assert 3500 < due["countdown"] <= 3600
    assert 7100 < due["eta"] <= 7200
    assert 120 < due["default"] <= 180
    assert {r.state for r in ids.values()} == {states.RETRY}
    assert isinstance(ids["countdown"].result, Retry)


def test_an_exception_that_is_not_a_retry_fails_the_task_at_once(
    capp: Celery, db: psycopg.Connection[Any]
) -> None:
    @capp.task
    def broken() -> None:
        raise KeyError("missing")

    result = broken.delay()
    drain(capp)
    assert (job_row(db, result.id)["status"], job_row(db, result.id)["attempts"]) == ("dead", 1)
    assert result.failed()
    assert result.ready()
    with pytest.raises(KeyError):
        result.get(timeout=10)


def test_autoretry_for_retries_with_celerys_backoff_and_others_fail(
    capp: Celery, db: psycopg.Connection[Any]
) -> None:
    @capp.task(
        autoretry_for=(ConnectionError,),
        dont_autoretry_for=(ConnectionResetError,),
        retry_backoff=5,
        retry_backoff_max=600,
        retry_jitter=False,
        max_retries=4,
    )
    def call(kind: str) -> None:
        if kind == "refused":
            raise ConnectionRefusedError("no")
        raise ConnectionResetError("reset")

    retried = call.delay("refused")
    failed = call.delay("reset")
    drain(capp)
    row = job_row(db, retried.id)
    assert (row["status"], row["attempts"]) == ("failed", 1)
    assert 3 < row["due_in"].total_seconds() <= 5  # factor 5 * 2**0
    assert (job_row(db, failed.id)["status"], job_row(db, failed.id)["attempts"]) == ("dead", 1)


def test_retry_kwargs_give_the_countdown_and_max_retries_of_autoretry(
    capp: Celery, db: psycopg.Connection[Any]
) -> None:
    @capp.task(autoretry_for=(OSError,), retry_kwargs={"max_retries": 1, "countdown": 0})
    def io() -> None:
        raise OSError("disk")

    result = io.delay()
    drain(capp)
    row = job_row(db, result.id)
    assert (row["status"], row["attempts"]) == ("dead", 2)
    assert outcomes(capp, result.id)[-1] == ("dead", "OSError")


def test_retry_outside_a_worker_raises_as_celery_does(capp: Celery) -> None:
    @capp.task(bind=True)
    def direct(self: Task) -> None:
        try:
            raise ValueError("here")
        except ValueError as exc:
            raise self.retry(exc=exc) from exc

    with pytest.raises(ValueError, match="here"):
        direct()


def test_retry_with_new_arguments_or_a_higher_max_retries(
    capp: Celery, db: psycopg.Connection[Any]
) -> None:
    @capp.task(bind=True, max_retries=1)
    def again(self: Task, how: str) -> None:
        if how == "args":
            self.retry(args=(1,))
        with pytest.warns(W, match=r"max_retries=5.*2 attempts"):
            self.retry(max_retries=5, countdown=0)

    with pytest.raises(ConfigurationError, match=r"self.retry\(args=...\)"):
        again.run("args")
    result = again.delay("warn")
    drain(capp)
    # The task's max_retries set the job's attempts: 2, both retried, then dead.
    assert (job_row(db, result.id)["status"], job_row(db, result.id)["attempts"]) == ("dead", 2)
    assert result.state == states.FAILURE


# -- options -----------------------------------------------------------------------------------


def test_queues_follow_the_call_the_task_the_routes_and_the_default(
    capp: Celery, db: psycopg.Connection[Any]
) -> None:
    capp.conf.update(
        task_default_queue="work",
        task_routes={"proj.mail.*": {"queue": "emails"}, "proj.pay": "payments"},
    )

    @capp.task(name="proj.mail.send")
    def send() -> None: ...

    @capp.task(name="proj.pay")
    def pay() -> None: ...

    @capp.task(name="proj.pinned", queue="pinned")
    def pinned() -> None: ...

    @capp.task(name="proj.other")
    def other() -> None: ...

    queues = [job_row(db, t.delay().id)["queue"] for t in (send, pay, pinned, other)]
    assert queues == ["emails", "payments", "pinned", "work"]
    assert job_row(db, send.apply_async(queue="now").id)["queue"] == "now"
    with pytest.raises(ConfigurationError, match="router functions are not supported"):
        capp.conf.task_routes = [lambda *a: None]


def test_priority_is_passed_as_given_and_warned_about(
    capp: Celery, db: psycopg.Connection[Any]
) -> None:
    with pytest.warns(W, match=r"priority=3 is cronbase's: lower runs first"):

        @capp.task(priority=3)
        def urgent() -> None: ...

    with pytest.warns(W, match=r"priority=9"):
        result = urgent.apply_async(priority=9)
    assert job_row(db, result.id)["priority"] == 9
    assert job_row(db, urgent.delay().id)["priority"] == 3


def test_ignore_result_stores_no_result_and_says_so_when_read(capp: Celery) -> None:
    @capp.task(ignore_result=True)
    def quiet() -> int:
        return 42

    result = quiet.delay()
    drain(capp)
    assert capp.wrapped.jobs.get(int(result.id)).result is None
    with pytest.warns(W, match="ignore_result=True"):
        assert result.get(timeout=10) is None


def test_time_limits_become_the_timeout_with_a_warning(capp: Celery) -> None:
    with pytest.warns(W, match="SoftTimeLimitExceeded is not raised"):

        @capp.task(time_limit=30, soft_time_limit=10)
        def slow() -> None: ...

    assert slow.cronbase_task.defaults.timeout == timedelta(seconds=10)


def test_acks_late_false_and_rate_limits_are_warned_about(capp: Celery) -> None:
    @capp.task(acks_late=True)
    def late() -> None: ...

    with pytest.warns(W, match="acks_late=False is not available"):

        @capp.task(acks_late=False)
        def early() -> None: ...

    with pytest.warns(W, match="across all workers together"):

        @capp.task(rate_limit="10/m")
        def limited() -> None: ...

    flow = limited.cronbase_task.defaults.flow
    assert flow is not None
    assert flow.rate is not None
    assert (flow.rate.n, flow.rate.period) == (10, timedelta(minutes=1))


def test_unknown_options_and_foreign_base_classes_are_refused(capp: Celery) -> None:
    with pytest.raises(ConfigurationError, match=r"unknown or unsupported option 'throws'"):
        capp.task(throws=(KeyError,))(lambda: None)
    with pytest.raises(ConfigurationError, match=r"base=.* is not a subclass"):
        capp.task(base=object)(lambda: None)
    with pytest.raises(ConfigurationError, match=r"retry_kwargs 'eta'"):
        capp.task(retry_kwargs={"eta": 1})(lambda: None)

    class Hooked(Task):
        def on_failure(self, *args: Any) -> None: ...

    with pytest.warns(W, match=r"overrides on_failure, which cronbase never calls"):

        @capp.task(base=Hooked)
        def hooked() -> None: ...

    assert isinstance(hooked, Hooked)


# -- apply_async options -----------------------------------------------------------------------


def test_countdown_and_eta_set_run_at_and_a_naive_eta_is_refused(
    capp: Celery, db: psycopg.Connection[Any]
) -> None:
    @capp.task
    def tick() -> None: ...

    assert 590 < job_row(db, tick.apply_async(countdown=600).id)["due_in"].total_seconds() <= 600
    at = datetime.now(UTC) + timedelta(hours=1)
    assert 3500 < job_row(db, tick.apply_async(eta=at).id)["due_in"].total_seconds() <= 3600
    with pytest.raises(ConfigurationError, match="is naive"):
        tick.apply_async(eta=datetime.now())  # the point of the test
    with pytest.raises(ConfigurationError, match="countdown or eta, not both"):
        tick.apply_async(countdown=1, eta=at)
    with pytest.raises(ConfigurationError, match="link_error on task"):
        tick.apply_async(link_error=tick.s())
    with pytest.raises(ConfigurationError, match="apply_async option 'shadow_name'"):
        tick.apply_async(shadow_name="x")
    with pytest.warns(W, match="routing_key ignored"):
        tick.apply_async(routing_key="x")


def test_task_id_is_the_idempotency_key_and_finds_the_result(
    capp: Celery, db: psycopg.Connection[Any]
) -> None:
    @capp.task
    def add(x: int, y: int) -> int:
        return x + y

    result = add.apply_async((1, 2), task_id="order-812")
    assert result.id == "order-812"
    assert job_row(db, capp.AsyncResult("order-812").job_id or 0)["idempotency_key"] == "order-812"
    with pytest.warns(W, match="names a job already: nothing is sent again"):
        add.apply_async((5, 5), task_id="order-812")
    assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (1,)
    drain(capp)
    assert AsyncResult("order-812").get(timeout=10) == 3
    with pytest.raises(ConfigurationError, match="all digits"):
        add.apply_async((1, 2), task_id="812")


def test_expires_revokes_a_job_that_starts_too_late(
    capp: Celery, db: psycopg.Connection[Any]
) -> None:
    @capp.task
    def fresh() -> str:
        return "ran"

    expired = fresh.apply_async(expires=datetime.now(UTC) - timedelta(seconds=1))
    timely = fresh.apply_async(expires=3600)
    drain(capp)
    assert expired.state == states.REVOKED
    with pytest.raises(TaskRevokedError, match="expired at"):
        expired.get(timeout=10)
    assert timely.get(timeout=10) == "ran"


# -- results -----------------------------------------------------------------------------------


def test_an_unknown_id_is_pending_and_get_times_out(capp: Celery) -> None:
    missing = AsyncResult("999999")
    assert (missing.state, missing.result, missing.ready()) == (states.PENDING, None, False)
    with pytest.raises(TimeoutError):
        AsyncResult("no-such-task-id").get(timeout=0.2)

    @capp.task
    def wait() -> None: ...

    with pytest.raises(TimeoutError):
        wait.delay().get(timeout=0.2)  # no worker


def test_revoke_cancels_the_job(capp: Celery, db: psycopg.Connection[Any]) -> None:
    @capp.task
    def never() -> None: ...

    result = never.apply_async(countdown=3600)
    result.revoke()
    assert (job_row(db, result.id)["status"], result.state) == ("cancelled", states.REVOKED)
    with pytest.raises(TaskRevokedError):
        result.get(timeout=10)


def test_started_shows_only_with_track_started_and_get_is_refused_in_a_task(capp: Celery) -> None:
    @capp.task(bind=True, track_started=True)
    def tracked(self: Task) -> str:
        return AsyncResult(self.request.id or "").state

    @capp.task(bind=True)
    def untracked(self: Task) -> str:
        return AsyncResult(self.request.id or "").state

    @capp.task(bind=True)
    def waits(self: Task) -> str:
        try:
            AsyncResult(self.request.id or "").get(timeout=1)
        except RuntimeError as exc:
            return str(exc)
        return "no error"

    results = [tracked.delay(), untracked.delay(), waits.delay()]
    drain(capp)
    values = [r.get(timeout=10) for r in results]
    assert values[:2] == [states.STARTED, states.PENDING]
    assert values[2].startswith("Never call result.get() within a task")


def test_a_failure_is_rebuilt_from_its_type_even_when_its_class_is_not_loaded(capp: Celery) -> None:
    from cronbase.contrib.celery.result import rebuild

    exc = rebuild("no_such_module.PaymentDeclined", "PaymentDeclined: card 4242")
    assert (type(exc).__name__, str(exc)) == ("PaymentDeclined", "card 4242")
    assert isinstance(rebuild("ValueError", "ValueError: x"), ValueError)


# -- shared tasks and the current app ----------------------------------------------------------


def test_a_shared_task_binds_to_the_current_app_at_first_use(
    capp: Celery, db: psycopg.Connection[Any]
) -> None:
    result = shout.delay("hi")
    assert job_row(db, result.id)["task"] == "tests.integration.test_celery_contrib.shout"
    assert shout.app is capp
    assert shout("direct") == "DIRECT"
    drain(capp)
    assert result.get(timeout=10) == "HI"


def test_a_shared_task_is_registered_on_each_app_when_it_is_finalized(database_url: str) -> None:
    other = Celery("other", database_url=database_url)
    try:
        assert "tests.integration.test_celery_contrib.shout" not in other.tasks
        other.finalize()
        assert "tests.integration.test_celery_contrib.shout" in other.cronbase_app.tasks
    finally:
        other.wrapped.close()


def test_the_app_refuses_and_warns_as_its_table_says(database_url: str) -> None:
    with pytest.warns(W, match=r"broker='amqp://'\) is ignored"):
        warned = Celery("w", database_url=database_url, broker="amqp://", set_as_current=False)
    with pytest.warns(W, match="setting 'worker_concurrency' has no effect"):
        warned.conf.worker_concurrency = 4
    with pytest.warns(W, match="result_backend is ignored"):
        warned.conf.update(result_backend="redis://")
    with pytest.raises(ConfigurationError, match="task_always_eager=True"):
        warned.conf["task_always_eager"] = True
    with pytest.raises(ConfigurationError, match="leave out database_url"):
        Celery("x", cronbase_app=warned.wrapped, database_url=database_url)
    with pytest.raises(ImportError, match=r"has no signals.*on_job_end"):
        import cronbase.contrib.celery.signals  # noqa: F401
    assert re.search(r"schema cronbase", repr(warned))


def test_config_from_object_reads_a_namespace_and_send_task_finds_by_name(capp: Celery) -> None:
    class Settings:
        CELERY_TIMEZONE = "Europe/Berlin"
        CELERY_TASK_DEFAULT_QUEUE = "fromconf"
        OTHER = "ignored"

    capp.config_from_object(Settings, namespace="CELERY")
    assert (capp.conf.timezone, capp.conf.task_default_queue) == ("Europe/Berlin", "fromconf")
    assert "other" not in capp.conf

    @capp.task(name="proj.named")
    def named(n: int) -> int:
        return n

    result = capp.send_task("proj.named", args=(4,))
    drain(capp)
    assert result.get(timeout=10) == 4
    with pytest.raises(KeyError, match="not registered"):
        capp.send_task("proj.nope")
