"""A cronbase job as Django's ``TaskResult``: the status, priority and error mappings, written once
as pure functions of a :class:`cronbase.Job` and its attempts (no I/O here).

Statuses: ``pending``, ``queued`` and ``failed`` (an attempt failed, a retry follows) are READY
(Django: "ready to be executed again"); ``running`` is RUNNING; ``succeeded`` is SUCCESSFUL;
``dead`` and ``cancelled`` are FAILED (Django has no cancelled state; both are finished).

Priorities: Django's run higher first within -100..100 (default 0); cronbase's run lower first
(default 100). ``cronbase = 100 - django`` maps one onto the other both ways, so Django's default
0 lands on cronbase's default 100 and Django tasks share a queue fairly with cronbase's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ...job import Job, JobAttempt, JobStatus
from . import tasks_api as api
from .arguments import from_payload

# cronbase's priority for Django's default (0): its own default.
PRIORITY_OFFSET = 100

STATUSES = {
    JobStatus.PENDING: "READY",
    JobStatus.QUEUED: "READY",
    JobStatus.FAILED: "READY",
    JobStatus.RUNNING: "RUNNING",
    JobStatus.SUCCEEDED: "SUCCESSFUL",
    JobStatus.DEAD: "FAILED",
    JobStatus.CANCELLED: "FAILED",
}

# Attempts that ran the handler and count towards max_attempts (Django's worker_ids: one per
# attempt). Released, snoozed and suspended ones are handed back uncounted.
COUNTED_OUTCOMES = frozenset({"succeeded", "failed", "dead", "lost", "cancelled"})
# error_type values that are cronbase's steering, not an exception the task raised.
NOT_ERRORS = frozenset({"Snooze", "Cancel", "EffectInProgress", "ParentFailed", "SnoozeLimit"})


def cronbase_priority(django_priority: int) -> int:
    """Django's priority (-100..100, higher first) as cronbase's (lower first): 100 - p."""
    return PRIORITY_OFFSET - int(django_priority)


def django_priority(cronbase_priority: int) -> int:
    """cronbase's priority as Django's, clamped to Django's range (a job changed by other code may
    hold any smallint)."""
    return max(
        api.TASK_MIN_PRIORITY, min(api.TASK_MAX_PRIORITY, PRIORITY_OFFSET - cronbase_priority)
    )


def django_status(status: JobStatus) -> Any:
    """The ``TaskResultStatus`` of a cronbase job status."""
    return api.TaskResultStatus[STATUSES[status]]


def exception_class_path(error_type: str) -> str:
    """Django's ``exception_class_path`` from cronbase's ``error_type`` (which drops the
    ``builtins.`` of built-in exceptions: ``ValueError`` is ``builtins.ValueError``)."""
    return error_type if "." in error_type else f"builtins.{error_type}"


def task_error(error_type: str, traceback: str | None) -> Any:
    return api.TaskError(
        exception_class_path=exception_class_path(error_type), traceback=traceback or ""
    )


def errors_of(attempts: Sequence[JobAttempt]) -> list[Any]:
    """One ``TaskError`` per attempt that raised, oldest first."""
    return [
        task_error(a.error_type, a.traceback)
        for a in attempts
        if a.error_type is not None and a.error_type not in NOT_ERRORS
    ]


def worker_ids_of(job: Job, attempts: Sequence[JobAttempt]) -> list[str]:
    """The worker of each counted attempt, oldest first, and of the one running now."""
    ids = [a.worker or "" for a in attempts if a.outcome in COUNTED_OUTCOMES]
    if job.status is JobStatus.RUNNING:
        ids.append(job.locked_by or "")
    return ids


def run_after_of(job: Job) -> datetime | None:
    """The ``run_after`` the job was enqueued with, as far as the row still says: its ``run_at``
    while it waits for its first attempt and was due later than it was enqueued."""
    if job.attempts == 0 and job.run_at > job.created_at:
        return job.run_at
    return None


def result_task(task: Any, job: Job, alias: str) -> Any:
    """The Django task of the result, as the job was enqueued (``task.using(...)``): its queue,
    priority and ``run_after``. A job in a queue this backend does not list keeps the task's
    own (``using()`` validates, and reading a result must not refuse it)."""
    changes: dict[str, Any] = {
        "priority": django_priority(job.priority),
        "queue_name": job.queue,
        "run_after": run_after_of(job),
        "backend": alias,
    }
    try:
        return replace(task, **changes)
    except api.InvalidTask:
        return task


def build_result(task: Any, job: Job, attempts: Sequence[JobAttempt], alias: str) -> Any:
    """The ``TaskResult`` of ``job`` (a job of the Django task ``task``) with its ``attempts``
    (``app.jobs.attempts``): what ``get_result`` returns."""
    started = [a.started_at for a in attempts if a.started_at is not None]
    if job.started_at is not None and job.status is JobStatus.RUNNING:
        started.append(job.started_at)
    # A payload other SQL wrote too deep to read gives no arguments; the attempt's error says why.
    payload = job.payload if isinstance(job.payload, dict) else {}
    args, kwargs = from_payload(task.func, task.takes_context, payload)
    result = api.TaskResult(
        task=result_task(task, job, alias),
        id=str(job.id),
        status=django_status(job.status),
        enqueued_at=job.created_at,
        started_at=min(started) if started else job.started_at,
        last_attempted_at=job.started_at,
        finished_at=job.finished_at if job.status.is_final else None,
        args=args,
        kwargs=kwargs,
        backend=alias,
        errors=errors_of(attempts),
        worker_ids=worker_ids_of(job, attempts),
    )
    if job.status is JobStatus.SUCCEEDED:
        object.__setattr__(result, "_return_value", job.result)
    return result


def finished(result: Any, *, at: datetime, value: Any = None, error: Any = None) -> Any:
    """``result`` (RUNNING) as it ends now: SUCCESSFUL with ``value``, or FAILED with ``error``
    (a TaskError) added to its errors. For the ``task_finished`` signal, before the worker has
    written the outcome."""
    status = api.TaskResultStatus.SUCCESSFUL if error is None else api.TaskResultStatus.FAILED
    errors = list(result.errors) if error is None else [*result.errors, error]
    ended = replace(result, status=status, finished_at=at, errors=errors)
    object.__setattr__(ended, "_return_value", value)
    return ended
