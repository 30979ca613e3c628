"""``crontab`` and ``beat_schedule`` as cronbase schedules: each entry is declared as an
``@app.periodic`` schedule is (upserted when a worker or a tick starts), one job per slot.

A crontab reads as a cron expression in ``conf.timezone``; an interval (a timedelta, or seconds)
becomes the cron expression of the same period, aligned to the clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError, ScheduleError
from ...schedule.cron import Cron
from ...schedule.scheduler import ScheduleSpec
from .arguments import bind
from .settings import warn

if TYPE_CHECKING:
    from .app import Celery

_DAY_NAMES = {
    "sunday": "sun", "monday": "mon", "tuesday": "tue", "wednesday": "wed",
    "thursday": "thu", "friday": "fri", "saturday": "sat",
}  # fmt: skip
_ENTRY_KEYS = frozenset({"task", "schedule", "args", "kwargs", "options", "relative"})


def _field(name: str, value: object) -> str:
    """A crontab field as cron text: ``"*/15"``, ``3``, ``[1, 3]``, ``"mon-fri"``."""
    if isinstance(value, bool):
        raise ScheduleError(f"crontab {name}={value!r}: give a number, text or a list of numbers")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        text = value.strip().lower()
        for full, short in _DAY_NAMES.items():
            text = text.replace(full, short)
        return text.replace(" ", "")
    if isinstance(value, Iterable):
        return ",".join(_field(name, v) for v in value)
    raise ScheduleError(f"crontab {name}={value!r}: give a number, text or a list of numbers")


class crontab:  # Celery's name
    """A cron schedule as Celery's: ``crontab(minute=0, hour="*/3", day_of_week="mon-fri")``.

    Read in the app's ``timezone``. A schedule restricting both ``day_of_week`` and
    ``day_of_month`` is refused: Celery fires on days matching both, cron on days matching either.
    """

    def __init__(
        self,
        minute: object = "*",
        hour: object = "*",
        day_of_week: object = "*",
        day_of_month: object = "*",
        month_of_year: object = "*",
        **options: Any,
    ) -> None:
        if options:
            raise ScheduleError(
                f"crontab({', '.join(sorted(options))}=...) is not supported: cronbase reads "
                "the time from the database clock, in the app's timezone"
            )
        self.minute = _field("minute", minute)
        self.hour = _field("hour", hour)
        self.day_of_week = _field("day_of_week", day_of_week)
        self.day_of_month = _field("day_of_month", day_of_month)
        self.month_of_year = _field("month_of_year", month_of_year)
        if self.day_of_week != "*" and self.day_of_month != "*":
            raise ScheduleError(
                f"crontab(day_of_week={day_of_week!r}, day_of_month={day_of_month!r}): Celery "
                "fires on days that match both, cron (cronbase) on days that match either; "
                "restrict one and check the other in the task"
            )
        Cron.parse(self.cron, "UTC")  # refused now, naming the expression, if cron cannot read it

    @classmethod
    def from_string(cls, expression: str) -> crontab:
        """``crontab.from_string("0 4 * * *")``: minute, hour, day of month, month, day of week."""
        minute, hour, day_of_month, month_of_year, day_of_week = expression.split(" ")
        return cls(minute, hour, day_of_week, day_of_month, month_of_year)

    @property
    def cron(self) -> str:
        """The cron expression: ``minute hour day_of_month month_of_year day_of_week``."""
        fields = (self.minute, self.hour, self.day_of_month, self.month_of_year, self.day_of_week)
        return " ".join(fields)

    def __repr__(self) -> str:
        return f"<crontab: {self.cron}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, crontab) and other.cron == self.cron

    def __hash__(self) -> int:
        return hash(self.cron)


def interval_cron(entry: str, every: timedelta | float) -> str:
    """The cron expression firing every ``every`` (a timedelta or seconds) at clock-aligned
    slots; refused when no cron expression has that period."""
    seconds = every.total_seconds() if isinstance(every, timedelta) else float(every)
    whole = int(seconds)
    if seconds != whole or whole < 1:
        raise ScheduleError(
            f"beat_schedule {entry!r}: every {seconds!r}s has no cron expression; give whole "
            "seconds dividing a minute, minutes dividing an hour, hours dividing a day, or a crontab"
        )
    if whole < 60 and 60 % whole == 0:
        return f"*/{whole} * * * * *" if whole > 1 else "* * * * * *"
    if whole % 60 == 0 and whole < 3600 and 60 % (whole // 60) == 0:
        return f"0 */{whole // 60} * * * *"
    if whole % 3600 == 0 and whole < 86400 and 24 % (whole // 3600) == 0:
        return f"0 0 */{whole // 3600} * * *"
    if whole == 86400:
        return "0 0 0 * * *"
    raise ScheduleError(
        f"beat_schedule {entry!r}: every {whole}s has no cron expression (cronbase's schedules "
        "are cron); give seconds dividing a minute, minutes dividing an hour, hours dividing a "
        "day, a day, or a crontab"
    )


def schedule_specs(app: Celery) -> dict[str, ScheduleSpec]:
    """``conf.beat_schedule`` as cronbase schedules, by entry name (the schedule's key)."""
    beat = app.conf.get("beat_schedule") or {}
    if not isinstance(beat, Mapping):
        raise ConfigurationError(f"beat_schedule must be a dict of entries, got {beat!r}")
    return {key: _spec(app, key, entry) for key, entry in beat.items()}


def _spec(app: Celery, key: str, entry: object) -> ScheduleSpec:
    if not isinstance(entry, Mapping):
        raise ConfigurationError(f"beat_schedule {key!r} must be a dict, got {entry!r}")
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown or entry.get("relative"):
        bad = unknown[0] if unknown else "relative"
        raise ConfigurationError(
            f"beat_schedule {key!r}: {bad!r} is not supported (an entry takes task, schedule, "
            "args, kwargs, options)"
        )
    name = entry.get("task")
    task = app.tasks.get(name) if isinstance(name, str) else None
    if task is None:
        raise ConfigurationError(
            f"beat_schedule {key!r}: no task {name!r}; registered: {', '.join(sorted(app.tasks))}"
        )
    when = entry.get("schedule")
    if isinstance(when, crontab):
        cron = when.cron
    elif isinstance(when, timedelta | int | float) and not isinstance(when, bool):
        cron = interval_cron(key, when)
        if (key, cron) not in app.beat_warned:  # once per entry, not at every finalize
            app.beat_warned.add((key, cron))
            warn(
                f"beat_schedule {key!r}: every {when!r} fires at clock-aligned slots (cron "
                f"{cron!r}), not counted from when beat started",
                stacklevel=5,
            )
    else:
        raise ConfigurationError(
            f"beat_schedule {key!r}: schedule {when!r} is not supported; give a crontab from "
            "cronbase.contrib.celery, a timedelta or a number of seconds"
        )
    options = dict(entry.get("options") or {})
    queue = options.pop("queue", None)
    if options:
        raise ConfigurationError(
            f"beat_schedule {key!r}: option {sorted(options)[0]!r} is not supported for a "
            "schedule (its jobs take the task's options; queue may be given)"
        )
    payload = bind(
        task.name, task.handler_signature, entry.get("args") or (), entry.get("kwargs") or {}
    )
    return ScheduleSpec.build(
        task.cronbase_task,
        cron=cron,
        tz=app.conf.timezone_name(),
        key=key,
        payload=payload,
        queue=task.queue_for(queue),
        source="code",
    )
