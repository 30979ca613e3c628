"""Backoff: the bounds of each retry's delay, the cap, jitter, and refused settings."""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronbase import Backoff

MICROSECOND = timedelta(microseconds=1)


@st.composite
def backoffs(draw: st.DrawFn) -> Backoff:
    base = timedelta(milliseconds=draw(st.integers(1, 10**7)))
    cap = base + timedelta(milliseconds=draw(st.integers(0, 10**9)))
    return Backoff(
        base=base,
        cap=cap,
        factor=draw(st.floats(1, 100)),
        jitter=draw(st.floats(0, 1)),
        _random=random.Random(draw(st.integers(0, 2**32))),
    )


attempts = st.integers(1, 5000)


def test_the_docstring_example_and_the_defaults() -> None:
    assert Backoff(base=timedelta(seconds=10), jitter=0).delay(3) == timedelta(seconds=40)
    # README: 5 s doubling to at most an hour, 20% jitter either way.
    assert Backoff().bounds(1) == (timedelta(seconds=4), timedelta(seconds=6))
    assert Backoff().bounds(4) == (timedelta(seconds=32), timedelta(seconds=48))
    assert Backoff().bounds(50) == (timedelta(minutes=48), timedelta(hours=1))


def test_without_jitter_each_delay_is_base_times_factor_to_the_retry_then_the_cap() -> None:
    backoff = Backoff(base=timedelta(seconds=3), cap=timedelta(seconds=100), factor=3, jitter=0)
    delays = [backoff.delay(n) for n in range(1, 7)]
    assert delays == [timedelta(seconds=s) for s in (3, 9, 27, 81, 100, 100)]


@settings(max_examples=300, deadline=None)
@given(backoffs(), attempts)
def test_every_delay_lies_within_its_bounds_and_under_the_cap(backoff: Backoff, n: int) -> None:
    low, high = backoff.bounds(n)
    assert timedelta(0) <= low <= high <= backoff.cap
    delay = backoff.delay(n)
    assert low <= delay <= high


@settings(max_examples=300, deadline=None)
@given(backoffs(), attempts)
def test_bounds_are_the_formula_moved_by_the_jitter(backoff: Backoff, n: int) -> None:
    cap = backoff.cap.total_seconds()
    exponent = min(n - 1, 5000)
    try:
        raw = min(cap, backoff.base.total_seconds() * backoff.factor**exponent)
    except OverflowError:
        raw = cap
    low, high = backoff.bounds(n)
    assert abs(low.total_seconds() - raw * (1 - backoff.jitter)) <= 1e-6 * max(1.0, raw)
    assert abs(high.total_seconds() - min(cap, raw * (1 + backoff.jitter))) <= 1e-6 * max(1.0, raw)


@settings(max_examples=200, deadline=None)
@given(backoffs(), attempts)
def test_bounds_never_shrink_from_one_retry_to_the_next(backoff: Backoff, n: int) -> None:
    low, high = backoff.bounds(n)
    next_low, next_high = backoff.bounds(n + 1)
    assert low <= next_low
    assert high <= next_high


@pytest.mark.parametrize("factor", [2.0, 3.0, 10, 1e6])
def test_huge_attempt_numbers_give_the_cap_not_an_overflow(factor: float) -> None:
    backoff = Backoff(base=timedelta(seconds=1), cap=timedelta(hours=2), factor=factor, jitter=0)
    assert backoff.delay(10**6) == timedelta(hours=2)
    assert backoff.bounds(2000) == (timedelta(hours=2), timedelta(hours=2))


def test_jitter_spreads_the_delays_over_the_whole_range() -> None:
    backoff = Backoff(base=timedelta(seconds=100), jitter=0.5, _random=random.Random(7))
    delays = [backoff.delay(1).total_seconds() for _ in range(400)]
    assert all(50 <= d <= 150 for d in delays)
    # Both ends of the range are reached, not just one side of the base.
    assert min(delays) < 60
    assert max(delays) > 140


def test_a_factor_of_one_is_a_constant_delay() -> None:
    backoff = Backoff(base=timedelta(seconds=30), factor=1, jitter=0)
    assert {backoff.delay(n) for n in (1, 2, 10, 10**9)} == {timedelta(seconds=30)}


@pytest.mark.parametrize(
    ("settings_", "named"),
    [
        ({"base": timedelta(0)}, "base"),
        ({"base": timedelta(seconds=-1)}, "base"),
        ({"base": timedelta(minutes=10), "cap": timedelta(minutes=1)}, "cap"),
        ({"factor": 0.5}, "0.5"),
        ({"factor": math.nan}, "nan"),
        ({"jitter": 1.5}, "1.5"),
        ({"jitter": -0.1}, "-0.1"),
        ({"jitter": math.nan}, "nan"),
    ],
)
def test_bad_settings_are_refused_naming_the_value(
    settings_: dict[str, object], named: str
) -> None:
    with pytest.raises(ValueError, match="Backoff") as caught:
        Backoff(**settings_)  # type: ignore[arg-type]
    assert named in str(caught.value)


@pytest.mark.parametrize("attempt", [0, -3])
def test_attempt_numbers_start_at_one(attempt: int) -> None:
    with pytest.raises(ValueError, match=f"got {attempt}"):
        Backoff().delay(attempt)
