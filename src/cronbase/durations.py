"""Durations in the Python API, one rule for every parameter: a ``timedelta``, or a number of
seconds (an int or a float), which becomes one. Anything else is a TypeError naming the parameter;
a number that is no duration (NaN, infinity, past timedelta's 999,999,999 days) or below the
parameter's least value is a ConfigurationError naming it.

>>> duration("poll_interval", 0.5, positive=True)
datetime.timedelta(microseconds=500000)
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

from .errors import ConfigurationError

DurationLike = timedelta | float  # what the public signatures say: an int is a float to mypy
_ZERO = timedelta(0)


def duration(
    what: str, value: object, *, positive: bool = False, signed: bool = False
) -> timedelta:
    """``value`` as a timedelta. It must be 0 or more, or more than 0 with ``positive``;
    ``signed`` leaves the range to the caller (whose message says more, as JobOptions.check)."""
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ConfigurationError(f"{what} must be a finite number of seconds, got {value!r}")
        try:
            delta = timedelta(seconds=value)
        except OverflowError:
            raise ConfigurationError(
                f"{what} must be at most 999,999,999 days (what a timedelta holds), got "
                f"{value!r} seconds"
            ) from None
    else:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise TypeError(
            f"{what} must be a timedelta or a number of seconds, got {shown} "
            f"({type(value).__name__})"
        )
    if not signed and (delta < _ZERO or (positive and delta == _ZERO)):
        least = "more than 0" if positive else "0 or more"
        raise ConfigurationError(
            f"{what} must be a duration of {least} (a timedelta or seconds), got {value!r}"
        )
    return delta


def optional_duration(
    what: str, value: object, *, positive: bool = False, signed: bool = False
) -> timedelta | None:
    """:func:`duration`, or None for None (a parameter whose None means "none", "never")."""
    return None if value is None else duration(what, value, positive=positive, signed=signed)


_TEXT = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$")
_TEXT_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_span(value: str) -> timedelta:
    """What an operator types for a duration (``30s``, ``5m``, ``2h``, ``7d``, ``1w``: the CLI's
    ``--older-than``, the dashboard's fields); ConfigurationError naming it otherwise."""
    match = _TEXT.match(value.strip())
    if not match:
        raise ConfigurationError(f"{value!r} is not a duration; use e.g. 30s, 5m, 2h, 7d or 1w")
    try:
        return timedelta(**{_TEXT_UNITS[match.group(2)]: float(match.group(1))})
    except OverflowError:
        raise ConfigurationError(
            f"{value!r} is longer than a duration can be (999,999,999 days)"
        ) from None


def duration_text(value: timedelta) -> str:
    """A duration as an operator types it, which parse_span reads back: ``7d``, ``12h``, ``90s``
    (never ``0:00:00``)."""
    seconds = value.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def span(seconds: float, *, minutes_from: float = 120, hours_from: float = 7200) -> str:
    """``45s``, ``12m``, ``3.5h``: seconds in one short unit, minutes from ``minutes_from``
    seconds on and hours from ``hours_from`` (what operators read in tables and messages)."""
    if seconds < minutes_from:
        return f"{seconds:.0f}s"
    if seconds < hours_from:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
