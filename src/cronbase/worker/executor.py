"""Runs one claimed job: sets its context, runs the App's hooks and middleware around it
(``hooks.py``), applies the timeout, turns what happened into an Outcome."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..context import JobContext, set_current
from ..durable import Suspend
from ..errors import (
    Cancel,
    DatabaseUnavailableError,
    EffectInProgress,
    LeaseLostError,
    PayloadError,
    ProcessDiedError,
    ResultError,
    Snooze,
    UnknownTaskError,
)
from ..job import outcome_status
from ..payload import encode_result
from ..task import find_task
from .claim import ClaimedJob, Undecodable
from .isolation import Children, Killed, RemoteError

if TYPE_CHECKING:
    from ..db.database import Database
    from ..task import Task

logger = logging.getLogger("cronbase")

# A handler still running this many seconds after its timeout cancelled it is named (log,
# Workers page, metric): a cooperating handler notices is_cancelled() well within it.
OVERRUN_AFTER = 1.0
# What the log says of a sync handler in a thread at its timeout.
THREAD_RUNS_ON = (
    "cancelled; a sync handler runs on until it returns: its slot and lease are kept, its retry "
    "waits"
)
# A job that met another attempt's effect in progress looks again after its retry delay, at most
# this many seconds later; the attempt is not counted (an uncounted snooze).
EFFECT_WAIT_MAX = 60.0
# finish_jobs' snooze cap for a snooze that is not counted against max_snoozes.
UNCOUNTED_SNOOZE = -1
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


@dataclass
class Runtime:
    """What the worker lends the executor: the database, its tasks, the thread pool for sync
    handlers, the child processes for isolated ones, and what to tell the worker."""

    db: Database
    tasks: Mapping[str, Task[Any, Any]]
    threads: ThreadPoolExecutor
    children: Children | None = None
    worker_id: str | None = None
    # A handler reported progress (from any thread).
    on_progress: Callable[[], None] = lambda: None
    # An attempt passed its timeout: cancelled (it may run on: see the note), or killed.
    on_timeout: Callable[[ClaimedJob, str], None] = lambda job, note: None


async def execute(runtime: Runtime, job: ClaimedJob) -> Outcome:
    """Run ``job``'s handler and say how it went; never raises but for cancellation.

    It returns only once the handler has returned: a sync handler past its timeout is cancelled
    (``is_cancelled()``, no transaction, effect or step may start) but keeps its slot, and its
    lease renewed, until it does; two attempts of a job never overlap."""
    started = time.monotonic()
    db = runtime.db
    try:
        task = find_task(runtime.tasks, job.task)
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
        worker_id=runtime.worker_id,
        _db=db,
        _on_progress=runtime.on_progress,
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
        return await _attempt(runtime, task, kwargs, job, started)
    hooks.started(job.context)
    try:
        outcome = await _attempt(runtime, task, kwargs, job, started)
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


class _TimedOut(Exception):
    """How _call says the timeout ended the attempt."""

    def __init__(self, late: float | None = None, killed: bool = False) -> None:
        self.late = late
        self.killed = killed


async def _attempt(
    runtime: Runtime,
    task: Task[Any, Any],
    kwargs: dict[str, Any],
    job: ClaimedJob,
    started: float,
) -> Outcome:
    """Run the handler (within its timeout and middleware) and say how it went."""
    try:
        returned = await _call(runtime, task, kwargs, job)
    except _TimedOut as exc:
        return failure(
            job,
            TimeoutError(_timeout_message(task, exc)),
            retry_in=_retry_in(task, job),
            give_up=False,
            duration=time.monotonic() - started,
        )
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
            raise
        return classify(task, job, exc, time.monotonic() - started)
    duration = time.monotonic() - started
    return returned_outcome(job, returned, duration, runtime.db.max_result_bytes)


def _timeout_message(task: Task[Any, Any], timed_out: _TimedOut) -> str:
    text = f"handler ran past its timeout of {task.defaults.timeout}"
    if timed_out.killed:
        return text + "; its process was killed"
    if timed_out.late is not None and timed_out.late >= OVERRUN_AFTER:
        return text + f" and returned {timed_out.late:.1f}s after it was cancelled"
    return text


def returned_outcome(
    job: ClaimedJob, returned: object, duration: float, max_result_bytes: int
) -> Outcome:
    """The handler returned ``returned``: a success, storing its result (dead when the result
    cannot be stored: running it again would return the same)."""
    completed = job.context.completed
    if returned is not None and not completed and job.result is None:
        try:
            job.result = encode_result(job.id, job.task, returned, max_result_bytes)
        except ResultError as exc:
            return failure(job, exc, retry_in=0.0, give_up=True, duration=duration)
    return Outcome(job=job, outcome="succeeded", duration=duration, written=completed)


def classify(task: Task[Any, Any], job: ClaimedJob, exc: BaseException, duration: float) -> Outcome:
    """What an attempt whose handler raised ``exc`` comes to (a pure function of the task, the
    job and the exception)."""
    if isinstance(exc, Suspend):
        # sleep() or wait_for(): not an attempt that ended, a pause; the job runs again later.
        return Outcome(
            job=job,
            outcome="suspended",
            duration=duration,
            wake_in=exc.wake_in,
            waiting_for=exc.waiting_for,
        )
    if job.context.completed:
        # Its transaction() committed the success: what it raised afterwards changes nothing.
        logger.warning(
            "job %d (%s) raised %s after its transaction() committed; it stays succeeded",
            job.id,
            job.task,
            type(exc).__name__,
        )
        return Outcome(job=job, outcome="succeeded", written=True)
    if isinstance(exc, Snooze | Cancel):
        return steered(job, exc, task, duration)
    if isinstance(exc, DatabaseUnavailableError):
        # The database went away under the handler (a restart, a failover): not the handler's
        # fault, so the attempt is handed back and not counted.
        logger.warning("%s", exc)
        return Outcome(
            job=job, outcome="released", error=_trim(str(exc), ERROR_LIMIT), exception=exc
        )
    if isinstance(exc, LeaseLostError):
        # Another attempt may own the job: this one ends with nothing recorded (the fence
        # would refuse the write anyway).
        logger.warning("%s", exc)
        return Outcome(job=job, outcome="lost", written=True, exception=exc)
    if isinstance(exc, EffectInProgress):
        # Another attempt (of this job or another) performs the effect: waiting for it is not
        # this attempt's failure. Queued again after the retry delay, the attempt not counted.
        return Outcome(
            job=job,
            outcome="snoozed",
            retry_in=min(_retry_in(task, job), EFFECT_WAIT_MAX),
            error=_trim(f"{type(exc).__name__}: {exc}", ERROR_LIMIT),
            error_type="EffectInProgress",
            duration=duration,
            exception=exc,
            snooze_cap=UNCOUNTED_SNOOZE,
        )
    if isinstance(exc, RemoteError):
        remote = exc.remote
        return Outcome(
            job=job,
            outcome="dead" if remote.gives_up else "failed",
            retry_in=0.0 if remote.gives_up else _retry_in(task, job),
            error=_trim(remote.message or "", ERROR_LIMIT),
            error_type=remote.error_type,
            traceback=_trim(remote.traceback or "", TRACEBACK_LIMIT, keep_end=True),
            duration=duration,
            exception=exc,
        )
    if not isinstance(exc, Exception):
        raise exc
    give_up = task.gives_up(exc)
    return failure(
        job,
        exc,
        retry_in=0.0 if give_up else _retry_in(task, job),
        give_up=give_up,
        duration=duration,
    )


async def _call(
    runtime: Runtime, task: Task[Any, Any], kwargs: dict[str, Any], job: ClaimedJob
) -> Any:
    """Run the handler; what it returned. _TimedOut when its timeout ended it."""
    timeout = task.defaults.timeout.total_seconds() if task.defaults.timeout else None
    context = job.context
    if task.is_async:
        call: Any = (
            task.hooks.call_async(context, task.func, kwargs)
            if task.hooks.job_middleware
            else task.func(**kwargs)
        )
        if timeout is None:
            # No timer at all: a few microseconds a job that a drain of no-op jobs notices
            # (bench/README.md).
            return await call
        return await _async_within(runtime, job, call, timeout)
    if task.isolation == "process" and runtime.children is not None:
        return await _in_child(runtime, task, job, timeout)
    if task.hooks.job_middleware:
        # The middleware runs in the handler's thread, so what it sets (thread-locals, a
        # Sentry scope) is what the handler sees.
        target = functools.partial(task.hooks.call, context, task.func, kwargs)
    else:
        target = functools.partial(task.func, **kwargs)
    ctx = contextvars.copy_context()
    future = asyncio.get_running_loop().run_in_executor(runtime.threads, ctx.run, target)
    if timeout is None:
        return await future
    done, _ = await asyncio.wait((future,), timeout=timeout)
    if done:
        return future.result()
    # Python cannot stop a thread. The attempt is cancelled (it may start no transaction,
    # effect or step) and keeps its slot and its lease until the handler returns; only then is
    # it over for the database, so its retry can never run beside it.
    cancelled_at = time.monotonic()
    context.time_out()
    runtime.on_timeout(job, THREAD_RUNS_ON)
    with contextlib.suppress(Exception):
        await future
    raise _TimedOut(late=time.monotonic() - cancelled_at)


async def _async_within(runtime: Runtime, job: ClaimedJob, call: Any, limit: float) -> Any:
    """Await an async handler; after ``limit`` seconds cancel it, and wait until it has really ended
    (a handler that catches the cancellation runs on, holding its slot and lease)."""
    this = asyncio.current_task()
    assert this is not None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        job.context.time_out()
        runtime.on_timeout(job, "cancelled")
        this.cancel()

    cancelled_at = time.monotonic() + limit
    timer = asyncio.get_running_loop().call_later(limit, expire)
    try:
        returned = await call
    except BaseException as exc:
        if not expired:
            raise
        # Another cancellation (lease lost, grace over) beside the timeout's goes on.
        if this.uncancel() > 0 and isinstance(exc, asyncio.CancelledError):
            raise
        raise _TimedOut(late=time.monotonic() - cancelled_at) from None
    finally:
        timer.cancel()
    if expired:  # the handler swallowed the cancellation and returned: a timeout all the same
        this.uncancel()
        raise _TimedOut(late=time.monotonic() - cancelled_at)
    return returned


async def _in_child(
    runtime: Runtime, task: Task[Any, Any], job: ClaimedJob, limit: float | None
) -> Any:
    """Run a sync handler in a child process (isolation="process"), killed at its timeout."""
    assert runtime.children is not None
    children = runtime.children
    context = job.context

    def progress(percent: float, stage: str | None) -> None:
        with contextlib.suppress(ValueError):
            context.set_progress(percent, stage)

    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(runtime.threads, children.run, task, job, limit, progress)
    try:
        remote = await asyncio.shield(future)
    except asyncio.CancelledError:
        # Lease lost, or the grace period is over: the child goes, and with it the attempt.
        children.kill(job, "the attempt was cancelled")
        with contextlib.suppress(BaseException):
            await future
        raise
    except Killed as exc:
        if limit is not None and exc.reason.startswith("its timeout"):
            context.time_out()
            runtime.on_timeout(job, "its process was killed")
            raise _TimedOut(killed=True) from None
        raise ProcessDiedError(
            f"job {job.id} (task {job.task!r}): {exc.reason} before its handler returned"
        ) from None
    if remote.completed:
        context.completed = True
    if remote.kind == "returned":
        job.result = remote.result
        return None
    if remote.kind == "payload":  # as in execute(): no retry can make it fit
        raise RemoteError(replace(remote, error_type="cronbase.errors.PayloadError", gives_up=True))
    if remote.kind == "snooze":
        raise Snooze(remote.seconds or 0.0)
    if remote.kind == "cancel":
        raise Cancel(remote.message or "cancelled by its handler")
    if remote.kind == "suspend":
        raise Suspend(remote.seconds, remote.waiting_for)
    raise RemoteError(remote)


def _retry_in(task: Task[Any, Any], job: ClaimedJob) -> float:
    """Seconds until the next attempt; worked out only when an attempt fails."""
    return task.defaults.retry.delay(job.attempt).total_seconds()
