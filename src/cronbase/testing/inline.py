"""Inline mode: inside ``with cronbase.testing.inline(app) as run:`` every defer of the App's tasks
runs the handler at once, in this process, with no database; ``run.jobs`` says what ran.

It sits where the database would (``app.hooks.interceptor``), so whatever defers (``task.defer``,
``configure(...).defer``, ``defer_many``, ``app.defer("name", ...)``, their ``_async`` twins, a
handler deferring another job) is recorded in an in-memory store (``inline_store.py``) and run by
the worker's own attempt (``worker/executor.py``: context, hooks and middleware, the call, the
verdict), so a handler's next feature is one change that inline mode sees too; what differs is
set on the Runtime inline mode lends it (``inline_runtime.py``). Here: the interceptor, the
attempts until one settles the job, and what each attempt's Outcome records on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..job import JobStatus, Payload
from ..logs import install_job_context
from ..worker.executor import execute
from .inline_context import InlineJobContext
from .inline_runtime import claim, run_here, runtimes, state_after
from .inline_store import InlineJob, InlineStore

if TYPE_CHECKING:
    from ..app import App
    from ..enqueue.graph import Graph
    from ..enqueue.options import JobOptions
    from ..task import Task
    from ..worker.claim import ClaimedJob
    from ..worker.outcomes import Outcome

__all__ = ["InlineJob", "InlineJobContext", "InlineRun", "inline"]


class InlineRun(InlineStore):
    """What ``inline(app)`` yields: the jobs deferred in the block, in the order deferred.

    It is the App's interceptor for the block (``cronbase.hooks.Interceptor``).
    """

    def __init__(self, app: App, *, retries: bool = False) -> None:
        super().__init__()
        self.retries = retries
        # The worker's executor as inline mode lends it its Runtime (inline_runtime.py): for a
        # sync defer, and for defer_async.
        self._here, self._in_loop = runtimes(app.db, self)

    # -- the interceptor ---------------------------------------------------------------------

    def defer(
        self, task: Task[Any, Any], options: JobOptions, payloads: list[Payload]
    ) -> list[int]:
        __tracebackhide__ = True  # pytest shows the test and the handler, not these frames
        if task.is_async and _loop_running():
            raise UsageError(
                f"task {task.name!r} is async and an event loop is running in this thread: "
                f"in inline mode use `await {task.name}.defer_async(...)` (or defer_many_async)"
            )
        accepted = self._accepted(task, options, payloads)
        for job, runs in accepted:
            if runs:
                self._run(task, job)
        return [job.id for job, _ in accepted]

    async def defer_async(
        self, task: Task[Any, Any], options: JobOptions, payloads: list[Payload]
    ) -> list[int]:
        __tracebackhide__ = True
        accepted = self._accepted(task, options, payloads)
        for job, runs in accepted:
            if runs:
                await self._run_async(task, job)
        return [job.id for job, _ in accepted]

    def defer_graph(self, graph: Graph, tasks: list[Task[Any, Any]]) -> int:
        """A chain or group: its jobs one by one in graph order (parents first), each run once
        its parents succeeded, with their results; the workflow's id, as insert_graph's."""
        __tracebackhide__ = True
        ids: list[int] = []
        for task, job, runs in self._graph_jobs(graph, tasks, ids):
            if runs:
                self._run(task, job)
        return ids[(graph.workflow or 1) - 1]

    async def defer_graph_async(self, graph: Graph, tasks: list[Task[Any, Any]]) -> int:
        __tracebackhide__ = True
        ids: list[int] = []
        for task, job, runs in self._graph_jobs(graph, tasks, ids):
            if runs:
                await self._run_async(task, job)
        return ids[(graph.workflow or 1) - 1]

    def emit(self, key: str, payload: Any) -> bool:
        """app.events.emit in inline mode: kept (the first emission wins), and the jobs
        waiting for it run again now."""
        __tracebackhide__ = True
        woken = self._emitted(key, payload)
        for job, task in woken or ():
            self._run(task, job)
        return woken is not None

    async def emit_async(self, key: str, payload: Any) -> bool:
        __tracebackhide__ = True
        woken = self._emitted(key, payload)
        for job, task in woken or ():
            await self._run_async(task, job)
        return woken is not None

    # -- running: attempts until one succeeds, or the first failure without retries ------------

    def _run(self, task: Task[Any, Any], job: InlineJob) -> None:
        __tracebackhide__ = True
        while True:
            claimed = claim(task, job)
            if task.is_async:  # no loop runs in this thread (defer checked): one of its own
                outcome = asyncio.run(execute(self._here, claimed))
            else:
                # A copied context: current_job() and what middleware sets end with the
                # attempt, and a nested defer inside the handler gets its own.
                outcome = contextvars.copy_context().run(run_here, execute(self._here, claimed))
            if self._settled(job, self._ended(task, job, claimed, outcome)):
                return

    async def _run_async(self, task: Task[Any, Any], job: InlineJob) -> None:
        __tracebackhide__ = True
        while True:
            claimed = claim(task, job)
            # create_task copies the context: the attempt's current_job() does not leak out.
            outcome = await asyncio.create_task(execute(self._in_loop, claimed))
            if self._settled(job, self._ended(task, job, claimed, outcome)):
                return

    def _settled(self, job: InlineJob, error: Exception | None) -> bool:
        """Whether the job is done; re-raises the handler's error unless retries are simulated."""
        __tracebackhide__ = True
        if error is None:
            return True
        if not self.retries:
            raise error
        # Backoff is not slept: the next attempt runs at once.
        return job.status is JobStatus.DEAD

    def _ended(
        self, task: Task[Any, Any], job: InlineJob, claimed: ClaimedJob, outcome: Outcome
    ) -> Exception | None:
        """Record what the attempt came to, the state it leads the job to as the SQL would
        (job.next_state): the error to raise from defer, or None (a success, a snooze, a cancel,
        a suspension: queued, the attempt not counted, run again by the emit of its event)."""
        assert claimed.context is not None  # the executor made it (inline knows every task)
        job.progress, job.stage = claimed.context.progress
        job.result = claimed.value
        job.status, job.attempts, job.snoozes = state_after(job, outcome)
        if outcome.outcome == "suspended":
            job.waiting_for, job.rerun = outcome.waiting_for, task
            return None
        exc = outcome.exception
        job.error = exc if isinstance(exc, Exception) else None
        # Steering is not failing: nothing is raised from defer. A snoozed job waits (its delay
        # is not slept and it is not run again here); past max_snoozes it is dead.
        return job.error if outcome.outcome in ("failed", "dead") else None


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@contextlib.contextmanager
def inline(app: App, *, retries: bool = False) -> Iterator[InlineRun]:
    """Run every job the App's tasks defer at once, in this process, with no database.

    ```pycon
    >>> with cronbase.testing.inline(app) as run:  # doctest: +SKIP
    ...     send_invoice.defer(invoice_id=812)
    >>> run.jobs[0].status  # doctest: +SKIP
    <JobStatus.SUCCEEDED: 'succeeded'>
    ```

    A handler's exception is raised from the ``defer`` call (its job recorded ``failed`` first,
    or ``dead`` with no attempt left). With ``retries=True`` a failed job runs again at once,
    backoff not slept, up to its ``max_attempts``; one that never succeeds ends ``dead`` and
    nothing is raised. A handler that defers a job runs it then and there (nested, as Celery's
    eager mode does). ``run_at``, ``delay``, ``priority`` and ``connection=`` change nothing
    here: the job runs now; ``idempotency_key`` is honoured; task timeouts are not applied.
    ``current_job()`` works but ``transaction()``, which needs a database: test such handlers
    with :func:`cronbase.testing.drain` on a test database.
    """
    install_job_context()  # handlers' log records carry job_id, task, attempt, as on a worker
    run = InlineRun(app, retries=retries)
    hooks = app.hooks
    previous = hooks.interceptor
    hooks.interceptor = run
    try:
        yield run
    finally:
        hooks.interceptor = previous
