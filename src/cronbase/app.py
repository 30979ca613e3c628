"""App: configuration, the task registry, connection pools; the front door users hold."""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from psycopg_pool import AsyncConnectionPool, ConnectionPool

from .audit import Audit
from .client import JobOptions, Jobs
from .db import embedded, migrate, pool
from .db.notifier import channel_name
from .db.queries import Queries
from .effects import Effects
from .errors import ConfigurationError, PayloadError, UnknownTaskError
from .job import Payload
from .queues import Queues
from .retry import Backoff
from .schedule.admin import Schedules
from .schedule.scheduler import ScheduleSpec
from .stats import Overview, overview, overview_async
from .task import Task, TaskDefaults

if TYPE_CHECKING:
    from .worker.worker import Worker

logger = logging.getLogger("cronbase")

P = ParamSpec("P")
R = TypeVar("R")

# What App.defer(name, payload, **options) accepts: Task.configure's keywords.
_DEFER_OPTIONS = frozenset(inspect.signature(Task.configure).parameters) - {"self"}

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")


class App:
    """Holds configuration and registered tasks.

    >>> app = cronbase.App()  # database from CRONBASE_DATABASE_URL, DATABASE_URL, else embedded
    >>> @app.task(queue="emails")  # doctest: +SKIP
    ... def send_invoice(invoice_id: int) -> None: ...
    """

    def __init__(self, database_url: str | None = None, *, schema: str = "cronbase") -> None:
        if not _SCHEMA_NAME.match(schema):
            raise ConfigurationError(
                f"schema name {schema!r} must be lower-case letters, digits and underscores"
            )
        self.schema = schema
        self.queries = Queries.for_schema(schema)
        self.channel = channel_name(schema)
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.jobs = Jobs(self)
        self.schedules = Schedules(self)
        self.effects = Effects(self)
        self.queues = Queues(self)
        self.audit = Audit(self)
        # Schedules declared with @app.periodic, upserted when a worker or a tick starts.
        self.periodic_schedules: dict[str, ScheduleSpec] = {}
        self._explicit_url = database_url
        if database_url:
            pool.check_url(database_url)
        self._url: str | None = None
        self._lock = threading.Lock()
        self._pool: ConnectionPool | None = None
        self._async_pool: AsyncConnectionPool | None = None
        self._async_pool_loop: asyncio.AbstractEventLoop | None = None
        self._async_pool_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    # -- configuration -------------------------------------------------------------------------

    @property
    def is_embedded(self) -> bool:
        return pool.configured_url(self._explicit_url) is None

    @property
    def database_url(self) -> str:
        """The configured URL; with none, the embedded server is started and migrated."""
        with self._lock:
            if self._url is None:
                configured = pool.configured_url(self._explicit_url)
                if configured is not None:
                    pool.check_url(configured)
                    self._url = configured
                else:
                    url = embedded.start()
                    # Nobody else manages the embedded database, so keep its schema current.
                    with pool.connect(url) as conn:
                        migrate.apply_migrations(conn, self.schema)
                    self._url = url
            return self._url

    # -- tasks -----------------------------------------------------------------------------------

    @overload
    def task(self, func: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 100,
        max_attempts: int = 20,
        lease: timedelta = timedelta(minutes=1),
        retry: Backoff | None = None,
        timeout: timedelta | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        func: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 100,
        max_attempts: int = 20,
        lease: timedelta = timedelta(minutes=1),
        retry: Backoff | None = None,
        timeout: timedelta | None = None,
    ) -> Any:
        """Register a handler. Sync handlers run in a thread pool, async ones on the loop."""
        defaults = TaskDefaults(
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            lease=lease,
            retry=retry or Backoff(),
            timeout=timeout,
        )
        JobOptions(queue=queue, priority=priority, max_attempts=max_attempts, lease=lease).check()
        if timeout is not None and timeout <= timedelta(0):
            raise ConfigurationError(f"timeout must be positive, got {timeout!r}")

        def register(f: Callable[..., Any]) -> Task[Any, Any]:
            task_name = name or f.__name__
            if task_name in self.tasks:
                raise ConfigurationError(
                    f"task name {task_name!r} is registered twice "
                    f"({self.tasks[task_name].func.__module__} and {f.__module__}); pass name="
                )
            task = Task(self, f, task_name, defaults)
            self.tasks[task_name] = task
            return task

        return register(func) if func is not None else register

    def periodic(
        self,
        cron: str,
        *,
        tz: str = "UTC",
        key: str | None = None,
        catch_up: str = "latest",
        max_catch_up: int = 100,
        payload: Payload | None = None,
        queue: str | None = None,
    ) -> Callable[[Task[P, R]], Task[P, R]]:
        """Run a task on a cron schedule; goes above ``@app.task``.

        >>> @app.periodic(cron="0 2 * * *", tz="Europe/Berlin", key="nightly-cleanup")  # doctest: +SKIP
        ... @app.task(queue="maintenance")
        ... def cleanup(scheduled_at: datetime) -> None: ...
        """

        def declare(task: Task[P, R]) -> Task[P, R]:
            if not isinstance(task, Task):
                raise ConfigurationError(
                    f"@app.periodic goes above @app.task (got {task!r}, not a registered task)"
                )
            spec = ScheduleSpec.build(
                task,
                cron=cron,
                tz=tz,
                key=key,
                payload=payload,
                queue=queue,
                catch_up=catch_up,
                max_catch_up=max_catch_up,
                source="code",
            )
            if spec.key in self.periodic_schedules:
                raise ConfigurationError(f"schedule key {spec.key!r} is declared twice; pass key=")
            self.periodic_schedules[spec.key] = spec
            return task

        return declare

    def get_task(self, name: str) -> Task[Any, Any]:
        try:
            return self.tasks[name]
        except KeyError:
            raise UnknownTaskError(name, list(self.tasks)) from None

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
        url = self.database_url
        with self._lock:
            if self._pool is None:
                self._pool = pool.open_pool(url, name=f"cronbase-{self.schema}")
            return self._pool

    async def async_pool(self) -> AsyncConnectionPool:
        """The async pool of the running event loop (opened on first use in each loop)."""
        loop = asyncio.get_running_loop()
        if self._async_pool is not None and self._async_pool_loop is loop:
            return self._async_pool
        # One opener per loop: concurrent first calls would each open a pool, leaking all but one.
        if self._async_pool_lock is None or self._async_pool_lock[0] is not loop:
            self._async_pool_lock = (loop, asyncio.Lock())
        async with self._async_pool_lock[1]:
            if self._async_pool is None or self._async_pool_loop is not loop:
                url = await asyncio.to_thread(lambda: self.database_url)
                self._async_pool = await pool.open_async_pool(url, name=f"cronbase-{self.schema}")
                self._async_pool_loop = loop
            return self._async_pool

    def stats(self) -> Overview:
        """Per queue: jobs by status, waits; attempts per minute over the last hour."""
        return overview(self)

    async def stats_async(self) -> Overview:
        return await overview_async(self)

    def migrate(self) -> list[str]:
        """Create or upgrade the schema; returns the migrations applied."""
        with pool.connect(self.database_url) as conn:
            return migrate.apply_migrations(conn, self.schema)

    async def migrate_async(self) -> list[str]:
        return await asyncio.to_thread(self.migrate)

    def close(self) -> None:
        """Close the sync pool (the async one closes with ``aclose``)."""
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    async def aclose(self) -> None:
        if self._async_pool is not None:
            await self._async_pool.close()
            self._async_pool = None
        await asyncio.to_thread(self.close)

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- workers ---------------------------------------------------------------------------------

    def worker(self, **options: Any) -> Worker:
        """A worker to ``await worker.run()`` on your own loop; options as :meth:`run_worker`."""
        from .worker.worker import Worker

        return Worker(self, **options)

    def run_worker(
        self,
        queues: list[str] | None = None,
        concurrency: int = 10,
        burst: bool = False,
        **options: Any,
    ) -> None:
        """Run a worker until SIGTERM/SIGINT (or, with ``burst``, until nothing is due).

        Blocks; owns its event loop. See :class:`cronbase.worker.Worker` for the options.
        """
        worker = self.worker(queues=queues, concurrency=concurrency, burst=burst, **options)
        asyncio.run(worker.run())
