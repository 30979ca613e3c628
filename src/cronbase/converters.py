"""The converters a handler's arguments may need: JSON value -> datetime, Decimal, Enum, a list
of them, a pydantic model... Each passes None and values already of its type as they are, and
raises payload.py's ``_BadValue`` with the path to what does not convert (convert.py, which picks
them, turns it into a PayloadError). A ``date`` takes a datetime only at midnight, as pydantic.
"""

from __future__ import annotations

import contextlib
import enum
import json
import re
from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

from .payload import _BadValue, short, to_plain

Converter = Callable[[Any], Any]


def first_of(plain: tuple[type, ...], rich: list[Converter], names: str) -> Converter:
    """A union's: a value of one of its ``plain`` (JSON) types stays; else the first of its
    ``rich`` converters that takes it."""

    def convert(value: Any) -> Any:
        if value is None or isinstance(value, plain):
            return value
        for attempt in rich:
            try:
                return attempt(value)
            except _BadValue:
                continue
        raise _BadValue(f"is {short(value)}, which is none of {names}")

    return convert


def sequence(item: Converter) -> Converter:
    """``list[X]`` and ``Sequence[X]``: a list of ``item``'s results."""

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, list | tuple):
            raise _BadValue(f"is {short(value)}, not a list")
        out = []
        for index, element in enumerate(value):
            try:
                out.append(item(element))
            except _BadValue as exc:
                raise exc.at(f"[{index}]") from None
        return out

    return convert


def tuple_of(item: Converter | None) -> Converter:
    """``tuple[X, ...]`` and ``tuple``: a JSON list becomes a tuple."""
    as_list = sequence(item) if item is not None else None

    def convert(value: Any) -> Any:
        if value is None or (isinstance(value, tuple) and item is None):
            return value
        if not isinstance(value, list | tuple):
            raise _BadValue(f"is {short(value)}, not a list")
        return tuple(value if as_list is None else as_list(value))

    return convert


def fixed_tuple(items: tuple[Converter | None, ...]) -> Converter:
    """``tuple[X, Y]``: exactly as many elements, each converted by its own."""

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, list | tuple) or len(value) != len(items):
            raise _BadValue(f"is {short(value)}, not a list of {len(items)}")
        out = []
        for index, (element, item) in enumerate(zip(value, items, strict=True)):
            try:
                out.append(element if item is None else item(element))
            except _BadValue as exc:
                raise exc.at(f"[{index}]") from None
        return tuple(out)

    return convert


def mapping(item: Converter) -> Converter:
    """``dict[str, X]`` and ``Mapping[str, X]``: each value converted; keys stay strings."""

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise _BadValue(f"is {short(value)}, not an object")
        out = {}
        for key, element in value.items():
            try:
                out[key] = item(element)
            except _BadValue as exc:
                raise exc.at(f"[{key!r}]") from None
        return out

    return convert


def enum_of(cls: type[enum.Enum]) -> Converter:
    """An Enum, from its value as JSON wrote it."""
    by_json: dict[str, enum.Enum] = {}

    def convert(value: Any) -> Any:
        if value is None or isinstance(value, cls):
            return value
        try:
            return cls(value)
        except (ValueError, TypeError):
            pass
        # A value JSON changed on the way (a tuple came back a list, a date a string).
        if not by_json:
            for member in cls:
                with contextlib.suppress(Exception):  # a value the encoder refuses: never sent
                    by_json.setdefault(_canonical(to_plain(member.value)), member)
        with contextlib.suppress(TypeError, ValueError):  # not JSON: no member's
            found = by_json.get(_canonical(value))
            if found is not None:
                return found
        values = ", ".join(short(m.value) for m in list(cls)[:5])
        more = ", ..." if len(cls) > 5 else ""
        raise _BadValue(f"is {short(value)}, not a value of {cls.__name__} ({values}{more})")

    return convert


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def model_of(cls: type) -> Converter:
    """A pydantic model: ``model_validate``; its errors, the first three, on one line."""
    name = cls.__name__

    def convert(value: Any) -> Any:
        if value is None or isinstance(value, cls):
            return value
        try:
            return cls.model_validate(value)  # type: ignore[attr-defined]
        except ValueError as exc:  # pydantic's ValidationError
            errors = getattr(exc, "errors", None)
            if callable(errors):
                said = "; ".join(
                    f"{'.'.join(map(str, e.get('loc', ()))) or '(root)'}: {e.get('msg')}"
                    for e in errors()[:3]
                )
            else:
                said = str(exc).splitlines()[0]
            raise _BadValue(f"does not validate as {name}: {said}") from None

    return convert


# -- scalars ----------------------------------------------------------------------------------


def _to_time(value: Any) -> Any:
    if value is None or isinstance(value, time):
        return value
    if isinstance(value, str):
        try:
            return time.fromisoformat(value)
        except ValueError:
            pass
    raise _BadValue(f"is {short(value)}, not an ISO 8601 time")


def _to_date(value: Any) -> Any:
    if value is None or (isinstance(value, date) and not isinstance(value, datetime)):
        return value
    if isinstance(value, datetime):  # mypy lets one through: a datetime is a date
        return _date_of(value, value)
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            pass
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            return _date_of(moment, value)
    raise _BadValue(f"is {short(value)}, not an ISO 8601 date")


def _date_of(moment: datetime, value: Any) -> date:
    """The date of a datetime at midnight (in its own offset); a later one is refused, as
    pydantic does: which day 23:30+00:00 means depends on a zone cronbase cannot guess."""
    if moment.time() != time(0):
        raise _BadValue(
            f"is {short(value)}, a datetime with a time of day, not a date; pass a date "
            "(.date()), or a datetime at midnight"
        )
    return moment.date()


def _to_datetime(value: Any) -> Any:
    if value is None or isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if parsed.utcoffset() is None:
                # cronbase's datetimes are aware: a naive one is another moment in another zone.
                raise _BadValue(
                    f"is {short(value)}, a datetime without a UTC offset; write one (+00:00)"
                )
            return parsed
    raise _BadValue(f"is {short(value)}, not an ISO 8601 datetime")


_NUMBER = r"(\d+(?:\.\d+)?)"
_DURATION = re.compile(
    rf"([-+])?P(?:{_NUMBER}Y)?(?:{_NUMBER}M)?(?:{_NUMBER}W)?(?:{_NUMBER}D)?"
    rf"(?:T(?:{_NUMBER}H)?(?:{_NUMBER}M)?(?:{_NUMBER}S)?)?",
    re.ASCII,
)
_DAY = 86_400_000_000
# Microseconds per unit of each group above; a year and a month as pydantic reads them.
_UNITS = (365 * _DAY, 30 * _DAY, 7 * _DAY, _DAY, 3_600_000_000, 60_000_000, 1_000_000)


def parse_duration(text: str) -> timedelta:
    """An ISO 8601 duration (``P1DT2H3M4.5S``, ``-PT1S``, ``P1W``) as a timedelta, exactly;
    ValueError otherwise."""
    match = _DURATION.fullmatch(text)
    if match is None or not any(match.groups()[1:]):
        raise ValueError(f"not an ISO 8601 duration: {text!r}")
    micros = Decimal(0)
    for amount, unit in zip(match.groups()[1:], _UNITS, strict=True):
        if amount is not None:
            micros += Decimal(amount) * unit
    total = int(micros.to_integral_value())
    return timedelta(microseconds=-total if match.group(1) == "-" else total)


def _to_timedelta(value: Any) -> Any:
    if value is None or isinstance(value, timedelta):
        return value
    try:
        if isinstance(value, str):
            return parse_duration(value)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return timedelta(seconds=value)  # what other SQL may write: seconds
    except (ValueError, OverflowError):
        pass
    raise _BadValue(f"is {short(value)}, not an ISO 8601 duration or a number of seconds")


def _to_uuid(value: Any) -> Any:
    if value is None or isinstance(value, UUID):
        return value
    if isinstance(value, str):
        try:
            return UUID(value)
        except ValueError:
            pass
    raise _BadValue(f"is {short(value)}, not a UUID")


def _to_decimal(value: Any) -> Any:
    if value is None or isinstance(value, Decimal):
        return value
    if isinstance(value, str | int) and not isinstance(value, bool):
        try:
            return Decimal(value)
        except InvalidOperation:
            pass
    elif isinstance(value, float):
        return Decimal(repr(value))  # the float's shortest text, not its binary expansion
    raise _BadValue(f"is {short(value)}, not a decimal number")


SCALARS: dict[type, Converter] = {
    datetime: _to_datetime,
    date: _to_date,
    time: _to_time,
    timedelta: _to_timedelta,
    UUID: _to_uuid,
    Decimal: _to_decimal,
}
