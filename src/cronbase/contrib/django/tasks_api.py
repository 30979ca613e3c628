"""The standard tasks API the backend implements: ``django.tasks`` (Django 6.0 and later), else the
``django-tasks`` backport (``django_tasks``, the same API for Django 4.2 to 5.2).

One module names both, so the rest of the backend is written once. On Django 6 the backend serves
``django.tasks`` even when the backport is installed: that is the API of Django's own ``@task``.
"""

from __future__ import annotations

import importlib
from typing import Any

import django

if django.VERSION >= (6, 0):
    API = "django.tasks"
    _names = {"InvalidTask": "InvalidTask", "normalize_json": "django.utils.json"}
else:
    API = "django_tasks"
    _names = {"InvalidTask": "InvalidTaskError", "normalize_json": "django_tasks.utils"}
    try:
        importlib.import_module(API)
    except ImportError as exc:
        raise ImportError(
            "cronbase's Django tasks backend needs Django 6 (django.tasks) or, on Django "
            f"{django.get_version()}, the backport: pip install 'django-tasks>=0.12' ({exc})"
        ) from exc


def _from(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)


_base = f"{API}.base"
_exceptions = f"{API}.exceptions"
_signals = f"{API}.signals"

BaseTaskBackend: Any = _from(f"{API}.backends.base", "BaseTaskBackend")
Task: Any = _from(_base, "Task")
TaskContext: Any = _from(_base, "TaskContext")
TaskError: Any = _from(_base, "TaskError")
TaskResult: Any = _from(_base, "TaskResult")
TaskResultStatus: Any = _from(_base, "TaskResultStatus")
DEFAULT_TASK_PRIORITY: int = _from(_base, "DEFAULT_TASK_PRIORITY")
TASK_MIN_PRIORITY: int = _from(_base, "TASK_MIN_PRIORITY")
TASK_MAX_PRIORITY: int = _from(_base, "TASK_MAX_PRIORITY")
InvalidTask: Any = _from(_exceptions, _names["InvalidTask"])
TaskResultDoesNotExist: Any = _from(_exceptions, "TaskResultDoesNotExist")
task_enqueued: Any = _from(_signals, "task_enqueued")
task_started: Any = _from(_signals, "task_started")
task_finished: Any = _from(_signals, "task_finished")
normalize_json: Any = _from(_names["normalize_json"], "normalize_json")
