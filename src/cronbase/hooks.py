"""Hooks: code the App runs around each defer and each attempt (Sentry, metrics, tenancy, tracing),
and the interceptor that testing's inline mode puts in front of the database.

A hook or middleware that raises is logged and ignored: it never changes a job's outcome, and
never loses a defer. With nothing registered, a defer and an attempt pay one attribute check.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .db.connections import async_connection, sync_connection
from .enqueue.insert import (
    Insert,
    defer_async,
    defer_graph_async,
    defer_graph_sync,
    defer_sync,
    encode_metadata,
)
from .errors import CronbaseError

if TYPE_CHECKING:
    import psycopg

    from .context import JobContext
    from .db.database import Database
    from .enqueue.graph import Graph
    from .enqueue.options import JobOptions
    from .job import JSONValue, Payload
    from .task import Task

logger = logging.getLogger("cronbase")

T = TypeVar("T")
A = TypeVar("A")

JobStartHook = Callable[["JobContext"], object]
# (job, outcome, error, duration); outcome: 'succeeded', 'failed', 'dead', 'released' or 'lost'.
JobEndHook = Callable[["JobContext", str, "BaseException | None", timedelta], object]
JobMiddleware = Callable[["JobContext"], AbstractContextManager[object]]
DeferMiddleware = Callable[["DeferCall"], AbstractContextManager[object]]
ConnectionSource = Callable[[], "psycopg.Connection[Any] | None"]


@dataclass
class DeferCall:
    """One defer (or defer_many) on its way to the database, as defer middleware sees it."""

    task: str
    queue: str
    payloads: Sequence[Payload]
    # Stored in jobs.metadata of every job this call inserts (NULL when left empty).
    metadata: dict[str, JSONValue] = field(default_factory=dict)
    # The new jobs' ids, filled after the insert and before the middleware exits.
    ids: list[int] = field(default_factory=list)
    # Some of its jobs are of an encrypted task: integrations export no error message of it.
    encrypted: bool = False


class Interceptor(Protocol):
    """Takes every defer instead of the database (``cronbase.testing.inline``)."""

    def defer(
        self, task: Task[Any, Any], options: JobOptions, payloads: list[Payload]
    ) -> list[int]: ...

    async def defer_async(
        self, task: Task[Any, Any], options: JobOptions, payloads: list[Payload]
    ) -> list[int]: ...

    def defer_graph(self, graph: Graph, tasks: list[Task[Any, Any]]) -> int: ...

    async def defer_graph_async(self, graph: Graph, tasks: list[Task[Any, Any]]) -> int: ...

    def emit(self, key: str, payload: Any) -> bool: ...

    async def emit_async(self, key: str, payload: Any) -> bool: ...


def _name(func: object) -> str:
    return getattr(func, "__qualname__", None) or repr(func)


@contextlib.contextmanager
def _guarded(factory: Callable[[A], AbstractContextManager[object]], arg: A) -> Iterator[None]:
    """Enter ``factory(arg)`` around the block; its own errors are logged, never raised, and it
    cannot swallow the block's exception (the job's outcome is the handler's). A generator
    function is taken as contextlib.contextmanager would make it."""
    if inspect.isgeneratorfunction(factory):
        factory = contextlib.contextmanager(factory)
    entered = False
    try:
        manager = factory(arg)
        manager.__enter__()
        entered = True
    except Exception:
        logger.exception("%s raised on entry; ignored", _name(factory))
    if not entered:
        # Outside the except block: the block's own exception must not chain to this one.
        yield
        return
    try:
        yield
    except BaseException as exc:
        try:
            manager.__exit__(type(exc), exc, exc.__traceback__)
        except BaseException as raised:
            if raised is not exc:
                logger.exception("%s raised on exit; ignored", _name(factory))
        raise
    try:
        manager.__exit__(None, None, None)
    except Exception:
        logger.exception("%s raised on exit; ignored", _name(factory))


@contextlib.contextmanager
def _entered(
    factories: Sequence[Callable[[A], AbstractContextManager[object]]], arg: A
) -> Iterator[None]:
    """Every factory's manager entered around the block, the first outermost, each guarded."""
    with contextlib.ExitStack() as stack:
        for factory in factories:
            stack.enter_context(_guarded(factory, arg))
        yield


def _stored_metadata(call: DeferCall) -> dict[str, JSONValue] | None:
    """The call's metadata if it can be stored as JSON; otherwise None, logged: a middleware's
    mistake must not lose the defer."""
    if not call.metadata:
        return None
    try:
        encode_metadata(call.metadata)
    except CronbaseError as exc:
        logger.error("job metadata of a defer of %s dropped: %s", call.task, exc)
        return None
    return call.metadata


class Hooks:
    """What an App runs around defers and attempts; ``app.hooks``, shared by its tasks."""

    def __init__(self) -> None:
        self.job_start: list[JobStartHook] = []
        self.job_end: list[JobEndHook] = []
        self.job_middleware: list[JobMiddleware] = []
        self.defer_middleware: list[DeferMiddleware] = []
        self.connection_sources: list[ConnectionSource] = []
        self.interceptor: Interceptor | None = None

    @property
    def has_defer_hooks(self) -> bool:
        """Whether a defer has more to do than write its row."""
        return (
            self.interceptor is not None
            or bool(self.defer_middleware)
            or bool(self.connection_sources)
        )

    @property
    def has_job_hooks(self) -> bool:
        """Whether an attempt has hooks or middleware to run."""
        return bool(self.job_start or self.job_end or self.job_middleware)

    # -- defers ----------------------------------------------------------------------------------

    def _connection(self, connection: object | None) -> object | None:
        if connection is not None:
            return connection
        for source in self.connection_sources:
            found = source()
            if found is not None:
                return found
        return None

    def around_defer(self, call: DeferCall) -> AbstractContextManager[None]:
        """The defer middleware entered around one defer (for anyone who defers another way,
        as testing's inline mode does)."""
        return _entered(self.defer_middleware, call)

    def defer(
        self, db: Database, task: Task[Any, Any], insert: Insert, connection: object | None
    ) -> list[int]:
        """A defer through the hooks: the interceptor, else the database with middleware."""
        if self.interceptor is not None:
            return self.interceptor.defer(task, insert.opts, insert.payloads)
        connection = self._connection(connection)
        call = DeferCall(
            task.name, insert.opts.queue, insert.payloads, encrypted=insert.opts.encrypt
        )
        with self.around_defer(call):
            ids = defer_sync(db, replace(insert, metadata=_stored_metadata(call)), connection)
            call.ids[:] = ids
        return ids

    async def defer_async(
        self, db: Database, task: Task[Any, Any], insert: Insert, connection: object | None
    ) -> list[int]:
        """The async twin of :meth:`defer` (connection sources are sync: not asked)."""
        if self.interceptor is not None:
            return await self.interceptor.defer_async(task, insert.opts, insert.payloads)
        call = DeferCall(
            task.name, insert.opts.queue, insert.payloads, encrypted=insert.opts.encrypt
        )
        with self.around_defer(call):
            stored = replace(insert, metadata=_stored_metadata(call))
            ids = await defer_async(db, stored, connection)
            call.ids[:] = ids
        return ids

    def defer_graph(
        self, db: Database, graph: Graph, tasks: list[Task[Any, Any]], connection: object | None
    ) -> list[int]:
        """A chain or group through the defer middleware: one call for the whole graph (its
        first job's task and queue, every payload), whose metadata every job stores; on the
        connection a connection source gives (Django's), as a single defer would be."""
        connection = self._connection(connection)
        call = DeferCall(
            tasks[0].name,
            graph.nodes[0].options.queue,
            graph.payloads(),
            encrypted=any(n.options.encrypt for n in graph.nodes),
        )
        with self.around_defer(call):
            metadata = _stored_metadata(call)
            graph.set_metadata(None if metadata is None else encode_metadata(metadata))
            caller = None if connection is None else sync_connection(connection)
            ids = defer_graph_sync(db, graph, caller)
            call.ids[:] = ids
        return ids

    async def defer_graph_async(
        self, db: Database, graph: Graph, tasks: list[Task[Any, Any]], connection: object | None
    ) -> list[int]:
        """The async twin of :meth:`defer_graph` (connection sources are sync: not asked)."""
        call = DeferCall(
            tasks[0].name,
            graph.nodes[0].options.queue,
            graph.payloads(),
            encrypted=any(n.options.encrypt for n in graph.nodes),
        )
        with self.around_defer(call):
            metadata = _stored_metadata(call)
            graph.set_metadata(None if metadata is None else encode_metadata(metadata))
            caller = None if connection is None else await async_connection(connection)
            ids = await defer_graph_async(db, graph, caller)
            call.ids[:] = ids
        return ids

    # -- attempts --------------------------------------------------------------------------------

    def started(self, context: JobContext) -> None:
        """Run the job-start hooks; one that raises is logged and skipped."""
        for hook in self.job_start:
            try:
                hook(context)
            except Exception:
                logger.exception("on_job_start hook %s raised; ignored", _name(hook))

    def ended(
        self,
        context: JobContext,
        outcome: str,
        error: BaseException | None,
        duration: timedelta,
    ) -> None:
        """Run the job-end hooks; one that raises is logged and skipped."""
        for hook in self.job_end:
            try:
                hook(context, outcome, error, duration)
            except Exception:
                logger.exception("on_job_end hook %s raised; ignored", _name(hook))

    def call(self, context: JobContext, func: Callable[..., T], kwargs: dict[str, Any]) -> T:
        """``func(**kwargs)`` inside the job middleware (a sync handler, in its own thread)."""
        if not self.job_middleware:
            return func(**kwargs)
        with _entered(self.job_middleware, context):
            return func(**kwargs)

    async def call_async(
        self, context: JobContext, func: Callable[..., Awaitable[T]], kwargs: dict[str, Any]
    ) -> T:
        """``await func(**kwargs)`` inside the job middleware (an async handler)."""
        if not self.job_middleware:
            return await func(**kwargs)
        with _entered(self.job_middleware, context):
            return await func(**kwargs)
