"""Inline mode's in-memory store: what the database would hold in its place (``run.jobs``).

A defer is recorded here as the insert would record it (ids, the payload's JSON round trip, the
defer middleware and its metadata, idempotency keys, parents and graphs, the fair key's check),
and events as ``app.events.emit`` would keep them. Running a job is not this module's: inline
mode hands each attempt to the worker's own executor (``inline.py``).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..enqueue.insert import encode_metadata
from ..errors import WorkflowError
from ..hooks import DeferCall
from ..job import JobStatus, JSONValue, Payload
from .roundtrip import through_json

if TYPE_CHECKING:
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
    rerun: Task[Any, Any] | None = field(default=None, repr=False)


# What _accepted and _graph_jobs give the caller: each job recorded, and whether to run it now.
Accepted = list[tuple[InlineJob, bool]]


def _parents_state(parents: list[InlineJob], on_parent_failure: str) -> str:
    """'run' (every parent succeeded, or ended with on_parent_failure 'run'), 'cancel' (one
    failed) or 'wait' (one has not ended: snoozed, or failed with retries left)."""
    final = (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED)
    failed = [p for p in parents if p.status in (JobStatus.DEAD, JobStatus.CANCELLED)]
    if failed and on_parent_failure != "run":
        return "cancel"
    return "run" if all(p.status in final for p in parents) else "wait"


class InlineStore:
    """The jobs deferred in the block, in the order deferred, and the events emitted."""

    def __init__(self) -> None:
        self.jobs: list[InlineJob] = []
        self._by_id: dict[int, InlineJob] = {}
        # The tasks deferred, by name: the executor finds a job's task here, as a worker does
        # in its App's.
        self.tasks: dict[str, Task[Any, Any]] = {}
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
        job = self._by_id.get(job_id)
        if job is not None:
            return job
        known = ", ".join(str(job.id) for job in self.jobs) or "none"
        raise KeyError(f"no inline job with id {job_id!r}; deferred in this block: {known}")

    def _accepted(
        self, task: Task[Any, Any], options: JobOptions, payloads: list[Payload]
    ) -> Accepted:
        """What the insert would do: refuse unknown parents, record the jobs, and hold back
        those whose parents have not all succeeded (not to run now)."""
        missing = [job_id for job_id in options.after if job_id not in self._by_id]
        if missing:
            raise WorkflowError(
                f"unknown parent job(s) in after=: {', '.join(map(str, missing))}; "
                "nothing was deferred"
            )
        accepted = self._accept(task, options, payloads)
        if not options.after:
            return accepted
        parents = [self.job(job_id) for job_id in options.after]
        state = _parents_state(parents, options.on_parent_failure)
        if state == "run":
            return accepted
        for job, _ in accepted:
            job.status = JobStatus.PENDING if state == "wait" else JobStatus.CANCELLED
        return [(job, False) for job, _ in accepted]

    def _graph_jobs(
        self, graph: Graph, tasks: list[Task[Any, Any]], ids: list[int]
    ) -> Iterator[tuple[Task[Any, Any], InlineJob, bool]]:
        """The graph's jobs recorded one by one in graph order, their ids added to ``ids``; each
        is given to the caller to run (True) or not before the next is recorded, whose payload
        may hold its result."""
        __tracebackhide__ = True
        for ord_, (node, task) in enumerate(zip(graph.nodes, tasks, strict=True), 1):
            job, runs = self._graph_node(graph, ord_, node, task, ids)
            ids.append(job.id)
            yield task, job, runs

    def _graph_node(
        self, graph: Graph, ord_: int, node: Node, task: Task[Any, Any], ids: list[int]
    ) -> tuple[InlineJob, bool]:
        """Record one node: pending, cancelled (a parent failed) or ready to run."""
        edges = [(self.job(ids[p - 1]), pos) for c, p, _, pos in graph.edges if c == ord_ and p]
        payload: dict[str, Any] = dict(node.payload)
        state = _parents_state([parent for parent, _ in edges], node.options.on_parent_failure)
        if node.receives is not None and edges:
            # A job that will not run holds None where the results would be, as the database
            # keeps the payload without them.
            results = [parent.result for parent, _ in sorted(edges, key=lambda e: e[1] or 0)]
            single = len(edges) == 1 and edges[0][1] is None
            payload[node.receives] = None if state != "run" else results[0] if single else results
        ((job, runs),) = self._accept(task, node.options, [payload])
        if state == "run":
            return job, runs
        job.status = JobStatus.PENDING if state == "wait" else JobStatus.CANCELLED
        return job, False

    def _accept(
        self, task: Task[Any, Any], options: JobOptions, payloads: list[Payload]
    ) -> Accepted:
        """Record the new jobs (not to run: an idempotency_key already taken).

        Every payload goes through JSON first, so a bad one refuses the whole call, as the
        insert would; the App's defer middleware runs around it and may add metadata.
        """
        stored = [through_json(task, payload)[0] for payload in payloads]
        if options.fair_key is not None:
            # A payload without the fair key's fields is refused, as the insert refuses it.
            for one in stored:
                options.flow_key(one, task.name)
        call = DeferCall(task.name, options.queue, payloads)
        accepted: Accepted = []
        with task.hooks.around_defer(call):
            # Through JSON as jobs.metadata stores it: metadata that is not JSON fails the
            # defer here as the insert would.
            metadata = _json_metadata(call.metadata)
            with self._lock:
                for payload in stored:
                    job, new = self._new_job(task, options, payload)
                    if new:
                        job.metadata = metadata
                    accepted.append((job, new))
            call.ids[:] = [job.id for job, _ in accepted]
        return accepted

    def _new_job(
        self, task: Task[Any, Any], options: JobOptions, stored: Payload
    ) -> tuple[InlineJob, bool]:
        key = options.idempotency_key
        if key is not None and key in self._keys:
            return self.job(self._keys[key]), False
        job = InlineJob(
            id=next(self._ids),
            task=task.name,
            queue=options.queue,
            payload=stored,
            options=options,
            max_attempts=options.max_attempts,
        )
        self.jobs.append(job)
        self._by_id[job.id] = job
        self.tasks[task.name] = task
        if key is not None:
            self._keys[key] = job.id
        return job, True

    def _emitted(self, key: str, payload: Any) -> list[tuple[InlineJob, Task[Any, Any]]] | None:
        """Record the event; the jobs it wakes (None: it had been emitted already)."""
        if key in self.events:
            return None
        self.events[key] = json.loads(json.dumps(payload))
        return [
            (job, job.rerun)
            for job in self.jobs
            if job.waiting_for == key and job.rerun is not None
        ]


def _json_metadata(metadata: dict[str, JSONValue]) -> dict[str, JSONValue] | None:
    if not metadata:
        return None
    decoded: dict[str, JSONValue] = json.loads(encode_metadata(metadata))
    return decoded
