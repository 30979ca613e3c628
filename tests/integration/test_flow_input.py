"""Bad flow-control input: one-line errors naming the value; nothing written, nothing lost."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.flow import Rate, parse_rate


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("100/minute", Rate(100, timedelta(minutes=1))),
        ("5/second", Rate(5, timedelta(seconds=1))),
        ("5/s", Rate(5, timedelta(seconds=1))),
        ("1000 / hour", Rate(1000, timedelta(hours=1))),
        ("10/30 seconds", Rate(10, timedelta(seconds=30))),
        ("2/day", Rate(2, timedelta(days=1))),
    ],
)
def test_rates_parse(text: str, rate: Rate) -> None:
    assert parse_rate(text) == rate
    assert parse_rate(str(rate)) == rate


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rate_limit": "100/minit"}, "rate_limit '100/minit' is not a rate"),
        ({"rate_limit": "100"}, "rate_limit '100' is not a rate"),
        ({"rate_limit": "0/second"}, "the count must be from 1 to 10000"),
        (
            {"global_concurrency": -1},
            "global_concurrency must be a whole number of at least 1, got -1",
        ),
        ({"global_concurrency": 0}, "got 0"),
        ({"concurrency_key": "t:{id}", "key_concurrency": True}, "key_concurrency must be"),
        ({"key_concurrency": 2}, "needs a concurrency_key template"),
        ({"concurrency_key": "t:{id}"}, "needs key_concurrency or rate_limit"),
        ({"concurrency_key": "t:{id!r}", "key_concurrency": 1}, "must name a payload field"),
        ({"concurrency_key": "t:{id", "key_concurrency": 1}, "is not a template"),
        ({"retry_on": IOError}, "retry_on must be a tuple of exception classes"),
        ({"dont_retry_on": ("x",)}, "dont_retry_on must be a tuple of exception classes"),
        ({"max_snoozes": -1}, "max_snoozes must be a whole number of 0 or more"),
    ],
)
def test_bad_task_options_are_refused_at_registration(
    app: cronbase.App, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(cronbase.ConfigurationError) as info:

        @app.task(**options)
        def job(id: int = 0) -> None: ...

    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert "job" not in app.tasks


def test_a_key_template_naming_a_missing_field_writes_nothing(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(concurrency_key="tenant:{tenant_id}", key_concurrency=1)
    def job(tenant: int = 0, **rest: Any) -> None: ...

    with pytest.raises(cronbase.PayloadError) as info:
        job.defer(tenant=3)
    assert str(info.value) == (
        "task 'job': concurrency_key 'tenant:{tenant_id}' names 'tenant_id', which the payload "
        "does not have (it has 'tenant')"
    )
    with pytest.raises(cronbase.PayloadError):
        job.defer_many([{"tenant_id": 1}, {"tenant": 2}])
    assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (0,)
    # The key can come from configure instead; a task without a key limit refuses one.
    job.configure(concurrency_key="tenant:9").defer(tenant=3)
    assert db.execute("SELECT flow_key FROM cronbase.jobs_all").fetchall() == [
        ("key:job|tenant:9",)
    ]

    @app.task
    def plain() -> None: ...

    with pytest.raises(cronbase.ConfigurationError, match="has no per-key limit"):
        plain.configure(concurrency_key="x")


def test_scopes_of_deferred_jobs(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    @app.task(global_concurrency=2)
    def whole() -> None: ...

    @app.task(concurrency_key="{a}-{b}", key_concurrency=1, global_concurrency=5)
    def keyed(a: str, b: int) -> None: ...

    @app.task
    def free() -> None: ...

    whole.defer()
    keyed.defer(a="x", b=1)
    keyed.defer_many([{"a": "y", "b": 2}, {"a": "z", "b": 3}])
    free.defer()
    assert db.execute("SELECT task, flow_key FROM cronbase.jobs_all ORDER BY id").fetchall() == [
        ("whole", "task:whole"),
        ("keyed", "key:keyed|x-1"),
        ("keyed", "key:keyed|y-2"),
        ("keyed", "key:keyed|z-3"),
        ("free", None),
    ]


def test_queue_limits_refuse_bad_values_and_write_nothing(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    for call, message in [
        (lambda: app.queues.set_limit("emails", -1), "got -1"),
        (lambda: app.queues.set_limit("emails", 2.5), "got 2.5"),  # type: ignore[arg-type]
        (lambda: app.queues.set_rate("emails", "fast"), "rate 'fast' is not a rate"),
        (lambda: app.queues.set_limit("no such/queue", 1), "invalid queue name"),
    ]:
        with pytest.raises(cronbase.CronbaseError, match=message):
            call()
    assert db.execute("SELECT count(*) FROM cronbase.queues").fetchone() == (0,)
    state = app.queues.set_rate("emails", "100/minute")
    assert state.rate == Rate(100, timedelta(minutes=1))
    assert [q.rate for q in app.queues.list()] == [Rate(100, timedelta(minutes=1))]
