"""One log line when this process loses the database, one when it has it back: every part of a
worker (its claims, lease renewals, outcome writes, listener, reaper, scheduler, retention, and
psycopg's pool reconnecting underneath) meets the same outage, and an operator wants to read it
once, not once per part and retry (a 21 s restart wrote 114 warnings from two processes).

A part reports the first failure of each of its runs of failures with :meth:`Outage.failed`; the
first such report while the database is reachable logs the outage, the others only count. The
first part that works again ends it with one line that says how long it lasted. Failures that
are not a lost connection (a bug, a revoked grant) are not an outage: their parts log them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

import psycopg_pool

from ..errors import DatabaseURLError
from .pool import is_connection_loss

logger = logging.getLogger("cronbase")


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached: a connection lost or refused, or no
    connection to be had from the pool in time. A DatabaseURLError is one when psycopg's error
    it replaced was (``pool.unreachable``: still its ``__context__``); a refused password or a
    missing database is not."""
    if isinstance(exc, DatabaseURLError) and exc.__context__ is not None:
        return is_outage(exc.__context__)
    return is_connection_loss(exc) or isinstance(exc, psycopg_pool.PoolTimeout)


def one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


class Outage:
    """This process's view of the database being away (thread-safe: psycopg's pool logs from
    its own threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None
        self._tries = 0
        self._parts: set[str] = set()
        self._watchers = 0

    @contextlib.contextmanager
    def watched(self) -> Iterator[None]:
        """While a worker (or supervisor) runs in this process. When the last one ends during
        an outage, the outage is forgotten: the next to start meets the database afresh (a
        process that runs workers one after another: tests, a notebook)."""
        with self._lock:
            self._watchers += 1
        try:
            yield
        finally:
            with self._lock:
                self._watchers -= 1
                if not self._watchers:
                    self._since = None

    @property
    def is_on(self) -> bool:
        return self._since is not None

    def failed(self, what: str, exc: BaseException | str) -> None:
        """``what`` (a part of the worker) could not reach the database."""
        with self._lock:
            self._tries += 1
            self._parts.add(what)
            if self._since is not None:
                return
            self._since = time.monotonic()
            self._tries = 1
            self._parts = {what}
        reason = exc if isinstance(exc, str) else one_line(exc)
        logger.warning(
            "database unreachable: %s failed (%s); every part of this worker retries until it "
            "is back (one line when it is)",
            what,
            reason,
        )

    def works(self, what: str) -> None:
        """``what`` reached the database again: the outage, if one is on, is over."""
        with self._lock:
            if self._since is None:
                return
            lasted, tries, parts = time.monotonic() - self._since, self._tries, self._parts
            self._since = None
        logger.warning(
            "database reachable again after %.1fs (%s works; %d failed tries by %s while away)",
            lasted,
            what,
            tries,
            ", ".join(sorted(parts)),
        )


# One per process: every part of every worker in it shares the connection's fate.
OUTAGE = Outage()


def first_failure(what: str, exc: BaseException, otherwise: str) -> None:
    """The first failure of a run of ``what``'s: the process's outage when the database is away,
    else the warning ``otherwise`` (its ``%s`` the error's first line)."""
    if is_outage(exc):
        OUTAGE.failed(what, exc)
    else:
        logger.warning(otherwise, (str(exc).strip().splitlines() or [type(exc).__name__])[0])


class PoolNoise(logging.Filter):
    """psycopg's pool logs each failed reconnect attempt at WARNING, with the server's message on
    several lines; while the database is away that is a line a second per pool. Folded into
    :data:`OUTAGE` (counted, or starting it) and dropped; its other records pass."""

    # The pool's records that say the server is away: a connect that failed, a reconnect that
    # gave up.
    SIGNS = ("error connecting", "reconnection attempt in pool")
    # A connection the server closed, which the pool replaces: one of many during an outage
    # (dropped then), news of its own otherwise (an administrator ended it, an idle timeout).
    DISCARDS = ("discarding broken connection", "discarding closed connection")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        message = record.getMessage()
        if message.startswith(self.SIGNS):
            OUTAGE.failed("connecting", message.splitlines()[0])
            return False
        return not (message.startswith(self.DISCARDS) and OUTAGE.is_on)


def fold_pool_noise() -> None:
    """Install :class:`PoolNoise` on psycopg's pool logger, once per process."""
    pool_logger = logging.getLogger("psycopg.pool")
    if not any(isinstance(f, PoolNoise) for f in pool_logger.filters):
        pool_logger.addFilter(PoolNoise())
