"""The backend's ``OPTIONS``: cronbase's task options that Django's ``@task`` does not define
(retries and backoff, lease, timeout, limits, unique windows, cron), for every task of the backend
and per task, read and checked once.

    TASKS = {"default": {
        "BACKEND": "cronbase.contrib.django.tasks.CronbaseBackend",
        "OPTIONS": {
            "max_attempts": 5,                                 # every task of this backend
            "tasks": {
                "shop.tasks.charge": {"max_attempts": 10, "retry": Backoff(base=timedelta(seconds=30))},
                "shop.tasks.nightly_report": {"cron": "0 2 * * *", "tz": "Europe/Berlin"},
            },
        },
    }}

Per-task entries are keyed by the task's ``module_path`` and win over the backend's. Names are
``@app.task``'s own, so its documentation applies word for word.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from ...retry import Backoff

# @app.task's keywords that a Django task may set (queue and priority come from Django's own).
TASK_OPTIONS: dict[str, str] = {
    "max_attempts": "a whole number of at least 1, e.g. 5",
    "retry": "a cronbase.Backoff, e.g. Backoff(base=timedelta(seconds=10))",
    "lease": "a timedelta, e.g. timedelta(minutes=2)",
    "timeout": "a timedelta, e.g. timedelta(minutes=30)",
    "global_concurrency": "a whole number, e.g. 3",
    "concurrency_key": 'a template over the kwargs, e.g. "tenant:{tenant_id}"',
    "key_concurrency": "a whole number, e.g. 1",
    "rate_limit": 'e.g. "100/minute"',
    "retry_on": "a tuple of exception classes or their dotted paths",
    "dont_retry_on": "a tuple of exception classes or their dotted paths",
    "max_snoozes": "a whole number, e.g. 10",
    "unique_for": "a timedelta, e.g. timedelta(hours=1)",
    "unique_key": 'a template over the kwargs, e.g. "{account_id}"',
}
# Per task only: a schedule (app.periodic's keywords; args/kwargs are the task's arguments).
SCHEDULE_OPTIONS: dict[str, str] = {
    "cron": 'a cron expression, e.g. "0 2 * * *"',
    "tz": 'an IANA time zone, e.g. "Europe/Berlin" (default UTC)',
    "schedule_key": "the schedule's key (default: the task's module path)",
    "catch_up": '"latest", "all" or "none"',
    "args": "the positional arguments each scheduled run gets (a list)",
    "kwargs": "the keyword arguments each scheduled run gets (a dict)",
}
PER_TASK = "tasks"


@dataclass(frozen=True)
class Schedule:
    """A cron schedule of one task, from its ``cron`` option."""

    cron: str
    tz: str = "UTC"
    key: str | None = None
    catch_up: str = "latest"
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BackendOptions:
    """OPTIONS, checked: the backend's task options and each task's own."""

    defaults: dict[str, Any]
    per_task: dict[str, dict[str, Any]]

    def for_task(self, module_path: str) -> tuple[dict[str, Any], Schedule | None]:
        """@app.task's keywords for this task, and its schedule if it has one."""
        own = dict(self.per_task.get(module_path, {}))
        schedule = None
        if "cron" in own:
            schedule = Schedule(
                cron=own.pop("cron"),
                tz=own.pop("tz", "UTC"),
                key=own.pop("schedule_key", None),
                catch_up=own.pop("catch_up", "latest"),
                args=list(own.pop("args", [])),
                kwargs=dict(own.pop("kwargs", {})),
            )
        return {**self.defaults, **own}, schedule


def _refuse(where: str, message: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{where}: {message}")


def _exceptions(where: str, name: str, value: Any) -> tuple[type[BaseException], ...]:
    items = value if isinstance(value, tuple | list) else (value,)
    found: list[type[BaseException]] = []
    for item in items:
        if isinstance(item, str):
            try:
                item = import_string(item)
            except ImportError as exc:
                raise _refuse(where, f"{name}: cannot import {item!r} ({exc})") from None
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise _refuse(where, f"{name} must hold exception classes, got {item!r}")
        found.append(item)
    return tuple(found)


def _task_options(where: str, given: Mapping[str, Any], *, per_task: bool) -> dict[str, Any]:
    if not isinstance(given, Mapping):
        raise _refuse(where, f"must be a dict of options, got {given!r}")
    known = {**TASK_OPTIONS, **(SCHEDULE_OPTIONS if per_task else {})}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise _refuse(
            where,
            f"unknown option {', '.join(map(repr, unknown))}; known: {', '.join(known)}"
            + ("" if per_task else f", and {PER_TASK!r} for options per task"),
        )
    options = dict(given)
    for name in ("retry_on", "dont_retry_on"):
        if options.get(name) is not None:
            options[name] = _exceptions(where, name, options[name])
    for name in ("lease", "timeout", "unique_for"):
        if options.get(name) is not None and not isinstance(options[name], timedelta):
            raise _refuse(where, f"{name} must be {TASK_OPTIONS[name]}, got {options[name]!r}")
    if options.get("retry") is not None and not isinstance(options["retry"], Backoff):
        raise _refuse(where, f"retry must be {TASK_OPTIONS['retry']}, got {options['retry']!r}")
    if per_task:
        schedule_only = sorted(set(options) & (set(SCHEDULE_OPTIONS) - {"cron"}))
        if schedule_only and "cron" not in options:
            raise _refuse(where, f"{', '.join(schedule_only)} without 'cron'")
        if "cron" in options and not isinstance(options["cron"], str):
            raise _refuse(
                where, f"cron must be {SCHEDULE_OPTIONS['cron']}, got {options['cron']!r}"
            )
    return options


def read_options(alias: str, options: Mapping[str, Any]) -> BackendOptions:
    """``TASKS[alias]["OPTIONS"]``, checked; ImproperlyConfigured names the bad key or value."""
    where = f"TASKS[{alias!r}]['OPTIONS']"
    if not isinstance(options, Mapping):
        raise _refuse(where, f"must be a dict, got {options!r}")
    defaults = {k: v for k, v in options.items() if k != PER_TASK}
    checked = _task_options(where, defaults, per_task=False)
    per_task_given = options.get(PER_TASK, {})
    if not isinstance(per_task_given, Mapping):
        raise _refuse(
            where,
            f"{PER_TASK!r} must map task module paths to options, e.g. "
            f'{{"shop.tasks.charge": {{"max_attempts": 10}}}}, got {per_task_given!r}',
        )
    per_task = {
        str(path): _task_options(f"{where}[{PER_TASK!r}][{path!r}]", given, per_task=True)
        for path, given in per_task_given.items()
    }
    return BackendOptions(defaults=checked, per_task=per_task)
