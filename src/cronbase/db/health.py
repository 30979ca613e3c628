"""How a worker lives through database trouble: which errors waiting can cure, one log line per
run of failures (not one per retry), and a start that waits for the database instead of exiting.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import psycopg

from ..errors import DatabaseURLError, MigrationError
from .migrate import LATEST_VERSION
from .outage import OUTAGE, is_outage, one_line
from .pool import is_connection_loss

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from .database import Database

logger = logging.getLogger("cronbase")

T = TypeVar("T")

PAUSE_FIRST = 0.1
# The longest pause between retries: once the database is back, a worker claims within about
# this long (plus the pool's own reconnect), so a job enqueued then starts within ~2 s.
PAUSE_MAX = 1.0

# Errors that waiting does not cure: the schema or a table is gone, a grant was revoked, the
# code expects a newer schema. A worker retries them for ``fatal_after``, then exits.
FATAL_SQLSTATES = frozenset(
    {
        "42P01",  # undefined_table
        "3F000",  # invalid_schema_name
        "42501",  # insufficient_privilege
        "42703",  # undefined_column
        "42883",  # undefined_function
    }
)
# Refusals at connect time that are configuration, not an outage: fail at once.
_PERMANENT_CONNECT = (
    "password authentication failed",
    "no pg_hba.conf entry",
    "does not exist",  # database "x" / role "x" does not exist
)


def is_fatal(exc: BaseException) -> bool:
    """Whether ``exc`` is an error that retrying will not cure."""
    return isinstance(exc, psycopg.Error) and exc.sqlstate in FATAL_SQLSTATES


def is_permanent_connect_error(exc: BaseException) -> bool:
    text = str(exc)
    return any(marker in text for marker in _PERMANENT_CONNECT)


class FailureLog:
    """A run of failures of one chore: paces the retries; logs the first (and each new kind),
    counts the rest, says when it works again. A lost database is the process's outage
    (``outage.py``: one line for every chore), not this chore's."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.count = 0
        self._since = 0.0
        self._last = ""
        self._pause = PAUSE_FIRST
        self._outage = False  # some failure of this run was the database away

    @property
    def duration(self) -> float:
        return time.monotonic() - self._since if self.count else 0.0

    def describe(self, exc: BaseException) -> str:
        return f"{self.what} failed ({one_line(exc)})"

    def failed(self, exc: BaseException) -> float:
        """Note a failure; returns how long to wait before the next try."""
        if not self.count:
            self._since = time.monotonic()
            self._pause = PAUSE_FIRST
        self.count += 1
        if is_outage(exc):
            if not self._outage:  # the first of this run: the process's outage may begin
                self._outage = True
                OUTAGE.failed(self.what, exc)
        elif (line := one_line(exc)) != self._last:
            self._last = line
            if isinstance(exc, psycopg.Error | DatabaseURLError):
                logger.warning("%s; retrying until it works", self.describe(exc))
            else:  # not the database: a bug, whose traceback is worth having once
                logger.exception("%s; retrying until it works", self.describe(exc))
        pause = self._pause
        self._pause = min(self._pause * 2, PAUSE_MAX)
        return pause

    def succeeded(self) -> None:
        if self._outage:
            OUTAGE.works(self.what)
        if self._last:  # a failure of its own, logged: say it is over
            logger.warning(
                "%s works again after %d failures in %.1fs", self.what, self.count, self.duration
            )
        self.count = 0
        self._last = ""
        self._outage = False


async def connect_when_ready(db: Database, worker_id: str, *, wait: bool) -> AsyncConnectionPool:
    """Check the schema and open the worker's pool; with ``wait``, retry while the database is
    unreachable (logging once), else fail at once. A schema that is not current, a wrong
    password or a missing database fail at once either way."""
    failures = FailureLog("connecting to the database")
    while True:
        try:
            # A newer schema is fine unless a contract migration in it needs newer code: this
            # worker may be the previous release's, restarted during a rolling deploy.
            version = await asyncio.to_thread(db.require_current, newer_ok=True)
            if version > LATEST_VERSION:
                logger.warning(
                    "schema %r is at version %d, newer than this cronbase (%d): running as the "
                    "previous release of a rolling deploy (its newer migrations are expand-only)",
                    db.schema,
                    version,
                    LATEST_VERSION,
                )
            opened = await db.open_async_pool(
                name=f"cronbase-worker {worker_id}",
                min_size=min(2, db.pool_size),
                max_size=db.pool_size,
                # Short: a claim that cannot get a connection fails and retries, which makes the
                # pool try to connect again at once rather than after its backoff.
                wait_seconds=5.0,
            )
            failures.succeeded()
            return opened
        except MigrationError:
            raise
        except (DatabaseURLError, psycopg.OperationalError) as exc:
            if not wait or is_permanent_connect_error(exc):
                raise
            await asyncio.sleep(failures.failed(exc))


async def when_reachable(what: str, step: Callable[[], Awaitable[T]], *, wait: bool) -> T:
    """Run one of a worker's start steps after its pool opened (its registration, its first
    reap); with ``wait``, retry it while its connection is lost (logging once), else fail at once.
    The database can go away again between the pool's first connection and these: a restart, a
    failover, a pooler whose server connection broke. Any other error fails at once."""
    failures = FailureLog(what)
    while True:
        try:
            result = await step()
        except Exception as exc:
            if not wait or not is_connection_loss(exc):
                raise
            await asyncio.sleep(failures.failed(exc))
        else:
            failures.succeeded()
            return result
