"""Runs one claimed job: sets its context, runs the App's hooks and middleware around it
(``hooks.py``), applies the timeout, and asks ``outcomes.py`` what the attempt came to.

It is the one attempt: the worker runs it, and so does testing's inline mode
(``testing/inline.py``), which keeps only its in-memory store around it. What differs between them
is a strategy on :class:`Runtime` (how the context is made, how a sync handler is called, whether
timeouts and leases exist, how the end hooks name the outcome), never a branch in the attempt.

A timed-out attempt is over only when its handler has returned: an async one is cancelled, a
sync one in a thread is told (``is_cancelled()``) and waited for (Python cannot stop a thread),
and one in a child process (``isolation="process"``) is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..context import JobContext, set_current
from ..errors import Cancel, PayloadError, ProcessDiedError, Snooze, UnknownTaskError
from ..job import outcome_status
from ..task import find_task
from ..workflow.durable import Suspend
from . import outcomes
from .claim import ClaimedJob
from .isolation import Children, Killed, Remote, RemoteError
from .outcomes import Outcome, Verdict, outcome_of

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


def job_context(runtime: Runtime, job: ClaimedJob) -> JobContext:
    """The handler's view of its job on a worker: its lease, and the database for
    ``transaction()`` and steps."""
    return JobContext(
        id=job.id,
        task=job.task,
        queue=job.queue,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        payload=job.payload,
        metadata=job.metadata,
        task_version=job.task_version or 1,
        lease_token=job.lease_token,
        lease=job.lease,
        worker_id=runtime.worker_id,
        _db=runtime.db,
        _on_progress=runtime.on_progress,
    )


# How a sync handler is called: (runtime, the call) -> what awaiting gives its return value
# (the attempt applies the timeout). The awaitable is returned, not awaited: a strategy costs no
# coroutine of its own.
SyncCall = Callable[["Runtime", Callable[[], Any]], Awaitable[Any]]


def in_thread(runtime: Runtime, target: Callable[[], Any]) -> asyncio.Future[Any]:
    """A sync handler in the runtime's threads (None: the loop's default executor), with a copy
    of the caller's contextvars (current_job())."""
    ctx = contextvars.copy_context()
    return asyncio.get_running_loop().run_in_executor(runtime.threads, ctx.run, target)


def outcome_name(job: ClaimedJob, outcome: Outcome) -> str:
    """What the end hooks are told of an outcome: a failure is 'dead' when no attempt is left,
    as finish_jobs will record it."""
    if outcome.outcome == "failed":
        return outcome_status(
            succeeded=False, give_up=False, attempts=job.attempt, max_attempts=job.max_attempts
        ).value
    return outcome.outcome


@dataclass
class Runtime:
    """What the worker lends the executor: the database, its tasks, the thread pool for sync
    handlers, the child processes for isolated ones, and what to tell the worker.

    The last fields are the strategies inline mode (``testing/inline.py``) sets otherwise; their
    defaults are the worker's."""

    db: Database
    tasks: Mapping[str, Task[Any, Any]]
    # None: the running loop's default executor.
    threads: Executor | None
    children: Children | None = None
    worker_id: str | None = None
    # A handler reported progress (from any thread).
    on_progress: Callable[[], None] = lambda: None
    # An attempt passed its timeout: cancelled (it may run on: see the note), or killed.
    on_timeout: Callable[[ClaimedJob, str], None] = lambda job, note: None
    # Makes the handler's current_job().
    context: Callable[[Runtime, ClaimedJob], JobContext] = job_context
    # Calls a sync handler (not in a child process).
    call_sync: SyncCall = in_thread
    # Whether a task's timeout applies.
    timeouts: bool = True
    # Whether an attempt holds a lease on a database, which it can lose or hand back (without
    # one, LeaseLostError and DatabaseUnavailableError are failures like any other).
    leases: bool = True
    # What the end hooks are told an outcome is.
    ended_as: Callable[[ClaimedJob, Outcome], str] = outcome_name


class _TimedOut(Exception):
    """How _call says the timeout ended the attempt: ``how`` says what became of the handler."""

    def __init__(self, how: str) -> None:
        self.how = how


async def execute(runtime: Runtime, job: ClaimedJob) -> Outcome:
    """Run ``job``'s handler and say how it went; never raises but for cancellation.

    It returns only once the handler has returned: a sync handler past its timeout is cancelled
    (``is_cancelled()``, no transaction, effect or step may start) but keeps its slot, and its
    lease renewed, until it does; two attempts of a job never overlap."""
    started = time.monotonic()
    try:
        task = find_task(runtime.tasks, job.task)
    except UnknownTaskError as exc:
        # Possibly a deploy in progress: another worker may know the task, so retry later.
        return outcome_of(job, outcomes.failure(exc, retry_in=60.0, give_up=False), 0.0)
    context = job.context = runtime.context(runtime, job)
    context.encrypted = task.defaults.encrypt
    hooks = task.hooks
    try:
        kwargs = task.arguments(job.payload)
    except PayloadError as exc:
        # The attempt never started, but it ended: end hooks (error reporting) hear of it.
        if hooks.job_end:
            hooks.ended(context, "dead", exc, timedelta(0))
        unfit = outcomes.unfit(exc)  # the message may quote the payload's values
        if task.defaults.encrypt and runtime.leases:
            unfit = outcomes.sealed(task, unfit)
        return outcome_of(job, unfit, 0.0)
    set_current(context)
    # Plain attribute reads, not Hooks.has_job_hooks: this runs once per job.
    if not (hooks.job_start or hooks.job_end or hooks.job_middleware):
        return await _attempt(runtime, task, kwargs, job, context, started)
    hooks.started(context)
    try:
        outcome = await _attempt(runtime, task, kwargs, job, context, started)
    except asyncio.CancelledError as exc:
        # Cancelled: its lease was lost, or the worker stopped past its grace period (the job
        # is handed back). End hooks still pair with the start hooks.
        name = "lost" if context.lease_lost else "released"
        hooks.ended(context, name, exc, timedelta(seconds=time.monotonic() - started))
        raise
    name = runtime.ended_as(job, outcome)
    hooks.ended(context, name, outcome.exception, timedelta(seconds=outcome.duration))
    return outcome


async def _attempt(
    runtime: Runtime,
    task: Task[Any, Any],
    kwargs: dict[str, Any],
    job: ClaimedJob,
    context: JobContext,
    started: float,
) -> Outcome:
    """Run the handler (within its timeout and middleware) and say how it went."""
    __tracebackhide__ = True  # inline mode: pytest shows the test and the handler
    verdict: Verdict
    try:
        value = await _call(runtime, task, kwargs, job, context)
    except _TimedOut as exc:
        verdict = outcomes.timed_out(task, job.attempt, exc.how, completed=context.completed)
    except RemoteError as exc:  # a handler in a child process
        verdict = _remote(task, job, exc.remote)
    except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        if not isinstance(exc, Exception | Suspend):
            raise
        verdict = outcomes.raised(
            task, job.attempt, exc, completed=context.completed, leased=runtime.leases
        )
        _log_unusual(job, verdict)
    else:
        if value is None and not context.completed:  # the common case, without a Verdict
            return Outcome(job=job, outcome="succeeded", duration=time.monotonic() - started)
        job.value = value
        verdict = outcomes.returned(
            task,
            job.id,
            value,
            completed=context.completed,
            max_result_bytes=runtime.db.max_result_bytes,
        )
    if task.defaults.encrypt and runtime.leases:  # inline mode (no lease) stores nothing
        verdict = outcomes.sealed(task, verdict)
    if verdict.result is not None:
        job.result = verdict.result
    return outcome_of(job, verdict, time.monotonic() - started)


def _log_unusual(job: ClaimedJob, verdict: Verdict) -> None:
    exc = verdict.exception
    if verdict.outcome == "succeeded" and exc is not None:
        logger.warning(
            "job %d (%s) raised %s after its transaction() committed; it stays succeeded",
            job.id,
            job.task,
            type(exc).__name__,
        )
    elif verdict.outcome == "lost":  # a hand-back is logged when it is written (completer.py)
        logger.warning("%s", exc)


async def _call(
    runtime: Runtime,
    task: Task[Any, Any],
    kwargs: dict[str, Any],
    job: ClaimedJob,
    context: JobContext,
) -> Any:
    """Run the handler; what it returned. _TimedOut when its timeout ended the attempt."""
    __tracebackhide__ = True
    timeout = (
        task.defaults.timeout.total_seconds()
        if task.defaults.timeout and runtime.timeouts
        else None
    )
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
        return await _async_within(runtime, job, context, call, timeout)
    if task.isolation == "process" and runtime.children is not None:
        return await _in_child(runtime, task, job, context, timeout)
    if task.hooks.job_middleware:
        # The middleware runs in the handler's thread, so what it sets (thread-locals, a
        # Sentry scope) is what the handler sees.
        target = functools.partial(task.hooks.call, context, task.func, kwargs)
    else:
        target = functools.partial(task.func, **kwargs)
    running = runtime.call_sync(runtime, target)
    if timeout is None:
        return await running
    future = asyncio.ensure_future(running)
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
    raise _TimedOut(_late(time.monotonic() - cancelled_at))


def _late(seconds: float) -> str:
    return (
        f" and returned {seconds:.1f}s after it was cancelled" if seconds >= OVERRUN_AFTER else ""
    )


async def _async_within(
    runtime: Runtime, job: ClaimedJob, context: JobContext, call: Any, limit: float
) -> Any:
    """Await an async handler; after ``limit`` seconds cancel it, and wait until it has really
    ended (a handler that catches the cancellation runs on, holding its slot and lease)."""
    this = asyncio.current_task()
    assert this is not None
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        context.time_out()
        runtime.on_timeout(job, "cancelled")
        this.cancel()

    cancelled_at = time.monotonic() + limit
    timer = asyncio.get_running_loop().call_later(limit, expire)
    try:
        value = await call
    except BaseException as exc:
        if not expired:
            raise
        # Another cancellation (lease lost, grace over) beside the timeout's goes on.
        if this.uncancel() > 0 and isinstance(exc, asyncio.CancelledError):
            raise
        raise _TimedOut(_late(time.monotonic() - cancelled_at)) from None
    finally:
        timer.cancel()
    if expired:  # the handler swallowed the cancellation and returned: a timeout all the same
        this.uncancel()
        raise _TimedOut(_late(time.monotonic() - cancelled_at))
    return value


async def _in_child(
    runtime: Runtime,
    task: Task[Any, Any],
    job: ClaimedJob,
    context: JobContext,
    limit: float | None,
) -> Any:
    """Run a sync handler in a child process (isolation="process"), killed at its timeout."""
    assert runtime.children is not None
    children = runtime.children

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
            raise _TimedOut("; its process was killed") from None
        raise ProcessDiedError(
            f"job {job.id} (task {job.task!r}): {exc.reason} before its handler returned"
        ) from None
    if remote.completed:
        context.completed = True
    if remote.kind == "returned":
        job.result = remote.result
        if task.defaults.encrypt and job.result is not None:  # stored as _attempt seals one
            keys = task.db.sealing_keys(task.name)
            job.result = keys.seal_json(job.result, "result", task.name)
        return None
    if remote.kind == "snooze":
        raise Snooze(remote.seconds or 0.0)
    if remote.kind == "cancel":
        raise Cancel(remote.message or "cancelled by its handler")
    if remote.kind == "suspend":
        raise Suspend(remote.seconds, remote.waiting_for)
    raise RemoteError(remote)


def _remote(task: Task[Any, Any], job: ClaimedJob, remote: Remote) -> Verdict:
    """What a handler in a child process raised, as the parent records it (the child said
    whether the task retries it; a payload that does not fit never is)."""
    gives_up = remote.gives_up or remote.kind == "payload"
    return Verdict(
        outcome="dead" if gives_up else "failed",
        retry_in=0.0 if gives_up else outcomes.retry_in(task, job.attempt, None),
        error=outcomes.trim(remote.message or "", outcomes.ERROR_LIMIT),
        error_type="cronbase.errors.PayloadError"
        if remote.kind == "payload"
        else remote.error_type,
        traceback=outcomes.trim(remote.traceback or "", outcomes.TRACEBACK_LIMIT, keep_end=True),
    )
