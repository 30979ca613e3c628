"""Cron parsing and fire times: against a brute-force minute scan, and across DST changes."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from cronbase.errors import ScheduleError
from cronbase.schedule.cron import ALIASES, Cron

MONTH_DAYS = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}

# (field text, allowed values) for a field whose values lie in [low, high].


@st.composite
def field(draw: st.DrawFn, low: int, high: int) -> tuple[str, set[int]]:
    kind = draw(st.sampled_from(["star", "value", "range", "step", "list"]))
    if kind == "star":
        return "*", set(range(low, high + 1))
    if kind == "value":
        v = draw(st.integers(low, high))
        return str(v), {v}
    if kind == "range":
        a = draw(st.integers(low, high))
        b = draw(st.integers(a, high))
        return f"{a}-{b}", set(range(a, b + 1))
    if kind == "step":
        step = draw(st.integers(1, max(1, high - low)))
        return f"*/{step}", set(range(low, high + 1, step))
    values = sorted(set(draw(st.lists(st.integers(low, high), min_size=1, max_size=4))))
    return ",".join(map(str, values)), set(values)


@st.composite
def expression(draw: st.DrawFn) -> tuple[str, list[set[int]]]:
    minute = draw(field(0, 59))
    hour = draw(field(0, 23))
    # Day-of-month and day-of-week are left as '*' on one side: the OR rule of cron for two
    # restricted day fields is covered by its own test below.
    dom = draw(field(1, 31))
    month = draw(field(1, 12))
    # Feb 30 and the like never come; cronsim refuses them (tested below), so skip them here.
    assume(any(day <= MONTH_DAYS[m] for day in dom[1] for m in month[1]))
    text = " ".join([minute[0], hour[0], dom[0], month[0], "*"])
    return text, [minute[1], hour[1], dom[1], month[1]]


def brute_force_next(sets: list[set[int]], after: datetime) -> datetime:
    minutes, hours, days, months = sets
    # Minute by minute, but skipping whole hours, days and months that cannot match.
    t = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    limit = t + timedelta(days=366 * 9)  # Feb 29 can be eight years away (2096 -> 2104)
    while t < limit:
        if t.month not in months:
            t = (t.replace(day=28, hour=0, minute=0) + timedelta(days=4)).replace(day=1)
        elif t.day not in days:
            t = t.replace(hour=0, minute=0) + timedelta(days=1)
        elif t.hour not in hours:
            t = t.replace(minute=0) + timedelta(hours=1)
        elif t.minute not in minutes:
            t += timedelta(minutes=1)
        else:
            return t
    raise AssertionError("no fire time within nine years")


moments = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2030, 12, 31), timezones=st.just(UTC)
)


@settings(max_examples=150, deadline=None)
@given(expression(), moments)
def test_next_fire_matches_a_brute_force_minute_scan(
    expr: tuple[str, list[set[int]]], after: datetime
) -> None:
    text, sets = expr
    cron = Cron.parse(text, "UTC")
    assert cron.next_after(after) == brute_force_next(sets, after)


@settings(max_examples=100, deadline=None)
@given(expression(), moments, st.integers(1, 400), st.sampled_from(["UTC", "Europe/Berlin"]))
def test_slots_backwards_agree_with_iterating_forwards(
    expr: tuple[str, list[set[int]]], after: datetime, hours: int, tz: str
) -> None:
    cron = Cron.parse(expr[0], tz)
    until = after + timedelta(hours=hours)
    forwards = []
    for fire in cron.iter_after(after):
        if fire > until:
            break
        forwards.append(fire)
    assert cron.slots(after, until, limit=10**6) == forwards
    assert cron.slots(after, until, limit=3) == forwards[-3:]


def test_slots_include_until_and_exclude_after() -> None:
    cron = Cron.parse("@hourly")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert cron.slots(start, start + timedelta(hours=2), limit=10) == [
        start + timedelta(hours=1),
        start + timedelta(hours=2),
    ]


def test_day_fields_both_restricted_mean_either() -> None:
    # Cron's rule: with both day-of-month and day-of-week restricted, either one matching fires.
    cron = Cron.parse("0 0 13 * FRI", "UTC")
    fires = [f.date().isoformat() for f in _take(cron, datetime(2026, 2, 1, tzinfo=UTC), 4)]
    assert fires == ["2026-02-06", "2026-02-13", "2026-02-20", "2026-02-27"]


def _take(cron: Cron, after: datetime, n: int) -> list[datetime]:
    out = []
    for fire in cron.iter_after(after):
        out.append(fire)
        if len(out) == n:
            return out
    return out


@pytest.mark.parametrize(
    ("alias", "after", "expected"),
    [
        ("@hourly", datetime(2026, 5, 5, 10, 30, tzinfo=UTC), datetime(2026, 5, 5, 11, tzinfo=UTC)),
        ("@daily", datetime(2026, 5, 5, 10, 30, tzinfo=UTC), datetime(2026, 5, 6, tzinfo=UTC)),
        ("@midnight", datetime(2026, 5, 5, 10, 30, tzinfo=UTC), datetime(2026, 5, 6, tzinfo=UTC)),
        ("@weekly", datetime(2026, 5, 5, 10, tzinfo=UTC), datetime(2026, 5, 10, tzinfo=UTC)),
        ("@monthly", datetime(2026, 5, 5, tzinfo=UTC), datetime(2026, 6, 1, tzinfo=UTC)),
        ("@yearly", datetime(2026, 5, 5, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),
        ("@annually", datetime(2026, 5, 5, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),
    ],
)
def test_aliases(alias: str, after: datetime, expected: datetime) -> None:
    assert alias in ALIASES
    assert Cron.parse(alias).next_after(after) == expected


def test_names_of_days_and_months_and_seconds_field() -> None:
    cron = Cron.parse("0 8 * JAN MON-FRI", "UTC")
    assert cron.next_after(datetime(2027, 1, 2, tzinfo=UTC)) == datetime(2027, 1, 4, 8, tzinfo=UTC)
    every_ten_seconds = Cron.parse("*/10 * * * * *")
    start = datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)
    assert every_ten_seconds.next_after(start) == datetime(2026, 1, 1, 0, 0, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    ("tz", "day"),
    [("Europe/Berlin", datetime(2026, 3, 29)), ("America/New_York", datetime(2026, 3, 8))],
)
def test_spring_forward_a_0230_job_runs_once_at_0300(tz: str, day: datetime) -> None:
    zone = ZoneInfo(tz)
    cron = Cron.parse("30 2 * * *", tz)
    start = (day - timedelta(days=1)).replace(hour=12, tzinfo=zone)
    fires = [f.astimezone(zone) for f in _take(cron, start.astimezone(UTC), 3)]
    on_the_day = [f for f in fires if f.date() == day.date()]
    assert len(on_the_day) == 1
    assert (on_the_day[0].hour, on_the_day[0].minute) == (3, 0)
    assert (fires[2].hour, fires[2].minute) == (2, 30)


@pytest.mark.parametrize(
    ("tz", "day"),
    [("Europe/Berlin", datetime(2026, 10, 25)), ("America/New_York", datetime(2026, 11, 1))],
)
def test_fall_back_a_job_in_the_repeated_hour_runs_once(tz: str, day: datetime) -> None:
    zone = ZoneInfo(tz)
    repeated_hour = 2 if tz == "Europe/Berlin" else 1
    cron = Cron.parse(f"0 {repeated_hour} * * *", tz)
    start = (day - timedelta(days=1)).replace(hour=12, tzinfo=zone)
    fires = [f.astimezone(zone) for f in _take(cron, start.astimezone(UTC), 3)]
    assert [f.date() for f in fires] == [
        day.date(),
        (day + timedelta(days=1)).date(),
        (day + timedelta(days=2)).date(),
    ]
    assert all(f.hour == repeated_hour for f in fires)
    # Walking back over the same night finds the same single slot.
    end = fires[0] + timedelta(hours=3)
    assert cron.slots(start.astimezone(UTC), end.astimezone(UTC), limit=10) == [
        fires[0].astimezone(UTC)
    ]


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("0 25 * * *", "bad hour field '25'"),
        ("61 * * * *", "bad minute field '61'"),
        ("* * 32 * *", "bad day-of-month field '32'"),
        ("* * * 13 *", "bad month field '13'"),
        ("0 8 * * FUN", "bad day-of-week field 'FUN'"),
        ("* * *", "3 fields, expected 5"),
        ("@fortnightly", "unknown alias"),
        ("", "0 fields"),
    ],
)
def test_invalid_expressions_name_the_bad_field(expression: str, message: str) -> None:
    pattern = re.escape(f"invalid cron expression {expression!r}")
    with pytest.raises(ScheduleError, match=pattern) as info:
        Cron.parse(expression)
    assert message in str(info.value)


@pytest.mark.parametrize("tz", ["Europe/Berln", "Mars/Olympus", "../etc/passwd", ""])
def test_unknown_time_zones_are_refused_by_name(tz: str) -> None:
    with pytest.raises(ScheduleError, match=f"unknown time zone {tz!r}"):
        Cron.parse("0 * * * *", tz)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            "0 0 31 2 *",
            "cron expression '0 0 31 2 *' never fires: February has no day 31; for the last day "
            "of the month write L ('0 0 L 2 *')",
        ),
        (
            "30 0 0 31 APR,6 *",
            "cron expression '30 0 0 31 APR,6 *' never fires: April and June have no day 31; "
            "for the last day of the month write L ('30 0 0 L APR,6 *')",
        ),
    ],
)
def test_a_day_that_never_comes_is_refused_as_never_firing(expression: str, message: str) -> None:
    """Well-formed, so not "a bad day-of-month field": it names the months and the days."""
    with pytest.raises(ScheduleError) as info:
        Cron.parse(expression)
    assert str(info.value) == message
