"""Every duration of the Python API takes a timedelta or a number of seconds; anything else is a
TypeError naming the parameter, and a number that is no duration a ConfigurationError naming it.
No database: the App below never connects."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import cronbase
from cronbase.durations import duration
from cronbase.maintenance import Retention

NOWHERE = "postgresql://nobody@127.0.0.1:1/never"


def _app() -> cronbase.App:
    return cronbase.App(database_url=NOWHERE)


def _task(**options: Any) -> cronbase.Task[Any, Any]:
    return _app().task(name="t", **options)(lambda: None)


def _configure(**options: Any) -> Any:
    return _task().configure(**options).options


def _signature(**options: Any) -> Any:
    return _task().s().set(**options).options


# (parameter as messages name it, a call taking the value, how to read back the timedelta)
PARAMETERS: list[tuple[str, Callable[[Any], Any], Callable[[Any], timedelta]]] = [
    ("lease", lambda v: _task(lease=v), lambda t: t.defaults.lease),
    ("timeout", lambda v: _task(timeout=v), lambda t: t.defaults.timeout),
    ("unique_for", lambda v: _task(unique_for=v), lambda t: t.defaults.unique_for),
    ("delay", lambda v: _configure(delay=v), lambda o: o.delay),
    ("lease", lambda v: _configure(lease=v), lambda o: o.lease),
    ("delay", lambda v: _signature(delay=v), lambda o: o.delay),
    ("lease", lambda v: _signature(lease=v), lambda o: o.lease),
    (
        "poll_interval",
        lambda v: _app().worker(poll_interval=v),
        lambda w: timedelta(seconds=w.options.poll_interval),
    ),
    (
        "reap_interval",
        lambda v: _app().worker(reap_interval=v),
        lambda w: timedelta(seconds=w.options.reap_interval),
    ),
    (
        "shutdown_grace",
        lambda v: _app().worker(shutdown_grace=v),
        lambda w: timedelta(seconds=w.options.shutdown_grace),
    ),
    (
        "fatal_after",
        lambda v: _app().worker(fatal_after=v),
        lambda w: timedelta(seconds=w.options.fatal_after),
    ),
    ("Retention succeeded", lambda v: Retention(succeeded=v), lambda r: r.succeeded),
    ("Retention cancelled", lambda v: Retention(cancelled=v), lambda r: r.cancelled),
    ("Retention dead", lambda v: Retention(dead=v), lambda r: r.dead),
    ("Retention events", lambda v: Retention(events=v), lambda r: r.events),
    ("Retention interval", lambda v: Retention(interval=v), lambda r: r.interval),
    ("Backoff base", lambda v: cronbase.Backoff(base=v, cap=3600), lambda b: b.base),
    ("Backoff cap", lambda v: cronbase.Backoff(base=1, cap=v), lambda b: b.cap),
    (
        "Rate period",
        lambda v: _task(rate_limit=cronbase.Rate(5, v)),
        lambda t: t.defaults.flow.rate.period,
    ),
    (
        "interval",
        lambda v: cronbase.Scheduler(_app().db, {}, interval=v),
        lambda s: timedelta(seconds=s.interval),
    ),
    ("Snooze delay", lambda v: cronbase.Snooze(v), lambda s: timedelta(seconds=s.seconds)),
]
IDS = [f"{name}-{index}" for index, (name, _, _) in enumerate(PARAMETERS)]


@pytest.mark.parametrize(("name", "call", "read"), PARAMETERS, ids=IDS)
@pytest.mark.parametrize("given", [90, 1.5, timedelta(minutes=2)], ids=["int", "float", "delta"])
def test_every_duration_takes_seconds_or_a_timedelta(
    name: str, call: Callable[[Any], Any], read: Callable[[Any], timedelta], given: Any
) -> None:
    if name == "unique_for" and given == 1.5:
        given = 2.5  # at least a second
    expected = given if isinstance(given, timedelta) else timedelta(seconds=given)
    assert read(call(given)) == expected


@pytest.mark.parametrize(("name", "call", "read"), PARAMETERS, ids=IDS)
@pytest.mark.parametrize("given", ["90", True, [1]], ids=["text", "bool", "list"])
def test_any_other_type_is_a_type_error_naming_the_parameter(
    name: str, call: Callable[[Any], Any], read: Callable[[Any], timedelta], given: Any
) -> None:
    with pytest.raises(TypeError) as caught:
        call(given)
    assert str(caught.value).startswith(
        f"{name} must be a timedelta or a number of seconds, got {given!r}"
    )


@pytest.mark.parametrize(("name", "call", "read"), PARAMETERS, ids=IDS)
@pytest.mark.parametrize("given", [math.nan, math.inf, -math.inf, 1e20], ids=repr)
def test_a_number_that_is_no_duration_is_refused_naming_the_parameter(
    name: str, call: Callable[[Any], Any], read: Callable[[Any], timedelta], given: float
) -> None:
    with pytest.raises(cronbase.ConfigurationError) as caught:
        call(given)
    message = str(caught.value)
    assert message.startswith(f"{name} must be "), message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda: _app().worker(poll_interval=0), "poll_interval must be a duration of more than 0"),
        (lambda: _app().worker(reap_interval=-1), "reap_interval must be a duration of more than"),
        (lambda: _app().worker(shutdown_grace=-0.5), "shutdown_grace must be a duration of 0 or"),
        (lambda: Retention(dead=-1), "Retention dead must be a duration of 0 or more"),
        (lambda: Retention(interval=0), "Retention interval must be a duration of more than 0"),
        (lambda: _task(timeout=0), "timeout must be a duration of more than 0"),
        (lambda: _task(lease=0), "lease must be a positive timedelta of at most 100 years"),
        (lambda: _configure(delay=-1), "delay must be a timedelta of zero or more"),
        (lambda: cronbase.Backoff(base=0), "Backoff base must be positive"),
        (
            lambda: _task(rate_limit=cronbase.Rate(5, 0)),
            "the period is out of range; it must be from 1 second",
        ),
    ],
)
def test_a_duration_below_its_least_is_refused_naming_it(
    call: Callable[[], Any], said: str
) -> None:
    with pytest.raises((cronbase.CronbaseError, ValueError), match=said):
        call()


def test_the_issues_worker_poll_interval_in_seconds() -> None:
    assert _app().worker(poll_interval=0.1).options.poll_interval == 0.1


def test_waits_and_stats_take_seconds_and_refuse_other_types() -> None:
    app = _app()
    with pytest.raises(TypeError, match="timeout must be a timedelta or a number of seconds"):
        app.jobs.wait(1, timeout="5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="window must be a timedelta or a number of seconds"):
        app.task_stats(window="1h")  # type: ignore[arg-type]
    with pytest.raises(cronbase.ConfigurationError, match="window must be a duration of more"):
        app.task_stats(window=0)


def test_the_helper_says_what_it_got() -> None:
    assert duration("x", 0) == timedelta(0)
    assert duration("x", -3, signed=True) == timedelta(seconds=-3)
    with pytest.raises(
        TypeError, match=r"x must be a timedelta or a number of seconds, got 'a' \(str\)"
    ):
        duration("x", "a")
