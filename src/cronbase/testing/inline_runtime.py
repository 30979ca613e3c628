"""The worker's executor as inline mode lends it its Runtime: what differs from a worker's attempt
is set here, as the executor's strategies, so the attempt itself (``worker/executor.py``) stays
the one both run.

- the context: :func:`~.inline_context.inline_context`, steps in memory, no database;
- a sync handler is called right away in the caller's thread (a worker calls it in its threads):
  it sees the test's thread-locals, Django's connection in the test's transaction among them,
  and its attempt never waits, so a sync defer runs it without an event loop (:func:`run_here`);
  from ``defer_async`` it runs in the loop's default executor, as a worker would;
- no timeouts, no leases (nothing to lose or hand back);
- the end hooks hear the state the job is left in (a snooze past max_snoozes is 'dead').
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..job import JobStatus, next_state
from ..worker.claim import ClaimedJob
from ..worker.executor import Runtime, in_thread
from .inline_context import inline_context

if TYPE_CHECKING:
    from ..db.database import Database
    from ..task import Task
    from ..worker.outcomes import Outcome
    from .inline_store import InlineJob, InlineStore

NO_LEASE = uuid.UUID(int=0)  # an inline attempt holds none; its context has no lease token


def runtimes(db: Database, store: InlineStore) -> tuple[Runtime, Runtime]:
    """The Runtimes of a sync defer (a sync handler called here) and of an async one (in the
    loop's default executor)."""

    def ended_as(claimed: ClaimedJob, outcome: Outcome) -> str:
        """What the end hooks hear: the state the job is left in, but 'snoozed' and
        'suspended' for a job queued again."""
        status = state_after(store.job(claimed.id), outcome)[0]
        name = outcome.outcome
        if name in ("snoozed", "suspended") and status is JobStatus.QUEUED:
            return name
        return status.value

    here = Runtime(
        db,
        store.tasks,
        None,
        context=lambda _, claimed: inline_context(claimed, store.job(claimed.id), store.events),
        call_sync=called_here,
        timeouts=False,
        leases=False,
        ended_as=ended_as,
    )
    return here, dataclasses.replace(here, call_sync=in_thread)


def claim(task: Task[Any, Any], job: InlineJob) -> ClaimedJob:
    """The attempt begun, as a claim begins it (counted, running): what the executor runs."""
    job.attempts += 1
    job.status = JobStatus.RUNNING
    job.result = job.waiting_for = None
    return ClaimedJob(
        id=job.id,
        task=task.name,
        queue=job.queue,
        payload=job.payload,
        priority=job.options.priority,
        attempt=job.attempts,
        max_attempts=job.max_attempts,
        lease_token=NO_LEASE,
        lease=timedelta(0),
        metadata=job.metadata,
        # Inline, jobs are deferred and run by the same code: the task's own version.
        task_version=task.defaults.version,
    )


def state_after(job: InlineJob, outcome: Outcome) -> tuple[JobStatus, int, int]:
    """The job's (status, attempts, snoozes) after the attempt, as the SQL would write them."""
    return next_state(
        outcome.outcome,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        snoozes=job.snoozes,
        snooze_cap=outcome.snooze_cap,
    )


def called_here(runtime: Runtime, target: Callable[[], Any]) -> Awaitable[Any]:
    """Runtime.call_sync: the handler called now, in the caller's thread; what it returned, as
    an awaitable that is done already."""
    __tracebackhide__ = True  # pytest shows the test and the handler, not these frames
    return _returned(target())


async def _returned(value: Any) -> Any:
    return value


def run_here(attempt: Coroutine[Any, Any, Outcome]) -> Outcome:
    """The Outcome of an attempt of a sync handler, run without an event loop: it never waits
    (the handler is called directly, no timeout applies), so it ends at its first step."""
    __tracebackhide__ = True
    try:
        attempt.send(None)
    except StopIteration as done:
        outcome: Outcome = done.value
        return outcome
    attempt.close()
    raise RuntimeError("inline mode: a sync handler's attempt waited for an event loop (a bug)")
