"""Celery's exceptions (``celery.exceptions``) on cronbase, and the compatibility warning.

Import them from here as from Celery: ``from cronbase.contrib.celery.exceptions import Retry``.
"""

from __future__ import annotations

import builtins
from datetime import datetime


class CeleryCompatibilityWarning(UserWarning):
    """A Celery construct that cronbase runs, but not exactly as Celery does: the message says
    what differs. Silence a known one with ``warnings.filterwarnings("ignore", ...,
    category=CeleryCompatibilityWarning)``."""


class CeleryError(Exception):
    """The base of Celery's errors (``celery.exceptions.CeleryError``)."""


class TaskPredicate(CeleryError):
    """The base of the exceptions that steer a task (Retry)."""


class Retry(TaskPredicate):
    """What ``self.retry()`` raises: the attempt ends and the job runs again after ``when``
    (seconds, or an aware datetime). On cronbase the attempt is recorded as failed (its job's
    state reads RETRY) and counts against ``max_retries``, as in Celery.

    >>> raise self.retry(countdown=60, exc=exc)  # doctest: +SKIP
    """

    def __init__(
        self,
        message: str | None = None,
        exc: BaseException | None = None,
        when: float | datetime | None = None,
    ) -> None:
        self.message = message
        self.exc = exc
        self.when = when
        super().__init__(message, exc, when)

    def humanize(self) -> str:
        """``in 10s`` or ``at <time>``, as Celery words it."""
        return f"at {self.when}" if isinstance(self.when, datetime) else f"in {self.when}s"

    def __str__(self) -> str:
        if self.message:
            return self.message
        if self.exc is not None:
            return f"Retry {self.humanize()}: {self.exc!r}"
        return f"Retry {self.humanize()}"


RetryTaskError = Retry  # Celery's old name


class TaskError(CeleryError):
    """A task-related error (Celery's base for the ones below)."""


class MaxRetriesExceededError(TaskError):
    """``self.retry()`` past the task's ``max_retries`` (without ``exc=``): the job goes dead."""

    def __init__(self, *args: object, task_args: object = None, task_kwargs: object = None):
        super().__init__(*args)
        self.task_args = task_args
        self.task_kwargs = task_kwargs


class TaskRevokedError(TaskError):
    """``AsyncResult.get()`` of a job that was cancelled (REVOKED)."""


class TimeoutError(TaskError, builtins.TimeoutError):  # Celery's name
    """``AsyncResult.get(timeout=...)`` ran out; also a builtin TimeoutError."""


class SoftTimeLimitExceeded(CeleryError):
    """Raised in an ``async def`` task at its ``soft_time_limit`` (at its next ``await``)."""


class TimeLimitExceeded(CeleryError):
    """The name Celery gives a hard time limit; cronbase records ``TimeoutError`` instead
    (the README's Timeouts)."""


class NotRegistered(KeyError, CeleryError):
    """A task name no task of the app has (``app.tasks[name]``, a beat entry, a route)."""


class ImproperlyConfigured(CeleryError):
    """Celery's configuration error (raised by Celery's Django loader; kept for imports)."""


__all__ = [
    "CeleryCompatibilityWarning",
    "CeleryError",
    "ImproperlyConfigured",
    "MaxRetriesExceededError",
    "NotRegistered",
    "Retry",
    "RetryTaskError",
    "SoftTimeLimitExceeded",
    "TaskError",
    "TaskPredicate",
    "TaskRevokedError",
    "TimeLimitExceeded",
    "TimeoutError",
]
