"""Inline mode: inside ``with cronbase.testing.inline(app) as run:`` every defer of the App's tasks
runs the handler at once, in this process, with no database; ``run.jobs`` says what ran.

It sits where the database would (``app.hooks.interceptor``), so whatever defers (``task.defer``,
``configure(...).defer``, ``defer_many``, ``app.defer("name", ...)``, their ``_async`` twins, a
handler deferring another job) is run the way a worker runs it: the payload through the same JSON
round trip, ``current_job()`` set, the App's hooks and middleware around the handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from ..context import JobContext, set_current
from ..enqueue.insert import encode_metadata
from ..errors import Cancel, CronbaseError, Snooze, UsageError, WorkflowError
from ..hooks import DeferCall
from ..job import JobStatus, JSONValue, Payload, next_state
from ..logs import install_job_context
from ..worker import outcomes
from ..workflow.durable import Durable, Suspend, check_seconds, check_wait, step_value
from .roundtrip import through_json

if TYPE_CHECKING:
    from ..app import App
    from ..enqueue.graph import Graph, Node
    from ..enqueue.options import JobOptions
    from ..task import Task


@dataclass(eq=False)
class InlineJob:
    """One job deferred in inline mode, as it stands (``run.jobs``).

    ``payload`` is what the handler's job carries (the payload after its JSON round trip);
    ``result`` the handler's return value (of the last attempt); ``error`` the exception of the
    last attempt that raised (None once one succeeds). ``status`` is a :class:`cronbase.JobStatus`
    and compares equal to its text: ``job.status == "succeeded"``.
    """

    id: int
    task: str
    queue: str
    payload: Payload
    options: JobOptions = field(repr=False)
    metadata: dict[str, JSONValue] | None = field(default=None, repr=False)
    status: JobStatus = JobStatus.QUEUED
    attempts: int = 0
    max_attempts: int = 20
    result: object = None
    error: Exception | None = None
    # Times the handler raised Snooze (a snoozed job stays queued: inline mode runs it no more).
    snoozes: int = 0
    # The last progress the handler reported with current_job().set_progress().
    progress: float | None = field(default=None, repr=False)
    stage: str | None = field(default=None, repr=False)
    # Finished steps (current_job().step) by name, and the event a suspended job waits for.
    steps: dict[str, Any] = field(default_factory=dict, repr=False)
    waiting_for: str | None = field(default=None, repr=False)
    # What runs it again when its event is emitted.
    _rerun: tuple[Task[Any, Any], dict[str, Any]] | None = field(default=None, repr=False)


def _parents_state(parents: list[InlineJob], on_parent_failure: str) -> str:
    """'run' (every parent succeeded, or ended with on_parent_failure 'run'), 'cancel' (one
    failed) or 'wait' (one has not ended: snoozed, or failed with retries left)."""
    final = (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED)
    failed = [p for p in parents if p.status in (JobStatus.DEAD, JobStatus.CANCELLED)]
    if failed and on_parent_failure != "run":
        return "cancel"
    return "run" if all(p.status in final for p in parents) else "wait"


class InlineDurable(Durable):
    """step / sleep / wait_for in inline mode: steps kept on the InlineJob (a retry skips the
    finished ones), sleeps return at once (no time passes in inline mode), wait_for returns an
    event emitted in the block or suspends the job until ``app.events.emit`` runs it again."""

    def __init__(self, context: JobContext, job: InlineJob, run: InlineRun) -> None:
        self.context = context
        self.job = job
        self.run = run
        self.names = set()
        self.sleeps = 0

    def step(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Any) -> Any:
        self._claim_name(name)
        if name not in self.job.steps:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                if inspect.iscoroutine(value):
                    value.close()
                raise WorkflowError(f"step {name!r}: {fn!r} is async: use await step_async()")
            self.job.steps[name] = step_value(name, value)
        return self.job.steps[name]

    async def step_async(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Any
    ) -> Any:
        self._claim_name(name)
        if name not in self.job.steps:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
            self.job.steps[name] = step_value(name, value)
        return self.job.steps[name]

    def sleep(self, duration: timedelta | float) -> None:
        check_seconds("sleep()", duration)
        self.job.steps[self._sleep_name()] = None

    async def sleep_async(self, duration: timedelta | float) -> None:
        self.sleep(duration)

    def wait_for(self, key: str, timeout: timedelta | float | None) -> Any:
        check_wait(key, timeout)
        if key in self.run.events:
            return self.run.events[key]
        raise Suspend(None, waiting_for=key)

    async def wait_for_async(
        self,
        key: str,
        timeout: timedelta | float | None,  # noqa: ASYNC109  # as Durable's
    ) -> Any:
        return self.wait_for(key, timeout)


class InlineJobContext(JobContext):
    """``current_job()`` in inline mode: all of it works but what needs the database."""

    _inline: InlineDurable | None = None

    def _steps(self) -> Durable:
        assert self._inline is not None
        return self._inline

    def transaction(self) -> NoReturn:
        raise self._no_database("transaction()")

    def transaction_async(self) -> NoReturn:
        raise self._no_database("transaction_async()")

    def _no_database(self, what: str) -> CronbaseError:
        return CronbaseError(
            f"job {self.id} (task {self.task!r}): {what} needs a database and inline mode has "
            "none; test this handler on a test database with cronbase.testing.drain(app) "
            "(the cronbase_app fixture gives one)"
        )


class InlineRun:
    """What ``inline(app)`` yields: the jobs deferred in the block, in the order deferred.

    It is the App's interceptor for the block (``cronbase.hooks.Interceptor``).
    """

    def __init__(self, *, retries: bool = False) -> None:
        self.retries = retries
        self.jobs: list[InlineJob] = []
        self._ids = itertools.count(1)
        # idempotency_key -> job id: a second defer with the key gets the first job, not a run,
        # as the database's unique index makes it.
        self._keys: dict[str, int] = {}
        self._lock = threading.Lock()
        # Events emitted in the block (app.events.emit), by key.
        self.events: dict[str, Any] = {}

    def jobs_of(self, task: Task[Any, Any] | str) -> list[InlineJob]:
        """The jobs of one task (a Task or its name), in the order deferred."""
        name = task if isinstance(task, str) else task.name
        return [job for job in self.jobs if job.task == name]

    def job(self, job_id: int) -> InlineJob:
        """The job with this id (what ``defer`` returned)."""
        for job in self.jobs:
            if job.id == job_id:
                return job
        known = ", ".join(str(job.id) for job in self.jobs) or "none"
        raise KeyError(f"no inline job with id {job_id!r}; deferred in this block: {known}")

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
        for job, kwargs in accepted:
            if kwargs is not None:
                self._run(task, job, kwargs)
        return [job.id for job, _ in accepted]

    async def defer_async(
        self, task: Task[Any, Any], options: JobOptions, payloads: list[Payload]
    ) -> list[int]:
        __tracebackhide__ = True
        accepted = self._accepted(task, options, payloads)
        for job, kwargs in accepted:
            if kwargs is not None:
                await self._run_async(task, job, kwargs)
        return [job.id for job, _ in accepted]

    def _accepted(
        self, task: Task[Any, Any], options: JobOptions, payloads: list[Payload]
    ) -> list[tuple[InlineJob, dict[str, Any] | None]]:
        """What the insert would do: refuse unknown parents, record the jobs, and hold back
        those whose parents have not all succeeded (kwargs None: not to run now)."""
        self._check_parents(options)
        return self._waiting(options, self._accept(task, options, payloads))

    def _check_parents(self, options: JobOptions) -> None:
        known = {job.id for job in self.jobs}
        missing = [job_id for job_id in options.after if job_id not in known]
        if missing:
            raise WorkflowError(
                f"unknown parent job(s) in after=: {', '.join(map(str, missing))}; "
                "nothing was deferred"
            )

    def _waiting(
        self, options: JobOptions, accepted: list[tuple[InlineJob, dict[str, Any] | None]]
    ) -> list[tuple[InlineJob, dict[str, Any] | None]]:
        """configure(after=...): jobs whose parents have not all succeeded do not run."""
        if not options.after:
            return accepted
        parents = [self.job(job_id) for job_id in options.after]
        state = _parents_state(parents, options.on_parent_failure)
        if state == "run":
            return accepted
        for job, _ in accepted:
            job.status = JobStatus.PENDING if state == "wait" else JobStatus.CANCELLED
        return [(job, None) for job, _ in accepted]

    def defer_graph(self, graph: Graph, tasks: list[Task[Any, Any]]) -> int:
        """A chain or group: its jobs one by one in graph order (parents first), each run once
        its parents succeeded, with their results; the workflow's id, as insert_graph's."""
        __tracebackhide__ = True
        ids: list[int] = []
        for task, job, kwargs in self._graph_jobs(graph, tasks, ids):
            if kwargs is not None:
                self._run(task, job, kwargs)
        return ids[(graph.workflow or 1) - 1]

    async def defer_graph_async(self, graph: Graph, tasks: list[Task[Any, Any]]) -> int:
        __tracebackhide__ = True
        ids: list[int] = []
        for task, job, kwargs in self._graph_jobs(graph, tasks, ids):
            if kwargs is not None:
                await self._run_async(task, job, kwargs)
        return ids[(graph.workflow or 1) - 1]

    def _graph_jobs(
        self, graph: Graph, tasks: list[Task[Any, Any]], ids: list[int]
    ) -> Iterator[tuple[Task[Any, Any], InlineJob, dict[str, Any] | None]]:
        """The graph's jobs recorded one by one in graph order, their ids added to ``ids``; each
        is given to the caller to run (kwargs) or not (None) before the next is recorded, whose
        payload may hold its result."""
        __tracebackhide__ = True
        for ord_, (node, task) in enumerate(zip(graph.nodes, tasks, strict=True), 1):
            job, kwargs = self._graph_node(graph, ord_, node, task, ids)
            ids.append(job.id)
            yield task, job, kwargs

    def _graph_node(
        self, graph: Graph, ord_: int, node: Node, task: Task[Any, Any], ids: list[int]
    ) -> tuple[InlineJob, dict[str, Any] | None]:
        """Record one node: pending, cancelled (a parent failed) or ready to run (kwargs)."""
        edges = [(self.job(ids[p - 1]), pos) for c, p, _, pos in graph.edges if c == ord_ and p]
        payload: dict[str, Any] = dict(node.payload)
        state = _parents_state([parent for parent, _ in edges], node.options.on_parent_failure)
        if node.receives is not None and edges:
            # A job that will not run holds None where the results would be, as the database
            # keeps the payload without them.
            results = [parent.result for parent, _ in sorted(edges, key=lambda e: e[1] or 0)]
            single = len(edges) == 1 and edges[0][1] is None
            payload[node.receives] = None if state != "run" else results[0] if single else results
        ((job, kwargs),) = self._accept(task, node.options, [payload])
        if state == "run":
            return job, kwargs
        job.status = JobStatus.PENDING if state == "wait" else JobStatus.CANCELLED
        return job, None

    # -- defer: what the insert would do ------------------------------------------------------

    def _accept(
        self, task: Task[Any, Any], options: JobOptions, payloads: list[Payload]
    ) -> list[tuple[InlineJob, dict[str, Any] | None]]:
        """Record the new jobs (kwargs None: an idempotency_key already taken, nothing to run).

        Every payload goes through JSON first, so a bad one refuses the whole call, as the
        insert would; the App's defer middleware runs around it and may add metadata.
        """
        converted = [through_json(task, payload) for payload in payloads]
        if options.fair_key is not None:
            # A payload without the fair key's fields is refused, as the insert refuses it.
            for stored, _ in converted:
                options.flow_key(stored, task.name)
        call = DeferCall(task.name, options.queue, payloads)
        accepted: list[tuple[InlineJob, dict[str, Any] | None]] = []
        with task.hooks.around_defer(call):
            # Through JSON as jobs.metadata stores it: metadata that is not JSON fails the
            # defer here as the insert would.
            metadata = _json_metadata(call.metadata)
            with self._lock:
                for stored, arguments in converted:
                    job, todo = self._record(task, options, stored, arguments)
                    if todo is not None:
                        job.metadata = metadata
                    accepted.append((job, todo))
            call.ids[:] = [job.id for job, _ in accepted]
        return accepted

    def _record(
        self, task: Task[Any, Any], options: JobOptions, stored: Payload, kwargs: dict[str, Any]
    ) -> tuple[InlineJob, dict[str, Any] | None]:
        key = options.idempotency_key
        if key is not None and key in self._keys:
            return self.job(self._keys[key]), None
        job = InlineJob(
            id=next(self._ids),
            task=task.name,
            queue=options.queue,
            payload=stored,
            options=options,
            max_attempts=options.max_attempts,
        )
        self.jobs.append(job)
        if key is not None:
            self._keys[key] = job.id
        return job, kwargs

    # -- running: attempts until one succeeds, or the first failure without retries ------------

    def _run(self, task: Task[Any, Any], job: InlineJob, kwargs: dict[str, Any]) -> None:
        __tracebackhide__ = True
        attempt: Callable[[], Exception | None]
        if task.is_async:
            # No loop runs in this thread (defer checked): the handler gets one of its own.
            def attempt() -> Exception | None:
                __tracebackhide__ = True
                return asyncio.run(self._attempt_async(task, job, kwargs))
        else:
            # A copied context: current_job() and what middleware sets end with the attempt,
            # and a nested defer inside the handler gets its own.
            def attempt() -> Exception | None:
                __tracebackhide__ = True
                return contextvars.copy_context().run(self._attempt, task, job, kwargs)

        while not self._settled(job, attempt()):
            pass

    async def _run_async(
        self, task: Task[Any, Any], job: InlineJob, kwargs: dict[str, Any]
    ) -> None:
        __tracebackhide__ = True
        # create_task copies the context: the attempt's current_job() does not leak out.
        while not self._settled(
            job, await asyncio.create_task(self._attempt_async(task, job, kwargs))
        ):
            pass

    def _settled(self, job: InlineJob, error: Exception | None) -> bool:
        """Whether the job is done; re-raises the handler's error unless retries are simulated."""
        __tracebackhide__ = True
        if error is None:
            return True
        if not self.retries:
            raise error
        # Backoff is not slept: the next attempt runs at once.
        return job.status is JobStatus.DEAD

    def _attempt(
        self, task: Task[Any, Any], job: InlineJob, kwargs: dict[str, Any]
    ) -> Exception | None:
        __tracebackhide__ = True
        context, started = self._start(task, job)
        try:
            job.result = task.hooks.call(context, task.func, kwargs)
        except (Suspend, Exception) as exc:
            return self._raised(task, job, kwargs, context, exc, started)
        return self._end(task, job, context, None, started)

    async def _attempt_async(
        self, task: Task[Any, Any], job: InlineJob, kwargs: dict[str, Any]
    ) -> Exception | None:
        __tracebackhide__ = True
        context, started = self._start(task, job)
        try:
            if task.is_async:
                job.result = await task.hooks.call_async(context, task.func, kwargs)
            else:
                # As the worker does: a sync handler runs in a thread (to_thread copies the
                # context, so current_job() works there), never blocking the caller's loop.
                job.result = await asyncio.to_thread(task.hooks.call, context, task.func, kwargs)
        except (Suspend, Exception) as exc:
            return self._raised(task, job, kwargs, context, exc, started)
        return self._end(task, job, context, None, started)

    def _raised(
        self,
        task: Task[Any, Any],
        job: InlineJob,
        kwargs: dict[str, Any],
        context: InlineJobContext,
        exc: Suspend | Exception,
        started: float,
    ) -> Exception | None:
        """The handler raised: the attempt ended (_end), or it waits for an event not emitted
        yet (wait_for): queued, the attempt not counted, run again by the emit (inline sleeps
        never suspend)."""
        __tracebackhide__ = True
        if not isinstance(exc, Suspend):
            return self._end(task, job, context, exc, started)
        job.status, job.attempts, job.snoozes = next_state(
            "suspended", attempts=job.attempts, max_attempts=job.max_attempts, snoozes=job.snoozes
        )
        job.waiting_for = exc.waiting_for
        job._rerun = (task, kwargs)
        duration = timedelta(seconds=time.monotonic() - started)
        task.hooks.ended(context, "suspended", None, duration)
        return None

    # -- events ----------------------------------------------------------------------------------

    def emit(self, key: str, payload: Any) -> bool:
        """app.events.emit in inline mode: kept (the first emission wins), and the jobs
        waiting for it run again now."""
        __tracebackhide__ = True
        woken = self._emitted(key, payload)
        for job, (task, kwargs) in woken or ():
            self._run(task, job, kwargs)
        return woken is not None

    async def emit_async(self, key: str, payload: Any) -> bool:
        __tracebackhide__ = True
        woken = self._emitted(key, payload)
        for job, (task, kwargs) in woken or ():
            await self._run_async(task, job, kwargs)
        return woken is not None

    def _emitted(
        self, key: str, payload: Any
    ) -> list[tuple[InlineJob, tuple[Task[Any, Any], dict[str, Any]]]] | None:
        """Record the event; the jobs it wakes (None: it had been emitted already)."""
        if key in self.events:
            return None
        self.events[key] = json.loads(json.dumps(payload))
        return [
            (job, job._rerun)
            for job in self.jobs
            if job.waiting_for == key and job._rerun is not None
        ]

    def _start(self, task: Task[Any, Any], job: InlineJob) -> tuple[InlineJobContext, float]:
        """The attempt begun: its context, and when it started (time.monotonic())."""
        job.attempts += 1
        job.status = JobStatus.RUNNING
        job.result = None
        context = InlineJobContext(
            id=job.id,
            task=job.task,
            queue=job.queue,
            attempt=job.attempts,
            max_attempts=job.max_attempts,
            payload=job.payload,
            metadata=job.metadata,
            # Inline, jobs are deferred and run by the same code: the task's own version.
            task_version=task.defaults.version,
        )
        context._inline = InlineDurable(context, job, self)
        job.waiting_for = None
        set_current(context)
        task.hooks.started(context)
        return context, time.monotonic()

    def _end(
        self,
        task: Task[Any, Any],
        job: InlineJob,
        context: InlineJobContext,
        error: Exception | None,
        started: float,
    ) -> Exception | None:
        """What the attempt came to, decided as the worker decides it (worker/outcomes.py), and
        the state that leads the job to (job.next_state, the rules of the SQL): the error to
        raise from defer, or None (a success, a snooze, a cancel)."""
        duration = timedelta(seconds=time.monotonic() - started)
        job.progress, job.stage = context.progress
        if error is None:
            verdict = outcomes.returned(
                task, job.id, job.result, completed=False, max_result_bytes=task.db.max_result_bytes
            )
        else:
            verdict = outcomes.raised(task, job.attempts, error, completed=False)
            if verdict.outcome in ("lost", "released"):  # no database here to lose
                verdict = outcomes.failure(error, retry_in=0.0, give_up=task.gives_up(error))
        job.status, job.attempts, job.snoozes = next_state(
            verdict.outcome,
            attempts=job.attempts,
            max_attempts=job.max_attempts,
            snoozes=job.snoozes,
            snooze_cap=verdict.snooze_cap,
        )
        exc = verdict.exception
        job.error = exc if isinstance(exc, Exception) else None
        name = (
            "snoozed"
            if verdict.outcome == "snoozed" and job.status is JobStatus.QUEUED
            else job.status.value
        )
        task.hooks.ended(context, name, exc, duration)
        # Steering is not failing: nothing is raised from defer. A snoozed job waits (its delay
        # is not slept and it is not run again here); past max_snoozes it is dead.
        failed = verdict.outcome in ("failed", "dead") and not isinstance(exc, Snooze | Cancel)
        return job.error if failed else None


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _json_metadata(metadata: dict[str, JSONValue]) -> dict[str, JSONValue] | None:
    if not metadata:
        return None
    decoded: dict[str, JSONValue] = json.loads(encode_metadata(metadata))
    return decoded


@contextlib.contextmanager
def inline(app: App, *, retries: bool = False) -> Iterator[InlineRun]:
    """Run every job the App's tasks defer at once, in this process, with no database.

    >>> with cronbase.testing.inline(app) as run:  # doctest: +SKIP
    ...     send_invoice.defer(invoice_id=812)
    >>> run.jobs[0].status  # doctest: +SKIP
    <JobStatus.SUCCEEDED: 'succeeded'>

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
    run = InlineRun(retries=retries)
    hooks = app.hooks
    previous = hooks.interceptor
    hooks.interceptor = run
    try:
        yield run
    finally:
        hooks.interceptor = previous
