"""Celery's canvas (signatures, ``chain``, ``group``, ``chord``, ``|``) on cronbase's workflows.

Each is built into ``cronbase.chain`` / ``group`` when it is sent, and inserted in one statement.
As in Celery, a signature after another one gets the previous result as its first positional
argument (cronbase passes it by name: the parameter of that place receives it), a group's
callback gets the list of the members' results, and ``si()`` gets nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

from ...errors import ConfigurationError, WorkflowError
from ...workflow import signatures as cronbase_canvas
from .arguments import bind, bind_received
from .current import get_current
from .result import AsyncResult, GroupResult
from .settings import warn
from .task import PRIORITY_WARNING, Sendable, aware

if TYPE_CHECKING:
    from .task import Task

Canvas = Union["Signature", "chain", "group", "chord"]
CronbaseItem = cronbase_canvas.Signature | cronbase_canvas.Chain | cronbase_canvas.Group

# apply_async options a signature may carry into a workflow (each becomes Signature.set's).
_SIGNATURE_OPTIONS = ("queue", "priority", "countdown", "eta")
# apply_async options that mean nothing without a broker: accepted, said so once.
_BROKER_OPTIONS = frozenset(
    {"retry", "retry_policy", "routing_key", "exchange", "exchange_type", "serializer",
     "compression", "headers", "producer", "connection", "add_to_parent", "delivery_mode",
     "mandatory", "immediate", "shadow"}
)  # fmt: skip


def call_options(task: str, options: Mapping[str, Any]) -> None:
    """Refuse apply_async options cronbase has no meaning for; warn about broker-only ones."""
    unknown = sorted(set(options) - _BROKER_OPTIONS)
    if unknown:
        raise ConfigurationError(
            f"task {task!r}: apply_async option {unknown[0]!r} is not supported; supported: "
            "args, kwargs, countdown, eta, expires, queue, priority, task_id, link"
        )
    if options:
        warn(
            f"task {task!r}: {', '.join(sorted(options))} ignored: the job is a row written "
            "in one statement, with no broker to route or retry through",
            stacklevel=3,
        )


class _Canvas:
    """What every canvas shares: ``|`` makes a chain."""

    def __or__(self, other: Canvas) -> chain:
        if isinstance(self, group) and isinstance(other, Signature | chain):
            return chain(chord(self.tasks, other))
        return chain(self, other)

    def build(self, receives: bool) -> CronbaseItem:
        raise NotImplementedError

    def exits(self) -> list[Task]:
        """The tasks whose results this part passes on."""
        raise NotImplementedError


class Signature(_Canvas, Sendable[AsyncResult]):
    """A task with arguments and options, not yet sent (``task.s(...)``, ``task.si(...)``).
    Calling it runs the task here; ``delay()`` / ``apply_async()`` enqueue it."""

    def __init__(
        self,
        task: Task,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        options: Mapping[str, Any],
        *,
        immutable: bool = False,
    ) -> None:
        self.task = task
        self.args = tuple(args)
        self.kwargs = dict(kwargs)
        self.options = dict(options)
        self.immutable = immutable

    def __repr__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.task.name}.{'si' if self.immutable else 's'}({', '.join(parts)})"

    @property
    def name(self) -> str:
        return self.task.name

    @property
    def type(self) -> Task:
        return self.task

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the task here with these arguments (and the signature's), as Celery does."""
        return self.task(*self.args, *args, **{**self.kwargs, **kwargs})

    def set(self, **options: Any) -> Signature:
        """Options for when it is sent (``queue``, ``priority``, ``countdown``, ``eta``)."""
        self.options.update({k: v for k, v in options.items() if v is not None})
        return self

    def clone(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> Signature:
        """A copy with more arguments and options."""
        return Signature(
            self.task,
            self.args + tuple(args),
            {**self.kwargs, **(kwargs or {})},
            {**self.options, **options},
            immutable=self.immutable,
        )

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> AsyncResult:
        """Enqueue it (an immutable signature ignores ``args`` and ``kwargs``, as in Celery)."""
        if not self.immutable:
            args = self.args + tuple(args or ())
            kwargs = {**self.kwargs, **(kwargs or {})}
        else:
            args, kwargs = self.args, self.kwargs
        return self.task.apply_async(args, kwargs, **{**self.options, **options})

    def build(self, receives: bool) -> cronbase_canvas.Signature:
        task = self.task
        unknown = sorted(set(self.options) - set(_SIGNATURE_OPTIONS))
        if unknown:
            raise WorkflowError(
                f"{self!r} in a workflow: option {unknown[0]!r} is not supported there "
                f"(supported: {', '.join(_SIGNATURE_OPTIONS)})"
            )
        if receives and not self.immutable:
            payload, received = bind_received(
                task.name, task.handler_signature, self.args, self.kwargs
            )
        else:
            payload, received = (
                bind(task.name, task.handler_signature, self.args, self.kwargs),
                None,
            )
        cronbase_task = task.cronbase_task
        built = cronbase_canvas.Signature(cronbase_task, payload, cronbase_task.options(), None)
        built = built.receive(received)
        priority = self.options.get("priority")
        if priority is not None:
            warn(PRIORITY_WARNING.format(priority), stacklevel=5)
        elif task.priority is not None:
            priority = task.priority
        countdown = self.options.get("countdown")
        eta = self.options.get("eta")
        return built.set(
            queue=task.queue_for(self.options.get("queue")),
            priority=priority,
            delay=countdown,
            run_at=None if eta is None else aware("eta", eta),
        )

    def exits(self) -> list[Task]:
        return [self.task]


def signature(
    varies: str | Task | Signature,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    **options: Any,
) -> Signature:
    """A signature by task name or task (``signature("proj.tasks.add", args=(2, 2))``)."""
    if isinstance(varies, Signature):
        return varies.clone(args or (), kwargs, **options)
    immutable = bool(options.pop("immutable", False))
    task = get_current().tasks[varies] if isinstance(varies, str) else varies
    return task.signature(args, kwargs, immutable=immutable, **options)


subtask = signature


def _items(tasks: tuple[Any, ...]) -> list[Canvas]:
    """Celery's ``chain(a, b)`` and ``chain([a, b])`` (or a generator) alike."""
    if len(tasks) == 1 and not isinstance(tasks[0], _Canvas) and isinstance(tasks[0], Iterable):
        tasks = tuple(tasks[0])
    for item in tasks:
        if not isinstance(item, _Canvas):
            hint = " (call task.s(...) to make one)" if hasattr(item, "delay") else ""
            raise WorkflowError(f"a canvas takes signatures, got {item!r}{hint}")
    return list(tasks)


def _check_passed(before: Canvas, after: Canvas) -> None:
    """A task whose result is not stored cannot pass it on."""
    receiver = _first_mutable(after)
    if receiver is None:
        return
    for task in before.exits():
        if task.ignore_result:
            raise WorkflowError(
                f"task {task.name!r} has ignore_result=True: its result is not stored, so "
                f"{receiver!r} would receive None; use .si() there, or drop ignore_result"
            )


def _first_mutable(item: Canvas) -> Signature | None:
    if isinstance(item, Signature):
        return None if item.immutable else item
    if isinstance(item, chain):
        return _first_mutable(item.tasks[0])
    members = item.tasks
    return next((s for s in (_first_mutable(m) for m in members) if s is not None), None)


class _Workflow(_Canvas):
    def _check_options(self, options: Mapping[str, Any]) -> None:
        if options:
            raise WorkflowError(
                f"{type(self).__name__}.apply_async({', '.join(sorted(options))}=...): set "
                "options on its signatures (sig.set(queue=...)); a workflow takes args and kwargs"
            )

    def _with_arguments(self, args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None) -> Any:
        return self if not args and not kwargs else self._partial(tuple(args or ()), kwargs or {})

    def _partial(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        raise NotImplementedError


class chain(_Workflow, Sendable[AsyncResult]):  # Celery's name
    """Tasks one after another, each given the previous result: ``chain(a.s(1), b.s())`` or
    ``a.s(1) | b.s()``. ``apply_async()`` returns the last task's result."""

    def __init__(self, *tasks: Any) -> None:
        self.tasks = _items(tasks)
        if not self.tasks:
            raise WorkflowError("a chain needs at least one task")

    def __repr__(self) -> str:
        return " | ".join(map(repr, self.tasks))

    def __or__(self, other: Canvas) -> chain:
        return chain(*self.tasks, other)

    def build(self, receives: bool) -> cronbase_canvas.Chain:
        for before, after in itertools.pairwise(self.tasks):
            _check_passed(before, after)
        parts = [item.build(receives if i == 0 else True) for i, item in enumerate(self.tasks)]
        return cronbase_canvas.chain(*parts)

    def exits(self) -> list[Task]:
        return self.tasks[-1].exits()

    def _partial(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> chain:
        first = self.tasks[0]
        if not isinstance(first, Signature):
            raise WorkflowError("a chain given arguments must start with a signature")
        return chain(first.clone(args, kwargs), *self.tasks[1:])

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> AsyncResult:
        """Insert the chain in one statement; the result is its last task's."""
        self._check_options(options)
        built = self._with_arguments(args, kwargs).build(False)
        first = _first_task(self)
        return AsyncResult(str(built.defer()), first.app)

    __call__ = Sendable.delay


class group(_Workflow, Sendable[GroupResult]):  # Celery's name
    """Tasks side by side: ``group(a.s(i) for i in range(10))``; its result is a GroupResult
    whose ``get()`` is the list of their results, in order. ``group | task`` is a chord."""

    def __init__(self, *tasks: Any) -> None:
        self.tasks = _items(tasks)
        if not self.tasks:
            raise WorkflowError("a group needs at least one task")

    def __repr__(self) -> str:
        return f"group([{', '.join(map(repr, self.tasks))}])"

    def build(self, receives: bool) -> cronbase_canvas.Group:
        return cronbase_canvas.group([item.build(receives) for item in self.tasks])  # type: ignore[misc]

    def exits(self) -> list[Task]:
        return [task for item in self.tasks for task in item.exits()]

    def _partial(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> group:
        members = []
        for item in self.tasks:
            if not isinstance(item, Signature):
                raise WorkflowError("a group given arguments must hold signatures only")
            members.append(item.clone(args, kwargs))
        return group(members)

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> GroupResult:
        """Insert the group in one statement; a GroupResult of its members' results."""
        self._check_options(options)
        built = self._with_arguments(args, kwargs).build(False)
        ids = defer_all(built)
        # Each member's result is its last job's: members are inserted in order, a chain's
        # jobs together, its last job last.
        sizes = [
            1 if isinstance(m, cronbase_canvas.Signature) else len(m.graph()[0].nodes)
            for m in built.items
        ]
        ends = list(itertools.accumulate(sizes))
        app = _first_task(self).app
        return GroupResult(str(ids[0]), [AsyncResult(str(ids[end - 1]), app) for end in ends])

    __call__ = Sendable.delay


class chord(_Workflow, Sendable[AsyncResult]):  # Celery's name
    """A group, then a callback given the list of its results: ``chord(header)(body)`` or
    ``chord(header, body).apply_async()``; the result is the callback's. Error callbacks
    (``link_error``, ``on_error``) are refused: a failed member cancels the callback."""

    def __init__(self, header: Any, body: Canvas | None = None) -> None:
        self.tasks = _items((header,) if not isinstance(header, group) else (header.tasks,))
        self.body = body

    def __repr__(self) -> str:
        return f"chord([{', '.join(map(repr, self.tasks))}], {self.body!r})"

    def _whole(self) -> chain:
        if self.body is None:
            raise WorkflowError("a chord needs a body: chord(header)(body) or chord(header, body)")
        return chain(group(self.tasks), self.body)

    def build(self, receives: bool) -> cronbase_canvas.Chain:
        whole = self._whole()
        _check_passed(whole.tasks[0], whole.tasks[1])
        return cronbase_canvas.chain(group(self.tasks).build(receives), self.body.build(True))  # type: ignore[union-attr]

    def exits(self) -> list[Task]:
        return self._whole().tasks[-1].exits()

    def _partial(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> chord:
        return chord(group(self.tasks)._partial(args, kwargs), self.body)

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        body: Canvas | None = None,
        **options: Any,
    ) -> AsyncResult:
        """Insert header and body in one statement; the result is the body's."""
        if "link_error" in options:
            raise WorkflowError(
                "chord link_error: cronbase has no error callbacks; a failed member cancels "
                "the body (error_type ParentFailed), which an on_job_end hook can see"
            )
        self._check_options(options)
        whole = self if body is None else chord(group(self.tasks), body)
        built = whole._with_arguments(args, kwargs).build(False)
        return AsyncResult(str(built.defer()), _first_task(self).app)

    def __call__(self, body: Canvas | None = None, **options: Any) -> AsyncResult:
        return self.apply_async(body=body, **options)

    def link_error(self, errback: object) -> None:
        """Refused: cronbase has no error callbacks (see :meth:`apply_async`)."""
        self.apply_async(link_error=errback)

    on_error = link_error


def _first_task(item: Canvas) -> Task:
    if isinstance(item, Signature):
        return item.task
    return _first_task(item.tasks[0])


def defer_all(built: cronbase_canvas.Chain | cronbase_canvas.Group) -> list[int]:
    """Insert a workflow in one statement and return every job's id, in node order (cronbase's
    ``defer()`` returns the workflow's one id)."""
    graph, tasks = built.graph()
    hooks = tasks[0].hooks
    if hooks.interceptor is not None:
        raise ConfigurationError(
            "a Celery group or link= under cronbase's inline testing mode: its members' ids "
            "are not known there; test them with a burst worker (cronbase.testing.drain)"
        )
    if len({id(t.db) for t in tasks}) > 1:
        raise WorkflowError("a workflow's tasks must belong to one App")
    return hooks.defer_graph(tasks[0].db, graph, tasks, None)


def defer_linked(first: Signature, link: Signature | Sequence[Signature]) -> int:
    """``apply_async(link=...)``: the task, then each linked signature given its result (a
    chain); returns the first job's id, whose result the caller follows."""
    links = [link] if isinstance(link, Signature) else list(link)
    then: Canvas = links[0] if len(links) == 1 else group(links)
    whole = chain(first, then)
    return defer_all(whole.build(False))[0]
