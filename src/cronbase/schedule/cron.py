"""Cron expressions with time zones: parsing and fire times (pure, over cronsim).

Five fields, or six with leading seconds; the aliases ``@hourly @daily @midnight @weekly @monthly
@yearly @annually``; names of months and days. Fire times follow Debian cron across DST changes,
as cronsim does: a 02:30 job on the spring-forward day fires once, at 03:00; a 01:00 job on the
fall-back day fires once, at the first 01:00.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cron_descriptor import ExpressionDescriptor, Options  # type: ignore[import-untyped]
from cronsim import CronSim, CronSimError

from ..errors import ScheduleError

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_FIELDS_5 = ("minute", "hour", "day-of-month", "month", "day-of-week")
_FIELDS_6 = ("second", *_FIELDS_5)
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")  # fmt: skip
# Just before 2000-01-01 (a leap year, whose January has every day of a month): walking a field
# from here meets each of its values within the year.
_BEFORE_2000 = datetime(1999, 12, 31, 23, 59)


def parse_zone(tz: str) -> ZoneInfo:
    """A ZoneInfo for an IANA name; ScheduleError naming it when unknown."""
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ScheduleError(
            f"unknown time zone {tz!r}; use an IANA name such as 'Europe/Berlin' or 'UTC'"
        ) from None


def _in_2000(expression: str) -> list[datetime]:
    return list(
        itertools.takewhile(lambda fire: fire.year == 2000, CronSim(expression, _BEFORE_2000))
    )


def _listed(words: list[str], last: str) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"


def _never_fires(expression: str, fields: list[str], exc: CronSimError) -> ScheduleError | None:
    """cronsim refuses a day of the month that none of the months has (``0 0 31 2 *``) as a "bad
    day-of-month": the expression is well formed, it only never fires. Say that, or None when
    the error is another, or the day field is bad on its own."""
    if str(exc) != "Bad day-of-month":
        return None
    at = (_FIELDS_6 if len(fields) == 6 else _FIELDS_5).index("day-of-month")
    try:
        days = sorted({fire.day for fire in _in_2000(f"0 0 {fields[at]} 1 *")})
        months = sorted({fire.month for fire in _in_2000(f"0 0 1 {fields[at + 1]} *")})
    except CronSimError:
        return None
    names = [_MONTHS[m - 1] for m in months]
    has = "has" if len(names) == 1 else "have"
    last = " ".join([*fields[:at], "L", *fields[at + 1 :]])
    return ScheduleError(
        f"cron expression {expression!r} never fires: {_listed(names, 'and')} {has} no day "
        f"{_listed([str(d) for d in days], 'or')}; for the last day of the month write L "
        f"({last!r})"
    )


def _explain(expression: str, fields: list[str], exc: CronSimError) -> ScheduleError:
    # cronsim's messages name the field ("Bad hour"); point at the text the user wrote.
    never = _never_fires(expression, fields, exc)
    if never is not None:
        return never
    message = str(exc)
    names = _FIELDS_6 if len(fields) == 6 else _FIELDS_5
    if message.startswith("Bad "):
        field = message[4:].strip().lower()
        if field in names:
            value = fields[names.index(field)]
            return ScheduleError(
                f"invalid cron expression {expression!r}: bad {field} field {value!r}"
            )
    return ScheduleError(f"invalid cron expression {expression!r}: {message.lower()}")


@dataclass(frozen=True)
class Cron:
    """A validated cron expression in a time zone.

    >>> c = Cron.parse("0 8 * * MON", "America/New_York")
    >>> c.next_after(datetime(2026, 11, 20, tzinfo=UTC)).isoformat()
    '2026-11-23T13:00:00+00:00'
    """

    expression: str
    zone: ZoneInfo

    @property
    def tz(self) -> str:
        return self.zone.key

    @property
    def has_seconds(self) -> bool:
        """Whether it fires on seconds other than :00 (six fields, the first not 0), so that
        its times are shown to the second: ``*/10 * * * * *`` fires six times a minute."""
        fields = self.expression.split()
        return len(fields) == 6 and fields[0].strip("0") != ""

    @classmethod
    def parse(cls, expression: str, tz: str = "UTC") -> Cron:
        zone = parse_zone(tz)
        text = " ".join(expression.split())
        expanded = ALIASES.get(text.lower(), text)
        if expanded.startswith("@"):
            known = ", ".join(ALIASES)
            raise ScheduleError(
                f"invalid cron expression {expression!r}: unknown alias; use {known}"
            )
        fields = expanded.split()
        if len(fields) not in (5, 6):
            raise ScheduleError(
                f"invalid cron expression {expression!r}: {len(fields)} fields, expected 5 "
                "(minute hour day-of-month month day-of-week) or 6 (with leading seconds)"
            )
        try:
            CronSim(expanded, datetime(2000, 1, 1, tzinfo=zone))
        except CronSimError as exc:
            raise _explain(expression, fields, exc) from None
        return cls(expanded, zone)

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        """Fire times strictly after ``after`` (aware), as aware UTC datetimes."""
        if after.tzinfo is None:
            raise ValueError(f"after must be timezone-aware, got {after!r}")
        local = after.astimezone(self.zone)
        for fire in CronSim(self.expression, local):
            fire_utc = fire.astimezone(UTC)
            # cronsim truncates microseconds from its start: never return `after` itself.
            if fire_utc > after:
                yield fire_utc

    def next_after(self, after: datetime) -> datetime:
        """The first fire time strictly after ``after``."""
        return next(self.iter_after(after))

    def slots(self, after: datetime, until: datetime, *, limit: int) -> list[datetime]:
        """Fire times in ``(after, until]``, oldest first: the newest ``limit`` of them.

        Walks backwards from ``until``, so a schedule that was down for a year costs ``limit``
        steps, not a year of them.
        """
        if limit < 1:
            return []
        # Reverse iteration starts strictly before its start unless that has microseconds, in
        # which case the truncated second is the first candidate: so fire <= until is included.
        start = until.replace(microsecond=0) + timedelta(microseconds=1)
        found: list[datetime] = []
        for fire in CronSim(self.expression, start.astimezone(self.zone), reverse=True):
            fire_utc = fire.astimezone(UTC)
            if fire_utc <= after or len(found) >= limit:
                break
            found.append(fire_utc)
        found.reverse()
        return found


def describe(expression: str, tz: str) -> str:
    """The expression in words, in its zone: ``At 08:00, Monday through Friday
    (Europe/Berlin)``; the expression itself when it has no description (cron-descriptor)."""
    expanded = ALIASES.get(" ".join(expression.split()).lower(), expression)
    options = Options()
    options.use_24hour_time_format = True
    try:
        words = ExpressionDescriptor(expanded, options).get_description()
    except Exception:  # its own error types vary by version; the raw expression still reads
        return f"{expression} ({tz})"
    return f"{words} ({tz})"
