"""App: configuration, the task registry and the facade users hold; the database is its ``db``."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, Unpack, overload

from psycopg_pool import AsyncConnectionPool, ConnectionPool

from .checks import check_name
from .db.database import Database, DatabaseOptions
from .db.queries import Queries
from .durations import DurationLike, duration
from .enqueue.options import TaskDefaults, TaskOptions
from .errors import ConfigurationError, PayloadError
from .hooks import Hooks, JobEndHook, JobMiddleware, JobStartHook
from .job import Payload
from .operations.audit import Audit
from .operations.fleet import WorkerInfo, workers, workers_async
from .operations.grants import Grants
from .operations.jobs import Jobs
from .operations.ledger import Ledger
from .operations.queues import Queues
from .operations.schedules import Schedules
from .operations.stats import (
    Overview,
    TaskStats,
    UnservedJobs,
    overview,
    overview_async,
    task_stats,
    task_stats_async,
    unserved_jobs,
)
from .operations.storage import Storage, storage, storage_async
from .schedule.scheduler import ScheduleOptions, ScheduleSpec
from .task import Task, find_task
from .workflow.events import Events

if TYPE_CHECKING:
    from .worker.worker import Worker

logger = logging.getLogger("cronbase")

P = ParamSpec("P")
R = TypeVar("R")

# What App.defer(name, payload, **options) accepts: Task.configure's keywords.
_DEFER_OPTIONS = frozenset(inspect.signature(Task.configure).parameters) - {"self"}


class App:
    """Holds configuration and registered tasks.

    ```pycon
    >>> app = cronbase.App()  # database from CRONBASE_DATABASE_URL, DATABASE_URL, else embedded
    >>> @app.task(queue="emails")  # doctest: +SKIP
    ... def send_invoice(invoice_id: int) -> None: ...
    ```
    """

    def __init__(self, database_url: str | None = None, **options: Unpack[DatabaseOptions]) -> None:
        # The database settings are Database's (db/database.py says what each one means).
        self.db = Database(database_url, **options)
        self.tasks: dict[str, Task[Any, Any]] = {}
        # Schedules declared with @app.periodic, upserted when a worker or a tick starts.
        self.periodic_schedules: dict[str, ScheduleSpec] = {}
        # Run around every defer and attempt of this App's tasks (on_job_start, middleware...).
        self.hooks = Hooks()
        self._bind_services()

    def _bind_services(self) -> None:
        self.jobs = Jobs(self.db)
        self.schedules = Schedules(self.db, self.tasks)
        self.effects = Ledger(self.db)
        self.events = Events(self.db, self.hooks)
        self.queues = Queues(self.db)
        self.audit = Audit(self.db)
        self.grants = Grants(self.db)

    def _swap_database(self, db: Database) -> Database:
        """Point the App, its tasks and services at ``db``; returns the Database it had.

        For test helpers (``cronbase.testing.use_database``): the caller closes what it opened.
        """
        old, self.db = self.db, db
        for task in self.tasks.values():
            task.db = db
        self._bind_services()
        return old

    # -- configuration -------------------------------------------------------------------------

    @property
    def schema(self) -> str:
        return self.db.schema

    @property
    def queries(self) -> Queries:
        return self.db.queries

    @property
    def channel(self) -> str:
        return self.db.channel

    @property
    def is_embedded(self) -> bool:
        return self.db.is_embedded

    @property
    def database_url(self) -> str:
        """The configured URL; with none, the embedded server is started and migrated."""
        return self.db.url

    # -- tasks -----------------------------------------------------------------------------------

    @overload
    def task(self, func: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self, *, name: str | None = None, **options: Unpack[TaskOptions]
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        func: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        **options: Unpack[TaskOptions],
    ) -> Any:
        """Register a handler. Sync handlers run in a thread pool, async ones on the loop.

        The options (:class:`cronbase.enqueue.options.TaskOptions` says each): ``queue``,
        ``priority``, ``max_attempts``, ``lease``, ``retry`` (a Backoff), ``timeout``. Flow
        control: ``global_concurrency`` (running jobs of the task, fleet-wide),
        ``concurrency_key`` (a template over the payload, ``"tenant:{tenant_id}"``) with
        ``key_concurrency`` (running jobs per key), ``rate_limit`` (``"100/minute"``: starts in
        any window, per key when the task has a concurrency_key). Fair share: ``fair_key``
        (a template over the payload, ``"{tenant_id}"``): due jobs are claimed round robin
        across the keys of the job's queue, weighted by ``app.queues.set_weight``. Steering: ``retry_on`` /
        ``dont_retry_on`` (exception types), ``max_snoozes``. ``unique_for`` (with
        ``unique_key``): one job per window. ``isolation="process"``: a sync handler runs in a
        child process, killed at its ``timeout`` (a thread cannot be stopped). Durations
        (``lease``, ``timeout``, ``unique_for``) are timedeltas or seconds. ``encrypt=True``:
        the payload, result and error messages of its jobs are stored encrypted
        (docs/guides/encryption.md); ``App(encrypt=True)`` makes that every task's default.
        """
        given: dict[str, Any] = dict(options)
        if self.db.encrypt:  # App(encrypt=True): every task's default
            given.setdefault("encrypt", True)
        checked = TaskDefaults.build(given)

        def register(f: Callable[..., Any]) -> Task[Any, Any]:
            task_name = check_name("task", f.__name__ if name is None else name)
            checked.check_handler(task_name, f)
            if task_name in self.tasks:
                raise ConfigurationError(
                    f"task name {task_name!r} is registered twice "
                    f"({self.tasks[task_name].func.__module__} and {f.__module__}); pass name="
                )
            defaults = checked.with_flow(task_name, options)
            task = Task(self.db, f, task_name, defaults, self.hooks)
            self.tasks[task_name] = task
            return task

        return register(func) if func is not None else register

    def periodic(
        self, cron: str, **options: Unpack[ScheduleOptions]
    ) -> Callable[[Task[P, R]], Task[P, R]]:
        """Run a task on a cron schedule; goes above ``@app.task`` (``options``:
        :class:`~cronbase.schedule.scheduler.ScheduleOptions`).

        ```pycon
        >>> @app.periodic(cron="0 2 * * *", tz="Europe/Berlin", key="nightly-cleanup")  # doctest: +SKIP
        ... @app.task(queue="maintenance")
        ... def cleanup(scheduled_at: datetime) -> None: ...
        ```
        """

        def declare(task: Task[P, R]) -> Task[P, R]:
            if not isinstance(task, Task):
                raise ConfigurationError(
                    f"@app.periodic goes above @app.task (got {task!r}, not a registered task)"
                )
            spec = ScheduleSpec.build(task, cron=cron, source="code", **options)
            if spec.key in self.periodic_schedules:
                raise ConfigurationError(f"schedule key {spec.key!r} is declared twice; pass key=")
            self.periodic_schedules[spec.key] = spec
            return task

        return declare

    # -- hooks ---------------------------------------------------------------------------------

    def on_job_start(self, hook: JobStartHook) -> JobStartHook:
        """Call ``hook(job)`` as each attempt starts (job: the :class:`JobContext`).

        ```pycon
        >>> @app.on_job_start  # doctest: +SKIP
        ... def tag(job): sentry_sdk.set_tag("job_id", job.id)
        ```

        It runs on the worker's event loop: keep it quick. One that raises is logged and ignored.
        """
        self.hooks.job_start.append(hook)
        return hook

    def on_job_end(self, hook: JobEndHook) -> JobEndHook:
        """Call ``hook(job, outcome, error, duration)`` as each attempt ends, before its outcome
        is written. ``outcome``: 'succeeded', 'failed' (will retry), 'dead', 'released' (handed
        back uncounted: the database went away) or 'lost' (its lease was taken); ``error``: the
        exception or None; ``duration``: a timedelta. One that raises is logged and ignored.
        """
        self.hooks.job_end.append(hook)
        return hook

    def middleware(self, factory: JobMiddleware) -> JobMiddleware:
        """Run every handler inside ``factory(job)``, a context manager (tenancy, a Sentry scope).

        ```pycon
        >>> @app.middleware  # doctest: +SKIP
        ... def tenant(job):
        ...     with tenancy.use(job.payload["tenant_id"]):
        ...         yield
        ```

        A generator function, as here, is made a context manager (contextlib.contextmanager).

        A sync handler's middleware runs in the handler's thread. The handler's exception is
        thrown into it; whatever the middleware does, the outcome stays the handler's, and a
        middleware that raises is logged and ignored. The first registered is the outermost.
        """
        self.hooks.job_middleware.append(factory)
        return factory

    def get_task(self, name: str) -> Task[Any, Any]:
        return find_task(self.tasks, name)

    def defer(self, task_name: str, payload: Payload, **options: Any) -> int:
        """Enqueue a registered task by name (what ``cronbase enqueue`` uses)."""
        task = self._by_name(task_name, payload, options)
        return task.configure(**options).defer(**payload)

    async def defer_async(self, task_name: str, payload: Payload, **options: Any) -> int:
        task = self._by_name(task_name, payload, options)
        return await task.configure(**options).defer_async(**payload)

    def _by_name(self, task_name: str, payload: Payload, options: dict[str, Any]) -> Task[Any, Any]:
        task = self.get_task(task_name)
        unknown = sorted(set(options) - _DEFER_OPTIONS)
        if unknown:
            raise ConfigurationError(
                f"unknown defer option {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(sorted(_DEFER_OPTIONS))}"
            )
        if not isinstance(payload, dict):
            raise PayloadError(
                f"payload for task {task_name!r} must be a JSON object, got {payload!r}"
            )
        return task

    # -- database --------------------------------------------------------------------------------

    def pool(self) -> ConnectionPool:
        """The sync pool for enqueue and admin calls (opened on first use)."""
        return self.db.pool()

    async def async_pool(self) -> AsyncConnectionPool:
        """The async pool of the running event loop (opened on first use in each loop)."""
        return await self.db.async_pool()

    def stats(self) -> Overview:
        """Per queue: jobs by status, waits; attempts per minute over the last hour."""
        return overview(self.db)

    async def stats_async(self) -> Overview:
        return await overview_async(self.db)

    def storage(self) -> Storage:
        """Per cronbase table: heap and index bytes, live and dead rows, last vacuum; and what
        holds vacuum back in the database (the oldest open transactions, prepared transactions,
        replication slots)."""
        return storage(self.db)

    async def storage_async(self) -> Storage:
        return await storage_async(self.db)

    def task_stats(self, window: DurationLike = timedelta(hours=1)) -> list[TaskStats]:
        """Per task and queue over the last ``window`` (a timedelta or seconds): attempts ended
        per minute, failure rate, p50/p95 run time of the successes."""
        return task_stats(self.db, duration("window", window, positive=True))

    async def task_stats_async(self, window: DurationLike = timedelta(hours=1)) -> list[TaskStats]:
        return await task_stats_async(self.db, duration("window", window, positive=True))

    def workers(self) -> list[WorkerInfo]:
        """Every registered worker (grouped by host and supervisor, the live ones first): host,
        pid, supervisor, queues, tasks, busy slots of its concurrency, last heartbeat, the jobs in
        its hands."""
        return workers(self.db)

    async def workers_async(self) -> list[WorkerInfo]:
        return await workers_async(self.db)

    def unserved_jobs(self) -> list[UnservedJobs]:
        """Due jobs, by task and queue, that no live worker will claim, and why (``reason``)."""
        return unserved_jobs(self.db)

    def migrate(self, *, force: bool = False) -> list[str]:
        """Create or upgrade the schema; returns the migrations applied. A contract migration
        is refused while workers whose code is too old for it are alive, unless ``force``
        (docs/guides/upgrade.md)."""
        return self.db.migrate(force=force)

    async def migrate_async(self, *, force: bool = False) -> list[str]:
        return await asyncio.to_thread(self.migrate, force=force)

    def close(self) -> None:
        """Close the sync pool (the async one closes with ``aclose``)."""
        self.db.close()

    async def aclose(self) -> None:
        await self.db.aclose()

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- workers ---------------------------------------------------------------------------------

    def worker(self, **options: Any) -> Worker:
        """A worker to ``await worker.run()`` on your own loop; options as :meth:`run_worker`."""
        from .worker.worker import Worker

        return Worker(self.db, self.tasks, periodic=self.periodic_schedules, **options)

    def run_worker(
        self,
        queues: list[str] | Mapping[str, int] | None = None,
        concurrency: int = 10,
        burst: bool = False,
        **options: Any,
    ) -> None:
        """Run a worker until SIGTERM/SIGINT (or, with ``burst``, until nothing is due).

        ``queues``: the queues to serve (None: all), or each with its own concurrency,
        ``{"emails": 5, "reports": 1}``. Blocks; owns its event loop. See :class:`cronbase.worker.Worker` for the options.
        """
        worker = self.worker(queues=queues, concurrency=concurrency, burst=burst, **options)
        asyncio.run(worker.run())
