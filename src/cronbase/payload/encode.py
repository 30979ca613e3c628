"""Payloads at defer time: Python values -> the JSON text stored in jobs.payload.

JSON's own types go as they are (the fast path); ``datetime``, ``date``, ``time``, ``timedelta``,
``UUID``, ``Decimal``, ``Enum``, dataclasses and pydantic models are written as JSON that
``convert.py`` turns back into the handler's annotated types. Anything else is refused, naming
where it is: ``payload['items'][3]['when']``, and so is nesting deeper than ``MAX_JSON_DEPTH``
(the rule stored JSON is read by: stored.py). Times are ISO 8601, which has UTC offsets but no
zone names: a datetime in ``ZoneInfo("Europe/Berlin")`` comes back at the same instant with a
fixed offset (``+01:00``), and a ``time`` in such a zone, which has no offset, is refused.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
import sys
from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, cast
from uuid import UUID

from ..checks import DEFAULT_MAX_PAYLOAD_BYTES, MAX_JSON_DEPTH
from ..errors import CronbaseError, PayloadError, ResultError

# App(json_dumps=...): a payload that passed cronbase's checks, as JSON's own types -> JSON text
# (orjson.dumps returns bytes).
JSONDumps = Callable[[dict[str, Any]], str | bytes]
# App(json_loads=...): a claimed job's payload text -> its dict (json.loads, orjson.loads).
JSONLoads = Callable[[str], object]

_REPR_LIMIT = 60  # characters of a bad value shown in a message
_PATH_SHOWN = 8  # steps of a path a message shows whole; a longer one is cut in the middle
_TYPES = (
    "JSON values, datetime, date, time, timedelta, UUID, Decimal, Enum, dataclass, pydantic model"
)


def short(value: object) -> str:
    """``repr(value)``, cut to a length that fits a one-line message."""
    text = repr(value)
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."


class _BadValue(Exception):
    """A part of a payload that cannot be stored (here) or converted (converters.py); ``path``
    grows as the search unwinds. Private to payload.py, converters.py and convert.py: never
    raised out of them, where it becomes a PayloadError saying ``describe()``."""

    def __init__(self, why: str) -> None:
        self.why = why
        self.path: list[str] = []

    def at(self, where: str) -> _BadValue:
        self.path.append(where)
        return self

    def describe(self) -> str:
        steps = list(reversed(self.path))
        if len(steps) > _PATH_SHOWN:  # a path 100 levels deep would fill a screen
            steps = [*steps[:4], f"[…{len(steps) - 6} more…]", *steps[-2:]]
        return "payload" + "".join(steps) + " " + self.why


def _too_deep() -> _BadValue:
    return _BadValue(
        f"is nested deeper than {MAX_JSON_DEPTH} levels, the most cronbase stores; flatten it, "
        "or store the data elsewhere and pass its key"
    )


class _Rich(Exception):
    """The fast check met a value that is not JSON's own: the payload takes the long way."""


def _text_fault(text: str) -> str | None:
    if "\x00" in text:
        return "a NUL character (\\x00), which PostgreSQL cannot store"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "a lone surrogate, which is not valid UTF-8"
    return None


def _key_fault(key: object) -> str | None:
    if not isinstance(key, str):
        # json.dumps would write 1 as "1": the handler would get another payload.
        return f"has the key {short(key)}; JSON object keys are strings"
    fault = _text_fault(key)
    return f"has the key {short(key)}, which contains {fault}" if fault else None


# Values jsonb always holds as json.dumps writes them (exact types: subclasses take the long way).
_PLAIN = frozenset({int, bool, type(None)})


def _check_value(value: object, parents: tuple[int, ...] = ()) -> None:
    """Raise _BadValue where jsonb cannot hold ``value`` as json.dumps would write it, _Rich
    at the first value of another type (a datetime, a dataclass...)."""
    if isinstance(value, str):
        fault = _text_fault(value)
        if fault:
            raise _BadValue(f"contains {fault}: {short(value)}")
    elif value is None or isinstance(value, int):  # bool is an int
        pass
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise _BadValue(f"is {value!r}, which JSON cannot hold")
    elif isinstance(value, dict):
        if id(value) in parents:
            raise _BadValue("contains itself")
        if len(parents) >= MAX_JSON_DEPTH:  # the payload itself is level 1
            raise _too_deep()
        inner = (*parents, id(value))
        for key, item in value.items():
            if type(key) is str and key.isascii() and "\x00" not in key and type(item) in _PLAIN:
                continue  # the common case without a call: encode_payload({'n': 1}) 1.45 -> 1.33 us
            # Inline, not _key_fault(): one call less per str value on the fast path.
            if not isinstance(key, str):
                raise _BadValue(f"has the key {short(key)}; JSON object keys are strings")
            fault = _text_fault(key)
            if fault:
                raise _BadValue(f"has the key {short(key)}, which contains {fault}")
            try:
                _check_value(item, inner)
            except _BadValue as exc:
                exc.path.append(f"[{key!r}]")
                raise
    elif isinstance(value, list | tuple):
        if id(value) in parents:
            raise _BadValue("contains itself")
        if len(parents) >= MAX_JSON_DEPTH:
            raise _too_deep()
        inner = (*parents, id(value))
        for index, item in enumerate(value):
            if type(item) in _PLAIN:
                continue
            try:
                _check_value(item, inner)
            except _BadValue as exc:
                exc.path.append(f"[{index}]")
                raise
    else:
        # Not a _BadValue: nothing on the way up adds to a path that the long way rebuilds.
        raise _Rich


def to_plain(value: object, parents: tuple[int, ...] = ()) -> object:
    """``value`` as JSON's own types (the long way: a copy); _BadValue naming what cannot be."""
    if isinstance(value, str):
        fault = _text_fault(value)
        if fault:
            raise _BadValue(f"contains {fault}: {short(value)}")
        return value
    if value is None or isinstance(value, int):  # bool, IntEnum: json writes them as numbers
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _BadValue(f"is {value!r}, which JSON cannot hold")
        return value
    if isinstance(value, dict | list | tuple) or _is_dataclass(value):
        if id(value) in parents:
            raise _BadValue("contains itself")
        if len(parents) >= MAX_JSON_DEPTH:
            raise _too_deep()
        inner = (*parents, id(value))
        if isinstance(value, list | tuple):
            return [_step(item, inner, f"[{index}]") for index, item in enumerate(value)]
        items = value.items() if isinstance(value, dict) else _fields(value)
        plain: dict[str, object] = {}
        for key, item in items:
            fault = _key_fault(key)
            if fault:
                raise _BadValue(fault)
            plain[key] = _step(item, inner, f"[{key!r}]")
        return plain
    return _scalar(value, parents)


# An argument's parents in stored_form: the payload object, one level above it (kept alive, so
# that no value's id can be this one's).
_PAYLOAD = object()
_IN_PAYLOAD = (id(_PAYLOAD),)


def stored_form(task: str, name: str, value: object) -> object:
    """Argument ``name``'s value as :func:`encode_payload` will store it (JSON's own types), for a
    defer to check what the worker will get; PayloadError as encode_payload would raise it."""
    try:
        return to_plain(value, _IN_PAYLOAD)
    except _BadValue as exc:
        raise _unstorable(task, exc.at(f"[{name!r}]")) from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise _unstorable(task, exc) from None


def _step(value: object, parents: tuple[int, ...], where: str) -> object:
    try:
        return to_plain(value, parents)
    except _BadValue as exc:
        exc.path.append(where)
        raise


def _is_dataclass(value: object) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _fields(value: Any) -> list[tuple[str, object]]:
    # Every field, as dataclasses.asdict writes it; the decoder gives back the init=True ones.
    return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]


def _scalar(value: object, parents: tuple[int, ...]) -> object:
    if isinstance(value, datetime):  # before date: a datetime is a date
        if value.utcoffset() is None:
            # A naive time means another moment on a worker in another zone: refuse, as run_at does.
            raise _BadValue(
                f"is {short(value)}, a naive datetime; give it a time zone "
                "(datetime.now(UTC), .replace(tzinfo=UTC))"
            )
        return value.isoformat()
    if isinstance(value, time) and value.tzinfo is not None and value.utcoffset() is None:
        # isoformat() would drop the zone without a word: the handler would get a naive time.
        raise _BadValue(
            f"is {short(value)}, a time in a zone with no fixed offset (it depends on the "
            "date); pass a datetime, or a time with a fixed-offset timezone "
            "(timezone(timedelta(hours=1)))"
        )
    if isinstance(value, date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, UUID | Decimal):
        return str(value)  # Decimal's str is exact
    if isinstance(value, enum.Enum):
        try:
            return to_plain(value.value, parents)
        except _BadValue as exc:  # name the member: the value alone is hard to trace back
            inner = "".join(reversed(exc.path))
            raise _BadValue(f"is {short(value)}, whose value{inner} {exc.why}") from None
    pydantic = sys.modules.get("pydantic")  # never imported here: a model means it is loaded
    if pydantic is not None and isinstance(value, pydantic.BaseModel):
        try:
            dumped = value.model_dump(mode="json")
        except Exception as exc:  # PydanticSerializationError: a field pydantic cannot write
            raise _BadValue(
                f"is a {type(value).__name__} that pydantic cannot dump: {exc}"
            ) from None
        return to_plain(dumped, parents)
    raise _BadValue(
        f"is {short(value)} ({type(value).__name__}), which JSON cannot hold; pass {_TYPES}"
    )


def format_duration(delta: timedelta) -> str:
    """ISO 8601 duration, as pydantic writes one but in days (no years): ``P1DT2H3M4.5S``."""
    micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    sign = "-" if micros < 0 else ""
    days, rest = divmod(abs(micros), 86_400_000_000)
    hours, rest = divmod(rest, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    seconds, fraction = divmod(rest, 1_000_000)
    clock = (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    if fraction:
        clock += f"{seconds}.{fraction:06d}".rstrip("0") + "S"
    elif seconds:
        clock += f"{seconds}S"
    if not days and not clock:
        return "PT0S"
    return f"{sign}P{f'{days}D' if days else ''}{'T' + clock if clock else ''}"


# check_circular off: _check_value has already refused cycles (and all but JSON's own types),
# and the encoder's own bookkeeping cost ~0.2 us of ~1.8 per payload.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), check_circular=False)
# \u0000 escaped (an odd run of backslashes before it): jsonb refuses it in text.
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


# What a value that cannot be stored as JSON raises: the checks' _BadValue, or the encoder's own.
_UNENCODABLE = (_BadValue, TypeError, ValueError, RecursionError)


def _encoded(value: object) -> str:
    """JSON text by the built-in encoder, of the plain copy when ``value`` holds richer types;
    one of _UNENCODABLE when it cannot be."""
    try:
        _check_value(value)
        return _ENCODER.encode(value)
    except _Rich:
        return _ENCODER.encode(to_plain(value))


def encode_payload(
    task: str,
    payload: dict[str, Any],
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    dumps: JSONDumps | None = None,
) -> str:
    """JSON text of a payload; refuses what jsonb cannot hold, or more than ``max_bytes`` of it,
    naming the task and the value. ``dumps``: App(json_dumps=...), else the built-in encoder;
    either way the same checks run first, and ``dumps`` gets the payload as JSON's own types
    (itself when it holds nothing else, else the copy the built-in encoder would write)."""
    if not isinstance(payload, dict):
        raise PayloadError(
            f"payload for task {task!r} must be a JSON object (a dict of the handler's "
            f"arguments), got {short(payload)}"
        )
    if dumps is None:
        try:
            text = _encoded(payload)
        except _UNENCODABLE as exc:
            raise _unstorable(task, exc) from None
    else:
        try:
            try:
                _check_value(payload)
            except _Rich:
                payload = cast("dict[str, Any]", to_plain(payload))
        except _UNENCODABLE as exc:
            raise _unstorable(task, exc) from None
        text = _dump_with(dumps, task, payload)
    # Characters first: a byte count only when the text could be over (UTF-8: 4 at most).
    if len(text) * 4 > max_bytes and len(size := text.encode()) > max_bytes:
        raise PayloadError(
            f"payload for task {task!r} is {len(size):,} bytes of JSON, more than the "
            f"{max_bytes:,} allowed (App(max_payload_bytes=...)); store large data elsewhere "
            "and pass its key"
        )
    return text


def encode_result(job_id: int, task: str, value: object, max_bytes: int) -> str:
    """JSON text of a handler's return value (the types a payload may hold); ResultError naming
    the job, the task and what is wrong when it cannot be stored or is over ``max_bytes``."""
    return encode_value(
        f"job {job_id} (task {task!r}): its result",
        value,
        max_bytes,
        ResultError,
        "(App(max_result_bytes=...)); store large data elsewhere and return its key",
    )


def encode_value(
    prefix: str, value: object, max_bytes: int, error: type[CronbaseError], hint: str
) -> str:
    """JSON text of any value a payload may hold; ``error`` starting with ``prefix`` when it
    cannot be stored or is over ``max_bytes`` (``hint`` says what to do then)."""
    try:
        text = _encoded(value)
    except _UNENCODABLE as exc:
        why = (
            exc.describe().removeprefix("payload").lstrip()
            if isinstance(exc, _BadValue)
            else f"{type(exc).__name__}: {exc}"
        )
        raise error(f"{prefix} cannot be stored as JSON: {short(value)}: {why}") from None
    if len(text) * 4 > max_bytes and (size := len(text.encode())) > max_bytes:
        raise error(
            f"{prefix} is {size:,} bytes of JSON, more than the {max_bytes:,} allowed {hint}"
        )
    return text


def _unstorable(task: str, exc: Exception) -> PayloadError:
    # TypeError, ValueError, RecursionError: an int too long, nesting too deep.
    why = exc.describe() if isinstance(exc, _BadValue) else f"{type(exc).__name__}: {exc}"
    return PayloadError(f"payload for task {task!r} cannot be stored as JSON: {why}")


def _dump_with(dumps: JSONDumps, task: str, payload: dict[str, Any]) -> str:
    """The user's json_dumps output, checked for what jsonb would refuse (or misread)."""
    prefix = f"payload for task {task!r} cannot be stored as JSON"
    try:
        out = dumps(payload)
    except Exception as exc:  # the payload passed cronbase's checks: a limit of the encoder's
        raise PayloadError(f"{prefix}: json_dumps raised {type(exc).__name__}: {exc}") from None
    if isinstance(out, bytes | bytearray | memoryview):
        try:
            text = bytes(out).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PayloadError(
                f"{prefix}: json_dumps wrote bytes that are not UTF-8 ({exc})"
            ) from None
    elif isinstance(out, str):
        text = out
    else:
        raise PayloadError(
            f"{prefix}: json_dumps must return str or bytes, got {type(out).__name__} {short(out)}"
        )
    if not text.lstrip(" \t\r\n").startswith("{"):
        raise PayloadError(f"{prefix}: json_dumps wrote {short(text)}, not a JSON object")
    # The payload's strings hold no NUL (checked above): only the encoder can have written one.
    if "\x00" in text or ("\\u0000" in text and _ESCAPED_NUL.search(text)):
        raise PayloadError(f"{prefix}: json_dumps wrote \\u0000, which PostgreSQL cannot store")
    return text
