"""The converters a handler's arguments may need: JSON value -> datetime, Decimal, Enum, a list
of them, a pydantic model..., and the checks of JSON's own types (an ``int`` is an int, not
``"12"``, ``True`` or ``1.0``). Each returns what the handler gets (the value itself for a check)
or raises payload.py's ``_BadValue`` with the path to what does not fit (convert.py, which picks
them, turns it into a PayloadError). Each passes None as it is, whatever the annotation: JSON's
null is what a workflow's dead parent gives, and what an argument defaulting to None is sent as.
A ``date`` takes a datetime only at midnight, as pydantic.

They run on the payload as it is stored (JSON's own types): on the worker before the handler,
and on the stored form of each value at defer time, so a value is refused at defer exactly when
it would not convert at run time.
"""

from __future__ import annotations

import contextlib
import enum
import json
import re
from collections.abc import Callable, Collection
from datetime import date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

from .encode import _BadValue, short, to_plain

Converter = Callable[[Any], Any]
NONE = type(None)


# -- JSON's own types: checked, never converted --------------------------------------------------


def _of_type(kinds: type | tuple[type, ...], what: str, *, bool_too: bool = True) -> Converter:
    """The check of one of JSON's own types: the value itself when it is one (or None)."""

    def check(value: Any) -> Any:
        if value is None or (isinstance(value, kinds) and (bool_too or type(value) is not bool)):
            return value
        raise _BadValue(f"is {short(value)}, not {what}")

    return check


# A bool is an int to Python, never to JSON. An int is a float's value too (JSON writes 2.0 as 2
# in some encoders).
_int = _of_type(int, "an int", bool_too=False)
_float = _of_type((int, float), "a number", bool_too=False)
_str = _of_type(str, "a string")
_bool = _of_type(bool, "a bool (true or false)")
_list = _of_type((list, tuple), "a list")
_dict = _of_type(dict, "an object")


def _none(value: Any) -> Any:
    if value is None:
        return value
    raise _BadValue(f"is {short(value)}, not None (null)")


# The checks of JSON's own types, and the exact types each passes without a call (convert.py's
# fast path: ``type(value) in passes``).
CHECKS: dict[object, tuple[Converter, frozenset[type]]] = {
    int: (_int, frozenset({int, NONE})),
    float: (_float, frozenset({int, float, NONE})),
    str: (_str, frozenset({str, NONE})),
    bool: (_bool, frozenset({bool, NONE})),
    NONE: (_none, frozenset({NONE})),
    None: (_none, frozenset({NONE})),
    list: (_list, frozenset({list, NONE})),
    dict: (_dict, frozenset({dict, NONE})),
}


def literal(values: tuple[Any, ...]) -> Converter:
    """``Literal["a", "b", 1]``: one of the values, of the same JSON type (``True`` is not 1)."""
    allowed = frozenset((type(v), v) for v in values)
    shown = ", ".join(short(v) for v in values)

    def convert(value: Any) -> Any:
        if value is None:
            return value
        with contextlib.suppress(TypeError):  # an unhashable value is none of them
            if (type(value), value) in allowed:
                return value
        raise _BadValue(f"is {short(value)}, not one of {shown}")

    return convert


def first_of(members: list[Converter], names: str) -> Converter:
    """A union's: what the first member that takes the value makes of it (convert.py orders them:
    JSON's own types first, so ``str | date`` keeps a string a string)."""

    def convert(value: Any) -> Any:
        if value is None:
            return value
        for attempt in members:
            try:
                return attempt(value)
            except _BadValue:
                continue
        raise _BadValue(f"is {short(value)}, which is none of {names}")

    return convert


def sequence(item: Converter, passes: Collection[type] = ()) -> Converter:
    """``list[X]`` and ``Sequence[X]``: a list of ``item``'s results. Elements of an exact type in
    ``passes`` are kept without a call; a list of nothing else is returned as it is."""

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, list | tuple):
            raise _BadValue(f"is {short(value)}, not a list")
        if passes and all(type(element) in passes for element in value):
            return value if isinstance(value, list) else list(value)
        out = []
        for index, element in enumerate(value):
            try:
                out.append(element if type(element) in passes else item(element))
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


def mapping(item: Converter, passes: Collection[type] = ()) -> Converter:
    """``dict[str, X]`` and ``Mapping[str, X]``: each value converted (those of an exact type in
    ``passes`` kept without a call); keys stay strings, as JSON writes them."""

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise _BadValue(f"is {short(value)}, not an object")
        if passes and all(type(element) in passes for element in value.values()):
            return value
        out = {}
        for key, element in value.items():
            try:
                out[key] = element if type(element) in passes else item(element)
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
# Python values of these exact types are stored as text their scalar's converter always reads
# back (a round trip tests/unit/test_payload_types.py checks): a defer takes them as they are.
KEPT: dict[type, frozenset[type]] = {
    date: frozenset({date, NONE}),
    UUID: frozenset({UUID, NONE}),
    Decimal: frozenset({Decimal, NONE}),
    timedelta: frozenset({timedelta, NONE}),
}
