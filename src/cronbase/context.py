"""``current_job()``: what a running handler knows about its own job."""

from __future__ import annotations

import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from .errors import (
    AttemptTimeoutError,
    DatabaseUnavailableError,
    DatabaseURLError,
    LeaseLostError,
    UsageError,
)
from .job import Payload

if TYPE_CHECKING:
    from .db.database import Database
    from .workflow.durable import Durable

T = TypeVar("T")

_current: ContextVar[JobContext] = ContextVar("cronbase_current_job")


@dataclass
class JobContext:
    """The job a handler is running: its id, attempt, and a way to report progress."""

    id: int
    task: str
    queue: str
    attempt: int
    max_attempts: int
    payload: Payload
    # What integrations stored with the job beside its payload (jobs.metadata), e.g. the trace
    # context of its defer under "otel"; None when nothing was stored.
    metadata: dict[str, Any] | None = field(default=None, repr=False)
    # The version of its task the job was deferred for (@app.task(version=N) of the code that
    # deferred it): a handler of version 3 may get a job of version 1 or 2, shaped as they were.
    task_version: int = field(default=1, repr=False)
    lease_token: uuid.UUID | None = field(default=None, repr=False)
    lease: timedelta | None = field(default=None, repr=False)
    worker_id: str | None = field(default=None, repr=False)
    # Its task is encrypted (@app.task(encrypt=True)): integrations keep its error messages out
    # of what they export (spans), as logs do.
    encrypted: bool = field(default=False, repr=False)
    _db: Database | None = field(default=None, repr=False)
    # Set once transaction() has committed the job's success with the handler's writes.
    completed: bool = field(default=False, repr=False)
    # Set by the worker (from its loop) when a lease renewal found the lease gone: the attempt
    # may run on, fenced out, but starts no effect and no transaction().
    lease_lost: bool = field(default=False, repr=False)
    # Set by the worker when the attempt passed its task's timeout: cancelled as for a lost
    # lease (a sync handler runs on until it returns, but starts nothing more).
    timed_out: bool = field(default=False, repr=False)
    # Called (from any thread) when progress changes, so the worker can store it soon.
    _on_progress: Callable[[], None] = field(repr=False, default=lambda: None)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _progress: float | None = field(default=None, repr=False)
    _stage: str | None = field(default=None, repr=False)
    # Steps, sleeps and event waits of this run (durable.py), made on first use.
    _durable: Durable | None = field(default=None, repr=False)

    def set_progress(self, percent: float, stage: str | None = None) -> None:
        """Report progress (0 to 100) and optionally the stage; stored with the next heartbeat.

        ```pycon
        >>> cronbase.current_job().set_progress(40, stage="rendering")  # doctest: +SKIP
        ```
        """
        if not 0 <= percent <= 100:
            raise ValueError(f"progress must be within 0..100, got {percent!r}")
        with self._lock:
            self._progress = float(percent)
            if stage is not None:
                self._stage = stage
        self._on_progress()

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """A transaction whose commit also marks this job succeeded (sync handlers).

        Write your results on the connection it yields: they and the job's success commit
        together, or, when the block raises, roll back together (the job then fails and retries
        as usual). Make it the handler's last step.

        ```pycon
        >>> with cronbase.current_job().transaction() as conn:  # doctest: +SKIP
        ...     conn.execute("UPDATE invoices SET sent = true WHERE id = %s", [invoice_id])
        ```
        """
        db = self._require_db()
        self.check_live()
        conn: psycopg.Connection[Any] | None = None
        try:
            with db.pool().connection() as conn, conn.transaction():
                yield conn
                # Cancelled while the block ran (its timeout passed): roll back, so a late
                # handler cannot commit its effect.
                self.check_live("the commit of transaction()")
                if self.lease is not None:
                    conn.execute(db.queries.limit_idle_transaction, self._idle_limit())
                row = conn.execute(db.queries.complete_jobs, self._success()).fetchone()
                self._check_finished(row)
        except (psycopg.OperationalError, DatabaseURLError) as exc:
            raise self._unavailable(exc, conn) from exc
        self.completed = True

    @asynccontextmanager
    async def transaction_async(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The async twin of :meth:`transaction`, for async handlers."""
        db = self._require_db()
        self.check_live()
        conn: psycopg.AsyncConnection[Any] | None = None
        try:
            pool = await db.async_pool()
            async with pool.connection() as conn, conn.transaction():
                yield conn
                self.check_live("the commit of transaction_async()")
                if self.lease is not None:
                    await conn.execute(db.queries.limit_idle_transaction, self._idle_limit())
                cur = await conn.execute(db.queries.complete_jobs, self._success())
                self._check_finished(await cur.fetchone())
        except (psycopg.OperationalError, DatabaseURLError) as exc:
            raise self._unavailable(exc, conn) from exc
        self.completed = True

    def _unavailable(
        self,
        exc: psycopg.OperationalError | DatabaseURLError,
        conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any] | None,
    ) -> Exception:
        """DatabaseUnavailableError when the connection itself was lost (or none could be had),
        so the attempt is handed back uncounted; the error as it is otherwise (a serialization
        failure of the handler's own writes is the handler's to retry)."""
        if conn is not None and not conn.broken:
            return exc
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        # The worker's line for the hand-back names the job and attempt around this.
        return DatabaseUnavailableError(
            f"the database connection of transaction() was lost ({reason})"
        )

    def _require_db(self) -> Database:
        if self._db is None or self.lease_token is None or self.completed:
            raise UsageError(
                f"job {self.id}: transaction() is for a running job, once (already used: "
                f"{self.completed})"
            )
        return self._db

    def _idle_limit(self) -> dict[str, Any]:
        assert self.lease is not None
        return {"milliseconds": str(max(1, int(self.lease.total_seconds() * 1000)))}

    def _success(self) -> dict[str, Any]:
        """complete_jobs' parameters: this attempt's success, with no result (the handler's
        own writes are its result)."""
        return {"done_ids": [self.id], "done_tokens": [self.lease_token], "done_results": None}

    # -- durable handlers (durable.py) ------------------------------------------------------------

    def step(self, name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` once for this job and store its JSON result: when the
        job runs again (a crash, a retry, a resume after sleep or wait_for), the step returns
        the stored result without running. Name each step once per run.

        ```pycon
        >>> charge = cronbase.current_job().step("charge", charge_card, invoice_id)  # doctest: +SKIP
        ```
        """
        return self._steps().step(name, fn, args, kwargs)  # type: ignore[no-any-return]

    async def step_async(
        self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Any:
        """The async twin of :meth:`step`; ``fn`` may be a coroutine function."""
        return await self._steps().step_async(name, fn, args, kwargs)

    def sleep(self, duration: timedelta | float) -> None:
        """Suspend the job for ``duration``: its worker slot is freed, no lease is held, no
        attempt is counted; it resumes on any worker, replaying the handler with its finished
        steps skipped, and this call then returns."""
        self._steps().sleep(duration)

    async def sleep_async(self, duration: timedelta | float) -> None:
        await self._steps().sleep_async(duration)

    def wait_for(self, key: str, timeout: timedelta | float | None = None) -> Any:
        """The payload of the event ``key`` (``app.events.emit``): at once when it was emitted
        already, else after suspending the job until it is. EventTimeout once ``timeout`` has
        passed without it (None: wait as long as it takes)."""
        return self._steps().wait_for(key, timeout)

    async def wait_for_async(
        self,
        key: str,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109  # a durable deadline
    ) -> Any:
        return await self._steps().wait_for_async(key, timeout)

    def _steps(self) -> Durable:
        if self._durable is None:
            from .workflow.durable import Durable  # effects.py imports this module

            if self._db is None:
                raise UsageError("step(), sleep() and wait_for() need the job's database")
            self._durable = Durable(self, self._db)
        return self._durable

    def is_cancelled(self) -> bool:
        """True once this attempt is cancelled: it passed its task's timeout, or its lease is
        gone (an operator cancelled or retried the job, or its lease ran out and it was reaped;
        the worker learns that at its next heartbeat, a third of the lease). A sync handler
        that polls this between steps can stop; from then on transaction(), effects and steps
        refuse to start, and whatever it writes about the job is fenced out. An async handler
        is cancelled outright (CancelledError)."""
        return self.lease_lost or self.timed_out

    def time_out(self) -> None:
        """Cancel this attempt at its timeout (the worker calls it; any thread)."""
        self.timed_out = True

    def check_live(self, what: str = "transaction()") -> None:
        """Raise when this attempt is cancelled: LeaseLostError when the worker found its lease
        gone, AttemptTimeoutError when it passed its timeout."""
        if self.lease_lost:
            raise self.lease_lost_error(what)
        if self.timed_out:
            raise AttemptTimeoutError(
                f"job {self.id} attempt {self.attempt}: cancelled at its timeout; {what} not "
                "started"
            )

    def lease_lost_error(self, what: str) -> LeaseLostError:
        return LeaseLostError(
            f"job {self.id} attempt {self.attempt}: its lease is gone (expired, cancelled or "
            f"retried by an operator); {what} not started"
        )

    def _check_finished(self, row: tuple[Any, ...] | None) -> None:
        if not (row and row[0]):  # the lease was lost: another attempt owns the job now; roll back
            raise LeaseLostError(
                f"job {self.id} attempt {self.attempt}: lease lost before the transaction "
                "committed; its writes are rolled back"
            )

    @property
    def progress(self) -> tuple[float | None, str | None]:
        with self._lock:
            return self._progress, self._stage


def current_job() -> JobContext:
    """The job the calling handler is running; raises outside a handler."""
    try:
        return _current.get()
    except LookupError:
        raise UsageError("current_job() was called outside a running job") from None


def running_job() -> JobContext | None:
    """The job the caller runs in, or None outside a handler."""
    return _current.get(None)


def set_current(context: JobContext) -> None:
    _current.set(context)
