"""cronbase.testing.drain and enqueued on the real test database: what a drain runs and returns,
what it leaves waiting, and what enqueued's assertions say when they fail."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.errors import CronbaseError, PayloadError, UnknownTaskError
from cronbase.testing import drain, drain_async, enqueued, enqueued_async

NEVER_SOON = cronbase.Backoff(base=timedelta(hours=1), jitter=0)


def test_drain_runs_what_is_due_and_what_it_defers_and_returns_each_outcome(
    app: cronbase.App,
) -> None:
    @app.task(queue="emails")
    def receipt(order_id: int) -> None: ...

    @app.task(retry=NEVER_SOON)
    def place(order_id: int) -> None:
        if order_id < 0:
            raise ValueError(f"bad order {order_id}")
        receipt.defer(order_id=order_id)  # due at once: this drain runs it
        receipt.configure(delay=timedelta(hours=1)).defer(order_id=order_id + 100)  # not due

    good = place.defer(order_id=7)
    bad = place.defer(order_id=-1)
    outcomes = drain(app)

    assert [(o.task, o.payload, o.outcome, o.attempt) for o in outcomes] == [
        ("place", {"order_id": 7}, "succeeded", 1),
        ("place", {"order_id": -1}, "failed", 1),
        ("receipt", {"order_id": 7}, "succeeded", 1),
    ]
    assert [o.id for o in outcomes][:2] == [good, bad]
    assert repr(outcomes[1].error) == "ValueError('bad order -1')"
    assert all(o.duration >= timedelta(0) for o in outcomes)
    assert outcomes.of(receipt) == outcomes[2:]
    # The failure waits for its backoff, the delayed job for its time: a second drain runs none.
    assert app.jobs.get(bad).status is cronbase.JobStatus.FAILED
    assert drain(app) == []
    assert app.hooks.job_end == []  # the drain's recorder is gone

    with pytest.raises(AssertionError) as raised:
        outcomes.assert_all_succeeded()
    assert str(raised.value) == (
        "1 of 3 drained attempts did not succeed:\n"
        f"  job {bad} place {{'order_id': -1}} attempt 1: failed (ValueError: bad order -1)"
    )
    assert outcomes.of("receipt").assert_all_succeeded() == outcomes[2:]


def test_drain_runs_only_the_queues_asked(app: cronbase.App) -> None:
    @app.task
    def work(n: int) -> None: ...

    work.configure(queue="a").defer(n=1)
    work.configure(queue="b").defer(n=2)
    assert [o.payload for o in drain(app, queues=["b"])] == [{"n": 2}]
    assert [o.payload for o in drain(app)] == [{"n": 1}]


def test_drain_inside_a_running_loop_says_to_use_drain_async(app: cronbase.App) -> None:
    import asyncio

    async def inside() -> None:
        drain(app)

    with pytest.raises(CronbaseError, match=r"use `await cronbase.testing.drain_async\(app\)`"):
        asyncio.run(inside())


@pytest.mark.anyio
async def test_drain_async_and_enqueued_async(app: cronbase.App) -> None:
    @app.task
    async def ping(n: int) -> None: ...

    await ping.defer_async(n=1)
    (await enqueued_async(app, task=ping, n=1)).assert_one()
    outcomes = await drain_async(app)
    assert [(o.task, o.outcome) for o in outcomes] == [("ping", "succeeded")]
    (await enqueued_async(app, task=ping)).assert_none()
    (await enqueued_async(app, task=ping, status="succeeded")).assert_one()
    await app.aclose()


def test_enqueued_matches_task_status_and_payload_subset(app: cronbase.App) -> None:
    @app.task
    def send(
        order_id: int, email: str, when: datetime | None = None, urgent: bool = False
    ) -> None: ...

    @app.task
    def other(order_id: int) -> None: ...

    when = datetime(2026, 3, 1, 9, tzinfo=UTC)
    first = send.defer(order_id=7, email="a@example.com", when=when)
    second = send.defer(order_id=7, email="b@example.com", urgent=True)
    send.defer(order_id=8, email="a@example.com")
    other.defer(order_id=7)

    assert [j.id for j in enqueued(app, task=send, order_id=7)] == [first, second]
    assert [j.id for j in enqueued(app, order_id=7)] == [first, second, second + 2]
    assert enqueued(app, task="send", order_id=7, email="b@example.com").assert_one().id == second
    # Values compare as stored: a datetime matches its ISO text, and True is not 1.
    assert enqueued(app, task=send, when=when).assert_one().id == first
    assert enqueued(app, task=send, when=when.isoformat()).assert_one().id == first
    enqueued(app, task=send, urgent=1).assert_none()
    enqueued(app, task=send, urgent=True).assert_one()
    enqueued(app, task=send).assert_count(3)
    enqueued(app).assert_count(4)

    drain(app)
    enqueued(app, task=send).assert_none()  # no longer waiting
    enqueued(app, task=send, status="succeeded").assert_count(3)
    enqueued(app, task=send, status=["succeeded", "dead"], order_id=8).assert_one()
    enqueued(app, task=send, status="any").assert_count(3)


def test_a_failed_assertion_lists_what_was_enqueued_instead(app: cronbase.App) -> None:
    @app.task
    def send(order_id: int, email: str) -> None: ...

    @app.task
    def other(n: int) -> None: ...

    with pytest.raises(AssertionError) as nothing:
        enqueued(app, task=send, order_id=7).assert_one()
    assert str(nothing.value) == (
        "expected exactly 1 waiting job of task 'send' with {'order_id': 7} in the payload, "
        "found 0; nothing was enqueued"
    )

    a = send.defer(order_id=8, email="a@example.com")
    b = other.defer(n=1)
    with pytest.raises(AssertionError) as wrong:
        enqueued(app, task=send, order_id=7).assert_one()
    assert str(wrong.value) == (
        "expected exactly 1 waiting job of task 'send' with {'order_id': 7} in the payload, "
        "found 0; enqueued (2 jobs, oldest first):\n"
        f"    job {a} send {{'email': 'a@example.com', 'order_id': 8}} [queued]\n"
        f"    job {b} other {{'n': 1}} [queued]"
    )
    with pytest.raises(AssertionError) as some:
        enqueued(app, task=send).assert_none()
    assert str(some.value).startswith("expected no waiting job of task 'send', found 1;")
    assert f"  * job {a} send" in str(some.value)
    assert str(some.value).endswith("  (* matches)")
    with pytest.raises(
        AssertionError, match=r"expected exactly 3 jobs, found 2; enqueued \(2 jobs"
    ):
        enqueued(app, status="any").assert_count(2).assert_count(3)
    with pytest.raises(
        AssertionError, match=r"expected at least 1 waiting job of task 'other' with \{'n': 2\} in"
    ):
        enqueued(app, task=other, n=2).assert_any()


def test_enqueued_refuses_what_would_match_nothing_by_mistake(app: cronbase.App) -> None:
    @app.task
    def send(order_id: int) -> None: ...

    @app.task
    def flexible(**anything: Any) -> None: ...

    @app.task
    def has_status(status: str) -> None: ...

    with pytest.raises(UnknownTaskError, match="unknown task 'snd'; registered: flexible"):
        enqueued(app, task="snd")
    with pytest.raises(PayloadError, match=r"task 'send' takes no argument 'order' \(order_id\)"):
        enqueued(app, task=send, order=7)
    enqueued(app, task=flexible, whatever=1).assert_none()  # **kwargs takes any key
    with pytest.raises(CronbaseError, match="unknown status 'queud'; give 'waiting', 'any'"):
        enqueued(app, status="queud")
    # A payload key named like an option goes in payload=.
    has_status.defer(status="paid")
    enqueued(app, task=has_status, payload={"status": "paid"}).assert_one()


def test_over_the_shown_limit_the_oldest_jobs_are_counted_not_listed(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def n(i: int) -> None: ...

    n.defer_many([{"i": i} for i in range(30)])
    with pytest.raises(AssertionError) as raised:
        enqueued(app, task=n, i=99).assert_one()
    lines = str(raised.value).splitlines()
    assert lines[1] == "  ... 5 older jobs not shown"
    assert len(lines) == 2 + 25
    assert lines[-1].endswith("n {'i': 29} [queued]")
