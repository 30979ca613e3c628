"""One hierarchy of errors, rooted at :class:`CronbaseError`; every message names the bad value.

:class:`Snooze` and :class:`Cancel` are not errors: a handler raises them to steer its job.
"""

from __future__ import annotations

from datetime import timedelta

MAX_SNOOZE_SECONDS = 366 * 86400


class CronbaseError(Exception):
    """Base of every error cronbase raises on purpose."""


class ConfigurationError(CronbaseError):
    """A setting is missing or wrong (database URL, schema name, app path, a task's or a job's
    options)."""


class InvalidValueError(CronbaseError, ValueError):
    """A value a call does not take (a job status to filter by, a limit, an age); the message
    names it."""


class UsageError(CronbaseError, RuntimeError):
    """A call made where it cannot work: ``current_job()`` outside a running job, ``drain()``
    inside an event loop, a step without the job's database."""


class DatabaseURLError(ConfigurationError):
    """The database URL cannot be parsed or reached."""


class UnknownTaskError(CronbaseError):
    """A task name that is not registered with the app."""

    def __init__(self, name: str, registered: list[str]) -> None:
        self.name = name
        self.registered = registered
        known = ", ".join(sorted(registered)) or "none"
        super().__init__(f"unknown task {name!r}; registered: {known}")


class InvalidNameError(CronbaseError, ValueError):
    """A queue or task name, or a key, that cronbase does not accept (see cronbase.checks)."""


class PayloadError(CronbaseError, ValueError):
    """A payload that is not JSON, is too large, or does not fit the task's arguments."""


class ConnectionTypeError(CronbaseError, TypeError):
    """``connection=`` got what defer cannot write on: a sync object for defer_async (or the
    reverse), an engine on another driver than psycopg 3, or something that is no connection."""


class JobNotFoundError(CronbaseError):
    """No job with that id."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        super().__init__(f"no job with id {job_id}")


class JobStateError(CronbaseError):
    """The job is in a state that does not allow the action."""


class WorkflowError(CronbaseError, ValueError):
    """A graph of jobs that cannot be deferred: an unknown parent, a bad on_parent_failure, an
    empty chain or group; the message names the problem."""


class EventError(CronbaseError, ValueError):
    """An event that cannot be emitted: a bad key, or a payload that is not JSON."""


class EventTimeout(CronbaseError, TimeoutError):
    """``current_job().wait_for(key, timeout=...)``: the event was not emitted in time."""


class ScheduleError(CronbaseError, ValueError):
    """An invalid cron expression, time zone or schedule option."""


class EffectError(CronbaseError):
    """An effect could not be entered or recorded."""


class EffectInProgress(EffectError):
    """Another live owner is performing this effect; try again later."""


class EffectNotFoundError(EffectError):
    def __init__(self, key: str) -> None:
        super().__init__(f"no effect with key {key!r}")
        self.key = key


class MigrationError(CronbaseError):
    """The database schema is missing, newer than this code, or a migration failed."""


class WorkerFatalError(CronbaseError):
    """A worker met a database error that waiting did not cure (schema gone, permission denied)
    for longer than its ``fatal_after``; it handed back its jobs and stopped."""


class DatabaseUnavailableError(CronbaseError):
    """cronbase's own connection was lost while a job used it (a restart, a failover): the attempt
    is handed back, not counted, and runs again once the database is back."""


class AttemptCancelledError(CronbaseError):
    """The running attempt was cancelled: its lease is gone, or it passed its timeout. It may run
    on (a sync handler cannot be stopped), but starts no effect, step or transaction()."""


class LeaseLostError(AttemptCancelledError):
    """The running attempt's lease is gone (expired, cancelled, retried by an operator): another
    attempt may own the job, so this one may not start an effect or a transaction()."""


class AttemptTimeoutError(AttemptCancelledError, TimeoutError):
    """The running attempt passed its task's ``timeout`` and was cancelled: the attempt is
    recorded as timed out, so the handler may not start an effect, step or transaction()."""


class ProcessDiedError(CronbaseError):
    """A task with ``isolation="process"``: the child process running the handler died (a crash,
    a signal, ``os._exit``) before the handler returned; an ordinary failed attempt."""


class ResultError(CronbaseError):
    """A handler returned what cannot be stored as its job's result (not JSON, or too large):
    the job goes dead at once, since running it again would return the same."""


class Snooze(Exception):  # a request, as Celery's Retry, not an error
    """``raise cronbase.Snooze(delay)`` in a handler: run the job again after ``delay`` (a
    timedelta or seconds), without counting the attempt. A task's ``max_snoozes`` (100 by
    default) caps how often; past it the job goes dead."""

    def __init__(self, delay: timedelta | float = 0.0) -> None:
        from .durations import duration  # durations.py raises these errors: imported late

        seconds = duration("Snooze delay", delay, signed=True).total_seconds()
        if not 0 <= seconds <= MAX_SNOOZE_SECONDS:
            raise ConfigurationError(
                f"Snooze delay must be a timedelta or seconds from 0 to 366 days, got {delay!r}"
            )
        super().__init__(f"snoozed for {seconds:g}s")
        self.seconds = float(seconds)


class Cancel(Exception):  # a request, not an error
    """``raise cronbase.Cancel(reason)`` in a handler: the job ends ``cancelled`` with the
    reason recorded, and is not retried."""

    def __init__(self, reason: str = "cancelled by its handler") -> None:
        if not isinstance(reason, str):
            raise ConfigurationError(f"Cancel reason must be a string, got {reason!r}")
        super().__init__(reason)
        self.reason = reason
