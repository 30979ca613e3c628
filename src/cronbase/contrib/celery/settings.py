"""``app.conf``: Celery's settings that cronbase honours, and a warning for every other one set.

Settings are set as in Celery (``app.conf.update(...)``, ``app.conf.beat_schedule = {...}``,
``app.config_from_object(...)``); what each known one becomes is in :mod:`.compatibility`.
"""

from __future__ import annotations

import fnmatch
import functools
import re
import warnings
from collections.abc import Mapping
from typing import Any

from ...errors import ConfigurationError
from .exceptions import CeleryCompatibilityWarning

# Settings cronbase reads, with Celery's defaults.
DEFAULTS: dict[str, Any] = {
    "beat_schedule": {},
    "task_default_queue": "celery",
    "task_routes": None,
    "timezone": None,  # None: UTC, as Celery's default with enable_utc
    "enable_utc": True,
    "imports": (),
    "include": (),
    "task_acks_late": False,
    "task_track_started": False,
    "task_serializer": "json",
    "result_serializer": "json",
    "accept_content": ("json",),
}
# Settings that mean nothing without a broker or a result backend: the database is both.
_BROKER = re.compile(r"^(broker_|result_backend|result_|cache_backend|redis_|database_|mongodb_)")
# Celery 3's upper-case names of the settings above (a Django project may still use them).
OLD_NAMES = {
    "CELERYBEAT_SCHEDULE": "beat_schedule",
    "CELERY_DEFAULT_QUEUE": "task_default_queue",
    "CELERY_ROUTES": "task_routes",
    "CELERY_TIMEZONE": "timezone",
    "CELERY_ENABLE_UTC": "enable_utc",
    "CELERY_IMPORTS": "imports",
    "CELERY_INCLUDE": "include",
    "CELERY_ACKS_LATE": "task_acks_late",
    "CELERY_TRACK_STARTED": "task_track_started",
    "CELERY_TASK_SERIALIZER": "task_serializer",
    "CELERY_RESULT_SERIALIZER": "result_serializer",
    "CELERY_ACCEPT_CONTENT": "accept_content",
    "BROKER_URL": "broker_url",
    "CELERY_RESULT_BACKEND": "result_backend",
}


def warn(message: str, stacklevel: int = 3) -> None:
    """A CeleryCompatibilityWarning pointing at the caller's caller (the user's line)."""
    warnings.warn(message, CeleryCompatibilityWarning, stacklevel=stacklevel + 1)


def check_setting(key: str, value: Any, stacklevel: int = 3) -> None:
    """Refuse or warn about a setting as it is set; settings cronbase honours pass quietly."""
    if key == "task_always_eager" and value:
        raise ConfigurationError(
            "task_always_eager=True: cronbase has no eager mode; call the task directly, or use "
            "cronbase.testing's inline mode in tests (docs/guides/testing.md)"
        )
    if key in ("task_serializer", "result_serializer") and value != "json":
        warn(f"{key}={value!r}: cronbase stores payloads and results as JSON", stacklevel)
    elif key == "accept_content" and set(value) - {"json", "application/json"}:
        warn(f"accept_content={value!r}: cronbase stores payloads as JSON only", stacklevel)
    elif key == "task_acks_late" and not value:
        warn(ACKS_EARLY, stacklevel)
    elif key == "task_routes" and value is not None:
        routes(value)  # refused now, when it is set, rather than at the first delay()
    elif _BROKER.match(key):
        warn(
            f"{key} is ignored: cronbase's database is the broker and the result backend",
            stacklevel,
        )
    elif key not in DEFAULTS:
        warn(f"setting {key!r} has no effect on cronbase", stacklevel)


ACKS_EARLY = (
    "acks_late=False is not available: a job whose worker dies runs again once its lease runs "
    "out (Celery's acks_late=True with task_reject_on_worker_lost)"
)


class Settings(dict[str, Any]):
    """``app.conf``: a dict of settings, also read and set as attributes, as Celery's is.

    >>> app.conf.update(timezone="Europe/Berlin", task_default_queue="work")  # doctest: +SKIP
    >>> app.conf.beat_schedule = {"ping": {"task": "proj.tasks.ping", "schedule": 30.0}}  # doctest: +SKIP
    """

    def __init__(self) -> None:
        super().__init__(DEFAULTS)
        self["beat_schedule"] = {}  # not DEFAULTS' own dict: entries are added in place

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no setting {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        check_setting(name, value)
        super().__setitem__(name, value)

    def __setitem__(self, key: str, value: Any) -> None:
        check_setting(key, value)
        super().__setitem__(key, value)

    def update(self, other: Any = (), /, **kw: Any) -> None:
        """Set many settings at once, each checked as ``conf[key] = value`` is."""
        for key, value in {**dict(other), **kw}.items():
            check_setting(key, value)
            super().__setitem__(key, value)

    def timezone_name(self) -> str:
        """The IANA zone crontab entries are read in (Celery's ``timezone``; default UTC)."""
        return str(self.get("timezone") or "UTC")


def read_object(source: object, namespace: str | None) -> dict[str, Any]:
    """The settings an object or module holds, as ``config_from_object`` reads them: with a
    namespace (``"CELERY"``), its ``CELERY_*`` names lower-cased without the prefix; without
    one, its lower-case public names; Celery 3's upper-case names either way."""
    if isinstance(source, Mapping):
        names = [str(name) for name in source]
        read = source.__getitem__
    else:
        names = [name for name in dir(source) if not name.startswith("_")]
        read = functools.partial(getattr, source)
    found: dict[str, Any] = {}
    prefix = f"{namespace}_" if namespace else None
    # Names are chosen before values are read: reading any other setting of Django's (say an
    # empty SECRET_KEY) may raise.
    for name in names:
        if name in OLD_NAMES:
            found[OLD_NAMES[name]] = read(name)
        elif prefix is not None:
            if name.startswith(prefix):
                found[name[len(prefix) :].lower()] = read(name)
        elif name.islower():
            value = read(name)
            if not _is_code(value):
                found[name] = value
    return found


def _is_code(value: object) -> bool:
    """A module's imports and helpers, which are not settings."""
    return isinstance(value, type) or callable(value) or type(value).__name__ == "module"


# -- routes ------------------------------------------------------------------------------------


def routes(value: object) -> list[tuple[str | re.Pattern[str], str]]:
    """``task_routes`` as (pattern, queue) pairs in the order they are tried: a dict, or a list
    of dicts, of a task name, a glob (``"feed.tasks.*"``) or a compiled regex to a queue name or
    ``{"queue": name}``. Router functions and routing by exchange are refused, naming them."""
    tables = value if isinstance(value, list | tuple) else [value]
    found: list[tuple[str | re.Pattern[str], str]] = []
    for table in tables:
        if not isinstance(table, Mapping):
            raise ConfigurationError(
                f"task_routes entry {table!r} is not a dict: cronbase routes by task name only "
                "(a dict of names or globs to queues); router functions are not supported"
            )
        for pattern, route in table.items():
            found.append((pattern, _queue_of(pattern, route)))
    return found


def _queue_of(pattern: object, route: object) -> str:
    if isinstance(route, str):
        return route
    if isinstance(route, Mapping) and isinstance(route.get("queue"), str):
        other = sorted(set(route) - {"queue"})
        if other:
            raise ConfigurationError(
                f"task_routes[{pattern!r}] = {route!r}: cronbase routes to a queue only; "
                f"{', '.join(other)} has no meaning without a broker"
            )
        return str(route["queue"])
    raise ConfigurationError(
        f"task_routes[{pattern!r}] = {route!r}: give a queue name or {{'queue': name}}"
    )


def route(value: object, task_name: str) -> str | None:
    """The queue ``task_routes`` sends ``task_name`` to, or None (the first match wins, as in
    Celery: exact names, globs and regexes alike, in order)."""
    if value is None:
        return None
    for pattern, queue in routes(value):
        if isinstance(pattern, re.Pattern):
            if pattern.match(task_name):
                return queue
        elif pattern == task_name or (
            any(c in pattern for c in "*?[") and fnmatch.fnmatchcase(task_name, pattern)
        ):
            return queue
    return None
