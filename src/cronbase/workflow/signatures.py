"""Chains and groups: graphs of jobs deferred in one statement, each result passed on.

``task.s(**payload)`` is a signature: a job not yet deferred. ``chain(a.s(x=1), b.s(), c.s())``
runs them one after the other, each receiving the previous one's result; ``group([...])`` runs
its members side by side and ``group([...]).then(summarise.s())`` runs the callback once, with
the list of their results in order. A job receives a result under the parameter ``previous``
when its handler has one (or the parameter ``sig.receive(name)`` names); one whose handler
takes neither just waits for its parents.

``.defer()`` inserts the whole graph in one statement (``insert_graph``, inside the caller's
transaction with ``configure(connection=...)``) and returns the workflow's id: the last job's
when the workflow ends in one job (a chain, a group's callback), which ``app.jobs.wait`` then
follows to the workflow's result; a bare group's first job's otherwise. The database releases
each job when its parents succeeded (migration 0012's trigger), so the fan-in of a group runs
once however many workers finish its last members together.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Self

from ..durations import DurationLike, optional_duration
from ..enqueue.graph import ON_PARENT_FAILURE, Graph, Node
from ..errors import WorkflowError

if TYPE_CHECKING:
    from ..db.connections import CallerConnection
    from ..db.database import Database
    from ..enqueue.options import JobOptions
    from ..task import Task

PREVIOUS = "previous"
# A graph is one INSERT: its arrays travel in one message. Beyond this, defer in parts.
MAX_NODES = 100_000


@dataclass(frozen=True)
class Signature:
    """A job not yet deferred: a task, its payload, its options (``task.s(**payload)``)."""

    task: Task[Any, Any]
    payload: dict[str, Any]
    options: JobOptions
    # The payload key its parents' results arrive under; None: it takes none.
    receives: str | None

    @classmethod
    def of(cls, task: Task[Any, Any], payload: dict[str, Any]) -> Signature:
        receives = PREVIOUS if PREVIOUS in task.signature.parameters else None
        return cls(task, dict(payload), task.options(), None).receive(receives)

    def receive(self, name: str | None) -> Signature:
        """Receive the previous result under ``name`` (a parameter of the handler), or not at
        all with None."""
        if name is not None:
            if not isinstance(name, str) or not name.isidentifier():
                raise WorkflowError(f"receive() needs a parameter name, got {name!r}")
            if not self.task._accepts(name):
                raise WorkflowError(
                    f"task {self.task.name!r} has no parameter {name!r} to receive the previous "
                    f"result in (it takes: {', '.join(self.task.signature.parameters) or 'none'})"
                )
            if name in self.payload:
                raise WorkflowError(
                    f"task {self.task.name!r}: {name!r} is given in the payload and would be "
                    "replaced by the previous result; leave it out, or receive(None)"
                )
        if name is None:
            self.task.check_payload(self.payload)
        else:
            # The keys with the received value in place; its value is the parents' result,
            # known only when they ran (the worker checks it then).
            self.task.check_received({**self.payload, name: None}, name)
        return replace(self, receives=name)

    def set(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        lease: DurationLike | None = None,
        delay: DurationLike | None = None,
        run_at: datetime | None = None,
        on_parent_failure: Literal["cancel", "run"] | None = None,
    ) -> Signature:
        """These options for this job of the workflow (the task's defaults otherwise); ``lease``
        and ``delay``: timedeltas or seconds."""
        changes: dict[str, Any] = {
            "queue": queue,
            "priority": priority,
            "max_attempts": max_attempts,
            "lease": optional_duration("lease", lease, signed=True),
            "delay": optional_duration("delay", delay, signed=True),
            "run_at": run_at,
            "on_parent_failure": on_parent_failure,
        }
        if on_parent_failure is not None and on_parent_failure not in ON_PARENT_FAILURE:
            raise WorkflowError(
                f"on_parent_failure must be 'cancel' or 'run', got {on_parent_failure!r}"
            )
        options = replace(self.options, **{k: v for k, v in changes.items() if v is not None})
        options.check()
        return replace(self, options=options)

    def _add(self, graph: Graph, tasks: list[Task[Any, Any]]) -> _Part:
        if self.options.has_keys:
            raise WorkflowError(
                f"task {self.task.name!r} is unique_for {self.options.unique_for}: a workflow's "
                "jobs are deferred as they are, without uniqueness keys"
            )
        if len(graph.nodes) >= MAX_NODES:
            raise WorkflowError(f"a workflow holds at most {MAX_NODES} jobs; defer it in parts")
        tasks.append(self.task)
        node = graph.add(Node(self.task.name, self.options, self.payload, self.receives))
        return _Part([node], [node], many=False)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.payload.items())
        return f"{self.task.name}.s({args})"


@dataclass(frozen=True)
class _Part:
    entries: list[int]  # nodes with no parent inside the part
    exits: list[int]  # nodes whose results are the part's
    many: bool  # the part's result is the list of its exits' results (a group)


def _check_item(item: object, where: str) -> None:
    if not isinstance(item, Signature | Chain | Group):
        hint = " (call task.s(...) to make one)" if hasattr(item, "defer") else ""
        raise WorkflowError(f"{where} takes task.s(...), chains and groups, got {item!r}{hint}")


class _Workflow:
    """What chains and groups share: building the graph, deferring it."""

    connection: CallerConnection | None = None

    def _add(self, graph: Graph, tasks: list[Task[Any, Any]]) -> _Part:
        raise NotImplementedError

    def configure(self, *, connection: CallerConnection | None = None) -> Self:
        """Defer inside the caller's transaction: a psycopg connection, or a SQLAlchemy
        Session / Connection (their async twins for defer_async)."""
        bound = copy.copy(self)
        bound.connection = connection
        return bound

    def graph(self) -> tuple[Graph, list[Task[Any, Any]]]:
        """The nodes and edges this workflow inserts, and the task of each node."""
        graph = Graph()
        tasks: list[Task[Any, Any]] = []
        part = self._add(graph, tasks)
        graph.workflow = part.exits[0] if not part.many else part.entries[0]
        return graph, tasks

    def _database(self, tasks: list[Task[Any, Any]]) -> Database:
        databases = {id(t.db): t.db for t in tasks}
        if len(databases) > 1:
            raise WorkflowError("a workflow's tasks must belong to one App")
        return tasks[0].db

    def defer(self) -> int:
        """Insert the whole workflow atomically; returns its id (see the module docstring)."""
        graph, tasks = self.graph()
        hooks = tasks[0].hooks
        if hooks.interceptor is not None:
            return int(hooks.interceptor.defer_graph(graph, tasks))
        ids = hooks.defer_graph(self._database(tasks), graph, tasks, self.connection)
        return ids[graph.workflow - 1] if graph.workflow else ids[0]

    async def defer_async(self) -> int:
        graph, tasks = self.graph()
        hooks = tasks[0].hooks
        if hooks.interceptor is not None:
            return int(await hooks.interceptor.defer_graph_async(graph, tasks))
        database = self._database(tasks)
        ids = await hooks.defer_graph_async(database, graph, tasks, self.connection)
        return ids[graph.workflow - 1] if graph.workflow else ids[0]


def _link(graph: Graph, before: _Part, after: _Part) -> None:
    for child in after.entries:
        if before.many:
            for position, parent in enumerate(before.exits):
                graph.link(child, parent, position)
        else:
            graph.link(child, before.exits[0], None)


@dataclass
class Chain(_Workflow):
    """Jobs one after the other, each receiving the previous result (``cronbase.chain``)."""

    items: tuple[Signature | Chain | Group, ...]
    connection: CallerConnection | None = None

    def _add(self, graph: Graph, tasks: list[Task[Any, Any]]) -> _Part:
        parts = [item._add(graph, tasks) for item in self.items]
        for before, after in itertools.pairwise(parts):
            _link(graph, before, after)
        return _Part(parts[0].entries, parts[-1].exits, parts[-1].many)

    def then(self, *items: Signature | Chain | Group) -> Chain:
        """This chain, then more."""
        return chain(self, *items)


@dataclass
class Group(_Workflow):
    """Jobs side by side; their results, in order, are the group's (``cronbase.group``)."""

    items: tuple[Signature | Chain, ...]
    connection: CallerConnection | None = None

    def _add(self, graph: Graph, tasks: list[Task[Any, Any]]) -> _Part:
        parts = [item._add(graph, tasks) for item in self.items]
        entries = [node for part in parts for node in part.entries]
        return _Part(entries, [part.exits[0] for part in parts], many=True)

    def then(self, callback: Signature | Chain | Group) -> Chain:
        """Run ``callback`` once every member succeeded, with the list of their results."""
        return chain(self, callback)


def chain(*items: Signature | Chain | Group) -> Chain:
    """``chain(a.s(x=1), b.s(), c.s())``: each job runs once the previous one succeeded, and
    receives its result (a group's: the list of its members' results)."""
    if len(items) == 1 and isinstance(items[0], list | tuple):
        items = tuple(items[0])
    if not items:
        raise WorkflowError("a chain needs at least one job")
    for item in items:
        _check_item(item, "chain()")
    return Chain(tuple(items))


def group(items: Iterable[Signature | Chain]) -> Group:
    """``group([a.s(n=i) for i in range(1000)])``: jobs that run side by side."""
    if isinstance(items, Signature | Chain | Group):
        raise WorkflowError("group() takes a list: group([a.s(n=1), a.s(n=2)])")
    members = tuple(items)
    if not members:
        raise WorkflowError("a group needs at least one job")
    for item in members:
        _check_item(item, "group()")
        if isinstance(item, Group):
            raise WorkflowError(
                "a group cannot hold a group directly: its members' results would be a list of "
                "lists; wrap it in a chain, or flatten it"
            )
        if isinstance(item, Chain) and _ends_in_group(item):
            raise WorkflowError("a group's member chain must end in one job, not a group")
    return Group(members)


def _ends_in_group(chain_: Chain) -> bool:
    last = chain_.items[-1]
    return isinstance(last, Group) or (isinstance(last, Chain) and _ends_in_group(last))
