"""Options: a task's (what ``@app.task`` takes, declared once in :class:`TaskOptions`, checked
and filled in by :meth:`TaskDefaults.build`) and a job's (:class:`JobOptions`: a task's defaults
for one defer, with what ``configure`` adds). The decorator, the defaults and the job options all
read them from here."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any, Literal, TypedDict

from ..checks import check_key, check_name
from ..durations import DurationLike, duration, optional_duration
from ..errors import ConfigurationError
from ..flow import Rate, TaskFlow, check_fair_key, check_template, fair_scope, render_key
from ..job import Payload
from ..retry import Backoff

Isolation = Literal["thread", "process"]
ISOLATIONS: tuple[Isolation, ...] = ("thread", "process")


class TaskOptions(TypedDict, total=False):
    """What ``@app.task(...)`` takes besides the handler's ``name``; each is a field of
    :class:`TaskDefaults` (its default there) but the four flow limits, which become its
    ``flow``. Durations are timedeltas or seconds."""

    queue: str
    priority: int  # lower runs first
    max_attempts: int
    lease: DurationLike  # renewed while the handler runs; a killed worker's job returns after it
    retry: Backoff | None  # the backoff between attempts (None: Backoff())
    timeout: DurationLike | None  # the attempt is cancelled past it (how-jobs-run.md)
    global_concurrency: int | None  # running jobs of the task, fleet-wide
    concurrency_key: str | None  # a template over the payload: "tenant:{tenant_id}"
    key_concurrency: int | None  # running jobs per concurrency key
    rate_limit: str | Rate | None  # "100/minute": starts in any window (per key with a key)
    fair_key: str | None  # a template over the payload: "{tenant_id}" (fair share between keys)
    retry_on: tuple[type[BaseException], ...] | None  # others go dead at once
    dont_retry_on: tuple[type[BaseException], ...]  # these go dead at once (wins)
    max_snoozes: int  # Snooze past this many: dead
    unique_for: DurationLike | None  # one job per task (and unique_key) per window
    unique_key: str | None  # a template over the payload
    isolation: Isolation  # "process": a sync handler in a child killed at its timeout
    version: int  # its jobs go only to workers with this version or later of it (default 1)
    encrypt: bool  # payload, result and errors stored encrypted (default: App(encrypt=...))


# TaskOptions that are not TaskDefaults fields: the task's flow limits (flow.py).
FLOW_OPTIONS = ("global_concurrency", "concurrency_key", "key_concurrency", "rate_limit")


def _exception_types(what: str, value: object) -> None:
    if not isinstance(value, tuple) or not all(
        isinstance(t, type) and issubclass(t, BaseException) for t in value
    ):
        raise ConfigurationError(
            f"{what} must be a tuple of exception classes, such as (IOError,), got {value!r}"
        )


@dataclass(frozen=True)
class JobBasics:
    """What every job has, with the defaults a task gives its jobs unless told else: the first
    fields of both :class:`TaskDefaults` and :class:`JobOptions`."""

    queue: str = "default"
    priority: int = 100  # lower runs first
    max_attempts: int = 20
    lease: timedelta = timedelta(minutes=1)
    # The task's version (@app.task(version=N)): a job deferred for N is claimed only by workers
    # that have version N or later of its task (docs/guides/upgrade.md).
    version: int = 1
    # Store its payload, result and errors encrypted (payload/sealing.py; App(encrypt=True)
    # makes it every task's default).
    encrypt: bool = False


@dataclass(frozen=True)
class TaskDefaults(JobBasics):
    """A task's options, checked: what each of its jobs gets unless ``configure`` says else."""

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

    @classmethod
    def build(cls, options: Mapping[str, Any]) -> TaskDefaults:
        """Checked defaults from ``@app.task``'s options (the flow limits come with
        :meth:`with_flow`, once the task has its name); ConfigurationError naming a bad or
        unknown one."""
        unknown = sorted(set(options) - set(TaskOptions.__annotations__))
        if unknown:
            known = ", ".join(sorted(TaskOptions.__annotations__))
            raise ConfigurationError(f"unknown task option {unknown[0]!r}; known: {known}")
        values = {k: v for k, v in options.items() if k not in FLOW_OPTIONS}
        if "lease" in values:
            values["lease"] = duration("lease", values["lease"], signed=True)
        values["timeout"] = optional_duration("timeout", values.get("timeout"), positive=True)
        unique = optional_duration("unique_for", values.get("unique_for"), signed=True)
        values["unique_for"] = unique
        values["retry"] = values.get("retry") or Backoff()
        defaults = cls(**values)
        defaults.check()
        return defaults

    def with_flow(self, task: str, options: Mapping[str, Any]) -> TaskDefaults:
        """These defaults with the task's flow limits (its scope is named after it); a fair_key
        is checked against them (a job is claimed by the flow claim or the fair one)."""
        limits = {k: options.get(k) for k in FLOW_OPTIONS}
        flow = TaskFlow.build(task, **limits)
        return replace(self, flow=flow, fair_key=check_fair_key(task, self.fair_key, flow))

    def check(self) -> None:
        self.job_options().check()
        if self.retry_on is not None:
            _exception_types("retry_on", self.retry_on)
        _exception_types("dont_retry_on", self.dont_retry_on)
        snoozes = self.max_snoozes
        if not isinstance(snoozes, int) or isinstance(snoozes, bool) or snoozes < 0:
            raise ConfigurationError(
                f"max_snoozes must be a whole number of 0 or more, got {snoozes!r}"
            )
        if self.unique_for is not None and self.unique_for < timedelta(seconds=1):
            raise ConfigurationError(
                f"unique_for must be at least one second, got {self.unique_for!r}"
            )
        key = self.unique_key
        if key is not None:
            if self.unique_for is None:
                raise ConfigurationError(f"unique_key={key!r} needs unique_for (the window)")
            if not isinstance(key, str) or not key:
                raise ConfigurationError(f"unique_key must be a template string, got {key!r}")
            check_template(key, "unique_key")
        if self.isolation not in ISOLATIONS:
            raise ConfigurationError(
                f"isolation must be one of {', '.join(ISOLATIONS)}, got {self.isolation!r}"
            )

    def check_handler(self, task: str, func: Callable[..., Any]) -> None:
        """Refuse, naming the value, a handler these options cannot run."""
        if self.isolation != "process":
            return
        if inspect.iscoroutinefunction(func):
            raise ConfigurationError(
                f"task {task!r}: isolation='process' is for sync handlers; an async handler is "
                "cancelled at its timeout already"
            )
        qualname = func.__qualname__
        if "<locals>" in qualname or "<lambda>" in qualname:
            raise ConfigurationError(
                f"task {task!r}: isolation='process' needs a handler defined at module level "
                f"(a child process imports it), not {func.__module__}.{qualname}"
            )

    def job_options(self) -> JobOptions:
        """The options each job of the task starts from (the fields both hold)."""
        return JobOptions(**{name: getattr(self, name) for name in _SHARED})


_INT4_MAX = 2**31 - 1  # max_attempts is an integer column
# A worker registers "name@k" for each version k from 2 to its own: keep that list short.
MAX_TASK_VERSION = 1000
# The table's jobs_lease_range constraint: a claim adds the lease to now().
MAX_LEASE = timedelta(days=36500)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class JobOptions(JobBasics):
    """Everything about one job but its task and payload."""

    run_at: datetime | None = None
    delay: timedelta | None = None
    idempotency_key: str | None = None
    dedupe_key: str | None = None
    on_duplicate: Literal["ignore", "replace"] = "ignore"
    # The task's limits (flow.py) and this job's concurrency key, when configure gave one.
    flow: TaskFlow | None = None
    concurrency_key: str | None = None
    # The task's fair_key template (fair share between keys: db/sql/fair.sql); None: not fair.
    fair_key: str | None = None
    # One job per task, key (unique_key, a template over the payload) and window of unique_for.
    unique_for: timedelta | None = None
    unique_key: str | None = None
    # Existing jobs this one waits for (pending until they succeeded), and what their failure
    # does to it (graph.py).
    after: tuple[int, ...] = ()
    on_parent_failure: Literal["cancel", "run"] = "cancel"

    def check(self) -> None:
        """Refuse, naming the bad value, an option the database would refuse or misread."""
        check_name("queue", self.queue)
        if not _is_int(self.priority):
            raise ConfigurationError(f"priority must be an integer, got {self.priority!r}")
        if not -32768 <= self.priority <= 32767:
            raise ConfigurationError(f"priority must be within -32768..32767, got {self.priority}")
        if not _is_int(self.version) or not 1 <= self.version <= MAX_TASK_VERSION:
            raise ConfigurationError(
                f"version must be a whole number from 1 to {MAX_TASK_VERSION}, got {self.version!r}"
            )
        if not isinstance(self.encrypt, bool):
            raise ConfigurationError(f"encrypt must be True or False, got {self.encrypt!r}")
        if not _is_int(self.max_attempts) or not 1 <= self.max_attempts <= _INT4_MAX:
            raise ConfigurationError(
                f"max_attempts must be an integer from 1 to {_INT4_MAX}, got {self.max_attempts!r}"
            )
        if not isinstance(self.lease, timedelta) or not timedelta(0) < self.lease <= MAX_LEASE:
            raise ConfigurationError(
                f"lease must be a positive timedelta of at most 100 years, got {self.lease!r}"
            )
        if self.run_at is not None and self.delay is not None:
            raise ConfigurationError(
                f"give run_at or delay, not both (run_at={self.run_at!r}, delay={self.delay!r})"
            )
        if self.run_at is not None:
            if not isinstance(self.run_at, datetime):
                raise ConfigurationError(f"run_at must be a datetime, got {self.run_at!r}")
            if self.run_at.utcoffset() is None:
                raise ConfigurationError(
                    f"run_at must be timezone-aware, got naive {self.run_at!r}"
                )
        if self.delay is not None and (
            not isinstance(self.delay, timedelta) or self.delay < timedelta(0)
        ):
            # A negative delay would put the job ahead of others due now: refuse it.
            raise ConfigurationError(
                f"delay must be a timedelta of zero or more, got {self.delay!r}"
            )
        for name, key in (
            ("idempotency_key", self.idempotency_key),
            ("dedupe_key", self.dedupe_key),
            ("concurrency_key", self.concurrency_key),
        ):
            if key is not None:
                check_key(name, key)
        if self.on_duplicate not in ("ignore", "replace"):
            raise ConfigurationError(
                f"on_duplicate must be 'ignore' or 'replace', got {self.on_duplicate!r}"
            )
        if self.on_duplicate == "replace" and (
            self.dedupe_key is None or self.idempotency_key is not None
        ):
            raise ConfigurationError(
                "on_duplicate='replace' needs a dedupe_key and no idempotency_key"
            )
        if self.after and self.has_keys:
            raise ConfigurationError(
                f"after={list(self.after)} cannot be combined with idempotency_key, dedupe_key or "
                "unique_for: a job that waits for others is deferred as it is"
            )
        if self.on_duplicate == "replace" and self.unique_for is not None:
            raise ConfigurationError(
                f"on_duplicate='replace' cannot be used with a unique_for task: the window's first "
                f"job stays (unique_for={self.unique_for})"
            )

    @property
    def has_keys(self) -> bool:
        return (
            self.idempotency_key is not None
            or self.dedupe_key is not None
            or self.unique_for is not None
        )

    @functools.cached_property
    def insert_params(self) -> dict[str, Any]:
        """The insert statements' parameters that come from the options, built once per options
        object (a Task reuses its defaults' one); callers copy it, never change it."""
        return {
            "queue": self.queue,
            "priority": self.priority,
            "run_at": self.run_at,
            "delay": self.delay or timedelta(0),
            "max_attempts": self.max_attempts,
            "lease": self.lease,
            "metadata": None,
            "flow_key": None,
            "unique_prefix": None,
            "unique_seconds": None,
            # NULL is version 1: an unversioned job is claimed as it always was.
            "task_version": None if self.version == 1 else self.version,
        }

    @property
    def has_flow_key(self) -> bool:
        """Whether the task's jobs carry a flow_key: a limited or a fair task."""
        return self.flow is not None or self.fair_key is not None

    def flow_key(self, payload: Payload, task: str = "") -> str | None:
        """The job's claim scope (jobs.flow_key): its limit scope, or its fair key's scope;
        None for any other task (the plain claim takes its jobs)."""
        if self.fair_key is not None:
            key = render_key(task, self.fair_key, payload, "fair_key")
            return fair_scope(self.queue, key)
        flow = self.flow
        return None if flow is None else flow.scope(payload, self.concurrency_key)


# What a task's defaults give each of its jobs: the fields TaskDefaults and JobOptions share.
_SHARED = tuple(
    f.name for f in fields(JobOptions) if f.name in {g.name for g in fields(TaskDefaults)}
)
