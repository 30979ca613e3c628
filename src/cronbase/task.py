"""Task: a registered handler, its defaults, and ``defer`` / ``configure`` (thin over the client)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, TypeVar

from .durations import DurationLike, optional_duration
from .enqueue.graph import check_after
from .enqueue.insert import (
    JobOptions,
    defer_many_async,
    defer_many_sync,
    defer_one_async,
    defer_one_sync,
)
from .errors import ConfigurationError, PayloadError, UnknownTaskError
from .flow import TaskFlow, check_template
from .hooks import Hooks
from .job import Payload
from .payload.arguments import (
    Conversions,
    Unresolved,
    argument_converters,
    check_arguments,
    convert_arguments,
)
from .payload.converters import SCALARS
from .payload.encode import _BadValue, stored_form
from .retry import Backoff
from .workflow.signatures import Signature

if TYPE_CHECKING:
    from .db.connections import CallerConnection
    from .db.database import Database

P = ParamSpec("P")
R = TypeVar("R")

# The payload key a scheduled job's slot time travels under (see cronbase.schedule).
SCHEDULED_AT = "scheduled_at"
# Task._conversions before the handler's annotations could be resolved (compared by identity).
_UNRESOLVED = Conversions(())
_to_datetime = SCALARS[datetime]


def _exception_types(what: str, value: object) -> None:
    if not isinstance(value, tuple) or not all(
        isinstance(t, type) and issubclass(t, BaseException) for t in value
    ):
        raise ConfigurationError(
            f"{what} must be a tuple of exception classes, such as (IOError,), got {value!r}"
        )


def check_unique(unique_for: object, unique_key: object) -> None:
    """Refuse, naming the value, a unique_for / unique_key a task cannot use."""
    if unique_for is not None and (
        not isinstance(unique_for, timedelta) or unique_for < timedelta(seconds=1)
    ):
        raise ConfigurationError(f"unique_for must be at least one second, got {unique_for!r}")
    if unique_key is not None:
        if unique_for is None:
            raise ConfigurationError(f"unique_key={unique_key!r} needs unique_for (the window)")
        if not isinstance(unique_key, str) or not unique_key:
            raise ConfigurationError(f"unique_key must be a template string, got {unique_key!r}")
        check_template(unique_key, "unique_key")


def check_steering(retry_on: object, dont_retry_on: object, max_snoozes: object) -> None:
    """Refuse, naming the value, a retry_on / dont_retry_on / max_snoozes a task cannot use."""
    if retry_on is not None:
        _exception_types("retry_on", retry_on)
    _exception_types("dont_retry_on", dont_retry_on)
    if not isinstance(max_snoozes, int) or isinstance(max_snoozes, bool) or max_snoozes < 0:
        raise ConfigurationError(
            f"max_snoozes must be a whole number of 0 or more, got {max_snoozes!r}"
        )


def find_task(tasks: Mapping[str, Task[Any, Any]], name: str) -> Task[Any, Any]:
    """The registered task ``name``; UnknownTaskError naming the registered ones otherwise."""
    try:
        return tasks[name]
    except KeyError:
        raise UnknownTaskError(name, list(tasks)) from None


@dataclass(frozen=True)
class TaskDefaults:
    queue: str = "default"
    priority: int = 100
    max_attempts: int = 20
    lease: timedelta = timedelta(minutes=1)
    retry: Backoff = field(default_factory=Backoff)
    timeout: timedelta | None = None
    # Global concurrency and rate limits (flow.py); None: the task is unlimited.
    flow: TaskFlow | None = None
    # Fair share: a template over the payload naming the job's key; due jobs are claimed round
    # robin across keys (db/sql/fair.sql). None: the task is not fair.
    fair_key: str | None = None
    # Which exceptions are retried: one outside retry_on (when given) or inside dont_retry_on
    # sends the job dead at once (dont_retry_on wins).
    retry_on: tuple[type[BaseException], ...] | None = None
    dont_retry_on: tuple[type[BaseException], ...] = ()
    # How many times a handler may raise Snooze before the job goes dead.
    max_snoozes: int = 100
    # One job per task, key and window of this length (unique_key: a template over the payload).
    unique_for: timedelta | None = None
    unique_key: str | None = None
    # Where a sync handler runs: a thread of the worker's pool, or a child process that is
    # killed at the timeout (worker/isolation.py).
    isolation: Isolation = "thread"


Isolation = Literal["thread", "process"]
ISOLATIONS: tuple[Isolation, ...] = ("thread", "process")


def check_isolation(name: str, func: Callable[..., Any], isolation: object) -> None:
    """Refuse, naming the value, an isolation a handler cannot run under."""
    if isolation not in ISOLATIONS:
        raise ConfigurationError(
            f"task {name!r}: isolation must be one of {', '.join(ISOLATIONS)}, got {isolation!r}"
        )
    if isolation == "process":
        if inspect.iscoroutinefunction(func):
            raise ConfigurationError(
                f"task {name!r}: isolation='process' is for sync handlers; an async handler is "
                "cancelled at its timeout already"
            )
        qualname = func.__qualname__
        if "<locals>" in qualname or "<lambda>" in qualname:
            raise ConfigurationError(
                f"task {name!r}: isolation='process' needs a handler defined at module level "
                f"(a child process imports it), not {func.__module__}.{qualname}"
            )


class Task(Generic[P, R]):
    """A handler registered with ``@app.task``; call it directly, or ``defer`` it to a worker."""

    def __init__(
        self,
        db: Database,
        func: Callable[P, R],
        name: str,
        defaults: TaskDefaults,
        hooks: Hooks | None = None,
    ) -> None:
        self.db = db
        self.func = func
        self.name = name
        self.defaults = defaults
        # The App's hooks (shared by its tasks): run around this task's defers and attempts.
        self.hooks = hooks if hooks is not None else Hooks()
        self.is_async = inspect.iscoroutinefunction(func)
        self.signature = inspect.signature(func)
        # Signature.bind on every job cost ~1.8 us a call (~6% of a drain's CPU); set checks on
        # these give the same answer in ~0.5 us (see _fits). Bind still runs whenever the check
        # fails, so error messages are bind's own (tests/unit/test_task_arguments.py).
        params = self.signature.parameters.values()
        self._names = frozenset(
            p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        )
        self._required = frozenset(
            p.name
            for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is p.empty
        )
        self._var_keyword = any(p.kind is p.VAR_KEYWORD for p in params)
        # Positional-only parameters have rules of their own: leave them to bind.
        self._fast = not any(p.kind is p.POSITIONAL_ONLY for p in params)
        self._takes_scheduled_at = SCHEDULED_AT in self.signature.parameters or self._var_keyword
        self._options: tuple[TaskDefaults, JobOptions] | None = None
        # The check or conversion of each annotated argument (convert.py), built once; None:
        # every argument takes any JSON value, and defers and jobs skip the step. An annotation
        # naming what is defined later in the module is resolved on the first defer or job
        # instead (_UNRESOLVED). scheduled_at has its own rule (_slot).
        self._conversions: Conversions | None
        try:
            self._conversions = argument_converters(func, lenient=False, skip=(SCHEDULED_AT,))
        except Unresolved:
            self._conversions = _UNRESOLVED

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.defaults.queue}>"

    @property
    def isolation(self) -> Isolation:
        return self.defaults.isolation

    def gives_up(self, exc: BaseException) -> bool:
        """Whether retry_on / dont_retry_on say this exception is not worth a retry (the job
        goes dead at once); dont_retry_on wins."""
        d = self.defaults
        if d.dont_retry_on and isinstance(exc, d.dont_retry_on):
            return True
        return d.retry_on is not None and not isinstance(exc, d.retry_on)

    def _fits(self, keys: Any) -> bool:
        """Whether keyword arguments with these names certainly bind (False: ask bind)."""
        return self._fast and self._required <= keys and (self._var_keyword or keys <= self._names)

    def check_payload(self, payload: Payload) -> None:
        """Refuse, before anything is written, a payload that does not fit the handler: keys
        that do not bind, or a value its annotation refuses (PayloadError naming the path).
        Values are checked as they will be stored, with the converters the worker runs, so what
        passes here converts there."""
        if type(payload) is dict and SCHEDULED_AT not in payload and self._fits(payload.keys()):
            if self._conversions is None:
                return  # the common case without annotations to check: no copy, no call
        else:
            self._check_keys(payload)
        self._check_values(payload, None)

    def check_received(self, payload: Payload, received: str) -> None:
        """:meth:`check_payload` for a workflow's job whose ``received`` key its parents' results
        fill in when they have run: the keys with it in place, the values but its."""
        self._check_keys(payload)
        self._check_values(payload, received)

    def _check_values(self, payload: Payload, skip: str | None) -> None:
        conversions = self._conversions
        if conversions is None:
            return
        if conversions is _UNRESOLVED:
            conversions = self._resolve()
        check_arguments(self.name, conversions, payload, skip)

    def _check_keys(self, payload: Payload) -> None:
        if not isinstance(payload, dict):
            raise PayloadError(
                f"payload for task {self.name!r} must be a JSON object, got {payload!r}"
            )
        kwargs: dict[str, Any] = dict(payload)
        slot = kwargs.pop(SCHEDULED_AT, None)
        if slot is not None and self._takes_scheduled_at:
            stored = slot if isinstance(slot, str) else stored_form(self.name, SCHEDULED_AT, slot)
            kwargs[SCHEDULED_AT] = self._slot(stored)
        if not self._fits(kwargs.keys()):
            self._bind(kwargs)

    def arguments(self, payload: Payload) -> dict[str, Any]:
        """The handler's keyword arguments for a payload, as the types its annotations ask for
        (``convert.py``); PayloadError when they do not fit or do not convert.

        A scheduled job's payload carries its slot as ``scheduled_at`` (ISO text): a handler
        that takes the argument gets it as an aware datetime, one that does not never sees it.
        """
        if not isinstance(payload, dict):
            raise PayloadError(
                f"payload for task {self.name!r} must be a JSON object, got {payload!r}"
            )
        kwargs: dict[str, Any] = dict(payload)
        slot = kwargs.pop(SCHEDULED_AT, None)
        if slot is not None and self._takes_scheduled_at:
            kwargs[SCHEDULED_AT] = self._slot(slot)
        if not self._fits(kwargs.keys()):
            self._bind(kwargs)
        conversions = self._conversions
        if conversions is None:
            return kwargs
        if conversions is _UNRESOLVED:
            conversions = self._resolve()
        convert_arguments(self.name, conversions, kwargs)
        return kwargs

    def _bind(self, kwargs: dict[str, Any]) -> None:
        """PayloadError when keyword arguments with these names do not bind (bind's words)."""
        try:
            self.signature.bind(**kwargs)
        except TypeError as exc:
            takes = ", ".join(self.signature.parameters) or "no arguments"
            raise PayloadError(
                f"payload does not fit task {self.name!r} ({takes}): {exc}"
            ) from None

    def _slot(self, slot: object) -> datetime:
        """A scheduled job's ``scheduled_at``, whatever the handler annotates: an aware datetime."""
        try:
            return _to_datetime(slot)  # type: ignore[no-any-return]
        except _BadValue as exc:
            raise PayloadError(f"task {self.name!r}: {SCHEDULED_AT} {exc.why}") from None

    def _resolve(self) -> Conversions:
        """The first defer or job of a task whose annotations could not be resolved at
        registration: names still unresolved now are for good (TYPE_CHECKING imports), logged
        once, and those arguments pass as JSON."""
        conversions = argument_converters(self.func, lenient=True, skip=(SCHEDULED_AT,))
        self._conversions = conversions
        return conversions if conversions is not None else Conversions(())

    def _accepts(self, name: str) -> bool:
        if name == SCHEDULED_AT:
            return self._takes_scheduled_at
        params = self.signature.parameters
        return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())

    def options(self) -> JobOptions:
        # Built once per defaults object (both are frozen): ~1 us saved on every defer.
        d = self.defaults
        cached = self._options
        if cached is not None and cached[0] is d:
            return cached[1]
        opts = JobOptions(
            queue=d.queue,
            priority=d.priority,
            max_attempts=d.max_attempts,
            lease=d.lease,
            flow=d.flow,
            fair_key=d.fair_key,
            unique_for=d.unique_for,
            unique_key=d.unique_key,
        )
        self._options = (d, opts)
        return opts

    def configure(
        self,
        *,
        run_at: datetime | None = None,
        delay: DurationLike | None = None,
        priority: int | None = None,
        queue: str | None = None,
        max_attempts: int | None = None,
        lease: DurationLike | None = None,
        idempotency_key: str | None = None,
        dedupe_key: str | None = None,
        on_duplicate: Literal["ignore", "replace"] = "ignore",
        concurrency_key: str | None = None,
        after: Sequence[int] | None = None,
        on_parent_failure: Literal["cancel", "run"] = "cancel",
        connection: CallerConnection | None = None,
    ) -> Deferral:
        """Options for one defer: ``task.configure(delay=timedelta(minutes=5)).defer(x=1)``.
        ``delay`` and ``lease``: timedeltas or seconds. ``concurrency_key`` replaces the key the
        task's template would render. ``after``: the
        job waits ('pending') until these jobs succeeded; when one of them goes dead or is
        cancelled, the job is cancelled too, or runs anyway with ``on_parent_failure="run"``."""
        flow = self.defaults.flow
        if concurrency_key is not None and (flow is None or flow.concurrency_key is None):
            raise ConfigurationError(
                f"task {self.name!r} has no per-key limit: concurrency_key={concurrency_key!r} "
                "needs @app.task(concurrency_key=..., key_concurrency=... or rate_limit=...)"
            )
        changes: dict[str, Any] = {
            "concurrency_key": concurrency_key,
            "run_at": run_at,
            "delay": optional_duration("delay", delay, signed=True),
            "priority": priority,
            "queue": queue,
            "max_attempts": max_attempts,
            "lease": optional_duration("lease", lease, signed=True),
            "idempotency_key": idempotency_key,
            "dedupe_key": dedupe_key,
        }
        opts = replace(
            self.options(),
            **{k: v for k, v in changes.items() if v is not None},
            on_duplicate=on_duplicate,
            after=check_after(after or (), on_parent_failure),
            on_parent_failure=on_parent_failure,
        )
        opts.check()
        return Deferral(self, opts, connection)

    def s(self, **payload: Any) -> Signature:
        """A signature: this job, not yet deferred, for ``cronbase.chain`` and ``group``."""
        return Signature.of(self, payload)

    def defer(self, **payload: Any) -> int:
        """Enqueue a job now; returns its id. ``send_invoice.defer(invoice_id=812)``."""
        # What Deferral.defer does, without building a Deferral per call.
        self.check_payload(payload)
        return self._send([payload], self.options(), None, many=False)[0]

    async def defer_async(self, **payload: Any) -> int:
        """Async twin of :meth:`defer`."""
        self.check_payload(payload)
        return (await self._send_async([payload], self.options(), None, many=False))[0]

    def defer_many(self, payloads: Sequence[Payload]) -> list[int]:
        """Enqueue many jobs in one round trip; ids in input order."""
        return Deferral(self, self.options(), None).defer_many(payloads)

    async def defer_many_async(self, payloads: Sequence[Payload]) -> list[int]:
        """Async twin of :meth:`defer_many`."""
        return await Deferral(self, self.options(), None).defer_many_async(payloads)

    def _send(
        self, payloads: list[Payload], options: JobOptions, connection: object, *, many: bool
    ) -> list[int]:
        """Checked payloads to the database: through the hooks when any are set."""
        if self.hooks.has_defer_hooks and payloads:
            return self.hooks.defer(self.db, self, options, payloads, connection, many=many)
        if many:
            return defer_many_sync(self.db, self.name, options, payloads, connection)
        return [defer_one_sync(self.db, self.name, options, payloads[0], connection)]

    async def _send_async(
        self, payloads: list[Payload], options: JobOptions, connection: object, *, many: bool
    ) -> list[int]:
        if self.hooks.has_defer_hooks and payloads:
            return await self.hooks.defer_async(
                self.db, self, options, payloads, connection, many=many
            )
        if many:
            return await defer_many_async(self.db, self.name, options, payloads, connection)
        return [await defer_one_async(self.db, self.name, options, payloads[0], connection)]


class Deferral:
    """A task with options for one or more defers (what ``Task.configure`` returns)."""

    def __init__(
        self,
        task: Task[Any, Any],
        options: JobOptions,
        connection: CallerConnection | None,
    ) -> None:
        self.task = task
        self.options = options
        self.connection = connection

    def defer(self, **payload: Any) -> int:
        self.task.check_payload(payload)
        return self.task._send([payload], self.options, self.connection, many=False)[0]

    async def defer_async(self, **payload: Any) -> int:
        self.task.check_payload(payload)
        ids = await self.task._send_async([payload], self.options, self.connection, many=False)
        return ids[0]

    def defer_many(self, payloads: Sequence[Payload]) -> list[int]:
        payloads = list(payloads)  # checked, then inserted: a generator would be used up
        for payload in payloads:
            self.task.check_payload(payload)
        return self.task._send(payloads, self.options, self.connection, many=True)

    async def defer_many_async(self, payloads: Sequence[Payload]) -> list[int]:
        payloads = list(payloads)  # checked, then inserted: a generator would be used up
        for payload in payloads:
            self.task.check_payload(payload)
        return await self.task._send_async(payloads, self.options, self.connection, many=True)
