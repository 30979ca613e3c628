"""Runs one claimed job: sets its context, runs the App's hooks and middleware around it
(``hooks.py``), applies the timeout, turns what happened into an Outcome."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..context import JobContext, set_current
from ..durable import Suspend
from ..errors import (
    Cancel,
    DatabaseUnavailableError,
    LeaseLostError,
    PayloadError,
    ResultError,
    Snooze,
    UnknownTaskError,
)
from ..job import outcome_status
from ..payload import encode_result
from ..task import find_task
from .claim import ClaimedJob, Undecodable

if TYPE_CHECKING:
    from ..db.database import Database
    from ..task import Task

logger = logging.getLogger("cronbase")

TRACEBACK_LIMIT = 8000  # characters kept, from the end: the innermost frames say the most
ERROR_LIMIT = 2000


@dataclass(eq=False, slots=True)
class Outcome:
    """What one attempt came to; fed to finish_jobs in batches."""

    job: ClaimedJob
    # 'succeeded' | 'failed' | 'dead' | 'cancelled' | 'snoozed' | 'suspended' | 'released'
    # | 'lost'
    outcome: str
    retry_in: float = 0.0
    error: str | None = None
    error_type: str | None = None
    traceback: str | None = None
    duration: float = 0.0
    # Nothing for the completer to write: the handler's transaction() committed the success
    # itself, or the attempt lost its lease ('lost').
    written: bool = False
    # What the handler raised, for on_job_end hooks (None when it returned).
    exception: BaseException | None = None
    # A snooze: how many snoozes the task allows (past them finish_jobs makes the job dead).
    snooze_cap: int = 0
    # A suspension (sleep, wait_for): seconds until it wakes (None: only an event wakes it),
    # and the event key it waits for.
    wake_in: float | None = None
    waiting_for: str | None = None


def _trim(text: str, limit: int, *, keep_end: bool = False) -> str:
    # PostgreSQL text cannot hold NUL: one in an exception message would fail the whole batch.
    text = text.replace("\x00", "\\x00")
    if len(text) <= limit:
        return text
    return "…" + text[-limit:] if keep_end else text[:limit] + "…"


def failure(
    job: ClaimedJob, exc: BaseException, *, retry_in: float, give_up: bool, duration: float
) -> Outcome:
    error_type = f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins.")
    message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    tb = "".join(traceback.format_exception(exc))
    return Outcome(
        job=job,
        outcome="dead" if give_up else "failed",
        retry_in=retry_in,
        error=_trim(message, ERROR_LIMIT),
        error_type=error_type,
        traceback=_trim(tb, TRACEBACK_LIMIT, keep_end=True),
        duration=duration,
        exception=exc,
    )


def steered(
    job: ClaimedJob, exc: Snooze | Cancel, task: Task[Any, Any], duration: float
) -> Outcome:
    """The handler raised Snooze or Cancel: not a failure, and never retried as one."""
    if isinstance(exc, Snooze):
        return Outcome(
            job=job,
            outcome="snoozed",
            retry_in=exc.seconds,
            error=str(exc),
            error_type="Snooze",
            duration=duration,
            exception=exc,
            snooze_cap=task.defaults.max_snoozes,
        )
    return Outcome(
        job=job,
        outcome="cancelled",
        error=_trim(exc.reason, ERROR_LIMIT),
        error_type="Cancel",
        duration=duration,
        exception=exc,
    )


def undecodable(bad: Undecodable) -> Outcome:
    """A claimed row that cannot be decoded: dead at once, with the reason (no retry can help)."""
    exc = bad.error
    reason = PayloadError(
        f"job {bad.job.id} (task {bad.job.task!r}) cannot be decoded: "
        f"{type(exc).__name__}: {str(exc)[:200]}"
    )
    return failure(bad.job, reason, retry_in=0.0, give_up=True, duration=0.0)


async def execute(
    db: Database,
    tasks: Mapping[str, Task[Any, Any]],
    job: ClaimedJob,
    threads: ThreadPoolExecutor,
    on_progress: Callable[[], None],
    worker_id: str | None = None,
) -> Outcome:
    """Run ``job``'s handler and say how it went; never raises but for cancellation."""
    started = time.monotonic()
    try:
        task = find_task(tasks, job.task)
    except UnknownTaskError as exc:
        # Possibly a deploy in progress: another worker may know the task, so retry later.
        return failure(job, exc, retry_in=60.0, give_up=False, duration=0.0)
    job.context = JobContext(
        id=job.id,
        task=job.task,
        queue=job.queue,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        payload=job.payload,
        metadata=job.metadata,
        lease_token=job.lease_token,
        lease=job.lease,
        worker_id=worker_id,
        _db=db,
        _on_progress=on_progress,
    )
    hooks = task.hooks
    try:
        kwargs = task.arguments(job.payload)
    except PayloadError as exc:
        # Retrying cannot make the payload fit the handler. The attempt never started, but it
        # ended: end hooks (error reporting) hear of it.
        if hooks.job_end:
            hooks.ended(job.context, "dead", exc, timedelta(0))
        return failure(job, exc, retry_in=0.0, give_up=True, duration=0.0)
    set_current(job.context)
    # Plain attribute reads, not Hooks.has_job_hooks: this runs once per job.
    if not (hooks.job_start or hooks.job_end or hooks.job_middleware):
        return await _attempt(task, kwargs, threads, job, started, db.max_result_bytes)
    hooks.started(job.context)
    try:
        outcome = await _attempt(task, kwargs, threads, job, started, db.max_result_bytes)
    except asyncio.CancelledError as exc:
        # Cancelled: its lease was lost, or the worker stopped past its grace period (the job
        # is handed back). End hooks still pair with the start hooks.
        name = "lost" if job.context.lease_lost else "released"
        hooks.ended(job.context, name, exc, timedelta(seconds=time.monotonic() - started))
        raise
    name = outcome.outcome
    if name == "failed":  # dead when no attempt is left, as finish_jobs will record it
        name = outcome_status(
            succeeded=False, give_up=False, attempts=job.attempt, max_attempts=job.max_attempts
        ).value
    hooks.ended(job.context, name, outcome.exception, timedelta(seconds=outcome.duration))
    return outcome


async def _attempt(
    task: Task[Any, Any],
    kwargs: dict[str, Any],
    threads: ThreadPoolExecutor,
    job: ClaimedJob,
    started: float,
    max_result_bytes: int,
) -> Outcome:
    """Run the handler (within its timeout and middleware) and say how it went."""
    timeout = task.defaults.timeout.total_seconds() if task.defaults.timeout else None
    try:
        if timeout is None:
            # No asyncio.timeout() at all: a few microseconds a job that a drain of no-op
            # jobs notices (bench/README.md).
            returned = await _call(task, kwargs, threads, job.context)
        else:
            async with asyncio.timeout(timeout):
                returned = await _call(task, kwargs, threads, job.context)
    except TimeoutError as exc:
        error: BaseException = exc
        if timeout is not None and time.monotonic() - started >= timeout:
            error = TimeoutError(f"handler ran past its timeout of {task.defaults.timeout}")
        return failure(
            job,
            error,
            retry_in=_retry_in(task, job),
            give_up=False,
            duration=time.monotonic() - started,
        )
    except Suspend as exc:
        # sleep() or wait_for(): not an attempt that ended, a pause; the job runs again later.
        return Outcome(
            job=job,
            outcome="suspended",
            duration=time.monotonic() - started,
            wake_in=exc.wake_in,
            waiting_for=exc.waiting_for,
        )
    except (Snooze, Cancel) as exc:
        if not job.context.completed:
            return steered(job, exc, task, time.monotonic() - started)
        logger.warning(
            "job %d (%s) raised %s after its transaction() committed; it stays succeeded",
            job.id,
            job.task,
            type(exc).__name__,
        )
        return Outcome(job=job, outcome="succeeded", written=True)
    except Exception as exc:
        if job.context.completed:
            logger.warning(
                "job %d (%s) raised after its transaction() committed; it stays succeeded: %s",
                job.id,
                job.task,
                exc,
            )
            return Outcome(job=job, outcome="succeeded", written=True)
        if isinstance(exc, DatabaseUnavailableError):
            # The database went away under the handler (a restart, a failover): not the
            # handler's fault, so the attempt is handed back and not counted.
            logger.warning("%s", exc)
            return Outcome(
                job=job, outcome="released", error=_trim(str(exc), ERROR_LIMIT), exception=exc
            )
        if isinstance(exc, LeaseLostError):
            # Another attempt may own the job: this one ends with nothing recorded (the fence
            # would refuse the write anyway).
            logger.warning("%s", exc)
            return Outcome(job=job, outcome="lost", written=True, exception=exc)
        give_up = task.gives_up(exc)
        return failure(
            job,
            exc,
            retry_in=0.0 if give_up else _retry_in(task, job),
            give_up=give_up,
            duration=time.monotonic() - started,
        )
    if returned is not None and not job.context.completed:
        try:
            job.result = encode_result(job.id, job.task, returned, max_result_bytes)
        except ResultError as exc:
            # Running it again would return the same: dead at once, saying why.
            return failure(
                job, exc, retry_in=0.0, give_up=True, duration=time.monotonic() - started
            )
    return Outcome(
        job=job,
        outcome="succeeded",
        duration=time.monotonic() - started,
        written=job.context.completed,
    )


async def _call(
    task: Task[Any, Any], kwargs: dict[str, Any], threads: ThreadPoolExecutor, context: JobContext
) -> Any:
    """Run the handler; what it returned."""
    middleware = task.hooks.job_middleware
    if task.is_async:
        if middleware:
            return await task.hooks.call_async(context, task.func, kwargs)
        return await task.func(**kwargs)
    if middleware:
        # The middleware runs in the handler's thread, so what it sets (thread-locals, a
        # Sentry scope) is what the handler sees.
        call = functools.partial(task.hooks.call, context, task.func, kwargs)
    else:
        call = functools.partial(task.func, **kwargs)
    ctx = contextvars.copy_context()
    # A sync handler past its timeout keeps its thread until it returns: Python cannot stop a
    # thread. Its outcome is recorded as a timeout all the same.
    return await asyncio.get_running_loop().run_in_executor(threads, ctx.run, call)


def _retry_in(task: Task[Any, Any], job: ClaimedJob) -> float:
    """Seconds until the next attempt; worked out only when an attempt fails."""
    return task.defaults.retry.delay(job.attempt).total_seconds()
