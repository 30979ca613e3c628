"""Flow control as declared in code: a task's limits, its rate, and the scope a job claims in.

A limited job carries one scope in ``jobs.flow_key``, chosen at defer: ``key:<task>|<key>`` when
the task has a ``concurrency_key`` (the template rendered over the payload, or the key given to
``configure``), else ``task:<task>`` when the task has a ``global_concurrency`` or a
``rate_limit``; ``fair:<queue>|<key>`` when the task has a ``fair_key`` (fair share between keys,
``db/sql/fair.sql``). The limits themselves are read at claim time from ``flow_limits`` (each worker
writes its tasks' limits there when it starts) and from ``queues`` (operators' queue limits), so
the claim, not the defer, decides; see ``db/sql/flow.sql``.
"""

from __future__ import annotations

import math
import re
import string
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .checks import check_key
from .durations import DurationLike, duration, duration_text
from .errors import ConfigurationError, PayloadError

_INT4_MAX = 2**31 - 1
# Each rate-limited claim rewrites its scope's start log (8 bytes a start): cheap up to a few
# thousand starts per window.
MAX_RATE = 10_000
_PAST_ANY_PERIOD = 367 * 86400  # seconds: longer than any period a rate may have
_UNITS = {
    "s": 1, "sec": 1, "second": 1,
    "m": 60, "min": 60, "minute": 60,
    "h": 3600, "hour": 3600,
    "d": 86400, "day": 86400,
}  # fmt: skip
_RATE = re.compile(r"\s*(\d+)\s*/\s*(\d+)?\s*([a-z]+?)s?\s*")


@dataclass(frozen=True, init=False)
class Rate:
    """At most ``n`` starts in any window of ``period`` (a timedelta, or seconds)."""

    n: int
    period: timedelta

    def __init__(self, n: int, period: DurationLike) -> None:
        # Frozen: set once, here; the range is parse_rate's to check, naming the option.
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "period", duration("Rate period", period, signed=True))

    def __str__(self) -> str:
        seconds = int(self.period.total_seconds())
        for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
            if seconds % size == 0:
                count = seconds // size
                return f"{self.n}/{unit}" if count == 1 else f"{self.n}/{count} {unit}s"
        return f"{self.n}/second" if seconds == 1 else f"{self.n}/{seconds} seconds"


@dataclass(frozen=True)
class Aging:
    """Priority aging of a queue: ``step`` priority gained for each ``every`` a job waits."""

    every: timedelta
    step: int

    def __str__(self) -> str:
        return f"{self.step} every {duration_text(self.every)}"


def parse_rate(value: object, what: str = "rate_limit") -> Rate:
    """``"100/minute"``, ``"5/second"``, ``"1000/hour"``, ``"10/30 seconds"``, ``"2/day"`` (or a
    :class:`Rate`); ConfigurationError naming the value otherwise."""
    if isinstance(value, Rate):
        rate = value
    else:
        match = _RATE.fullmatch(value.lower()) if isinstance(value, str) else None
        unit = _UNITS.get(match[3]) if match else None
        if match is None or unit is None:
            raise ConfigurationError(
                f"{what} {value!r} is not a rate: write N/unit, such as '100/minute', "
                "'5/second', '1000/hour' or '10/30 seconds'"
            )
        # Seconds, not a timedelta yet: a period past what one holds is refused below.
        rate = Rate(int(match[1]), min(unit * int(match[2] or 1), _PAST_ANY_PERIOD))
    if not 1 <= rate.n <= MAX_RATE:
        raise ConfigurationError(f"{what} {value!r}: the count must be from 1 to {MAX_RATE}")
    if rate.period <= timedelta(0) or rate.period > timedelta(days=366):
        raise ConfigurationError(
            f"{what} {value!r}: the period is out of range; it must be from 1 second to 366 days"
        )
    return rate


def check_limit(what: str, value: object) -> int:
    """A concurrency limit: an int from 1 (0 would hold every job back for good)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= _INT4_MAX:
        raise ConfigurationError(f"{what} must be a whole number of at least 1, got {value!r}")
    return value


def check_template(template: str, what: str = "concurrency_key") -> tuple[str, ...]:
    """The payload fields a key template names; ConfigurationError naming a bad template."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigurationError(f"{what} {template!r} is not a template: {exc}") from None
    fields = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            raise ConfigurationError(
                f"{what} {template!r}: {{{name}}} must name a payload field, as in "
                "'tenant:{tenant_id}' (no indexing, format spec or conversion)"
            )
        fields.append(name)
    return tuple(fields)


@dataclass(frozen=True)
class TaskFlow:
    """A task's declared limits (``@app.task`` options); None where not set."""

    task: str
    global_concurrency: int | None = None
    concurrency_key: str | None = None
    key_concurrency: int | None = None
    rate: Rate | None = None

    @staticmethod
    def build(
        task: str,
        *,
        global_concurrency: int | None,
        concurrency_key: str | None,
        key_concurrency: int | None,
        rate_limit: str | Rate | None,
    ) -> TaskFlow | None:
        """The task's flow, checked (one-line errors naming the bad value); None when it has no
        limit, so its jobs take the plain claim."""
        if global_concurrency is not None:
            check_limit("global_concurrency", global_concurrency)
        if key_concurrency is not None:
            check_limit("key_concurrency", key_concurrency)
            if concurrency_key is None:
                raise ConfigurationError(
                    f"task {task!r}: key_concurrency={key_concurrency} needs a concurrency_key "
                    "template, such as concurrency_key='tenant:{tenant_id}'"
                )
        if concurrency_key is not None:
            if not isinstance(concurrency_key, str) or not concurrency_key:
                raise ConfigurationError(
                    f"concurrency_key must be a template string, got {concurrency_key!r}"
                )
            check_template(concurrency_key)
        rate = None if rate_limit is None else parse_rate(rate_limit)
        if concurrency_key is not None and key_concurrency is None and rate is None:
            raise ConfigurationError(
                f"task {task!r}: concurrency_key {concurrency_key!r} needs key_concurrency or "
                "rate_limit (what to limit per key)"
            )
        if global_concurrency is None and concurrency_key is None and rate is None:
            return None
        return TaskFlow(task, global_concurrency, concurrency_key, key_concurrency, rate)

    def scope(self, payload: Any, key: str | None = None) -> str:
        """The job's flow_key: its concurrency key's scope (``key``, given to configure, or the
        template rendered over ``payload``), else the task's."""
        if key is None and self.concurrency_key is not None:
            key = render_key(self.task, self.concurrency_key, payload)
        if key is not None:
            return f"key:{self.task}|{check_key('concurrency_key', key)}"
        return f"task:{self.task}"

    def limits_row(self) -> dict[str, Any]:
        """The task's row of flow_limits (register_task_limits)."""
        per_key = self.concurrency_key is not None
        rate = self.rate
        return {
            "scope": f"task:{self.task}",
            "max_running": self.global_concurrency,
            "rate_n": rate.n if rate is not None and not per_key else None,
            "rate_period": rate.period if rate is not None and not per_key else None,
            "key_max_running": self.key_concurrency,
            "key_rate_n": rate.n if rate is not None and per_key else None,
            "key_rate_period": rate.period if rate is not None and per_key else None,
        }


def render_key(task: str, template: str, payload: Any, what: str = "concurrency_key") -> str:
    """``template`` with each ``{field}`` replaced by the payload's value; PayloadError naming
    the missing field (nothing is written)."""
    if not isinstance(payload, dict):
        raise PayloadError(f"task {task!r}: {what} {template!r} needs a JSON object payload")
    try:
        return template.format_map(payload)
    except KeyError as exc:
        raise PayloadError(
            f"task {task!r}: {what} {template!r} names {exc.args[0]!r}, which the "
            f"payload does not have (it has {', '.join(map(repr, payload)) or 'no fields'})"
        ) from None


# The largest weight a key may have: shares stay well within a float's precision.
MAX_WEIGHT = 1_000_000


def fair_scope(queue: str, key: str) -> str:
    """The flow_key (and fair_keys.scope) of a fair job of ``queue`` with fair key ``key``."""
    return f"fair:{queue}|{check_key('fair_key', key)}"


def check_fair_key(task: str, fair_key: object, flow: TaskFlow | None) -> str | None:
    """A task's fair_key template, checked; ConfigurationError naming a bad one."""
    if fair_key is None:
        return None
    if not isinstance(fair_key, str) or not fair_key:
        raise ConfigurationError(f"fair_key must be a template string, got {fair_key!r}")
    check_template(fair_key, "fair_key")
    if flow is not None:
        raise ConfigurationError(
            f"task {task!r}: fair_key {fair_key!r} cannot be combined with global_concurrency, "
            "concurrency_key or rate_limit (a job is claimed by one of the two claims)"
        )
    return fair_key


def check_weight(value: object, what: str = "weight") -> float:
    """A fair key's weight: a finite number above 0 (1 is the default share)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{what} must be a number above 0, got {value!r}")
    weight = float(value)
    if not math.isfinite(weight) or not 0 < weight <= MAX_WEIGHT:
        raise ConfigurationError(
            f"{what} must be a number above 0 and at most {MAX_WEIGHT:,}, got {value!r}"
        )
    return weight
