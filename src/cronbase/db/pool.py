"""The only module that creates connections: URL resolution and checks, connection options,
psycopg pools that survive a server restart, and how every connection reads json and jsonb."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import select
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.abc import AdaptContext
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ..errors import DatabaseURLError
from ..payload.stored import read_stored

logger = logging.getLogger("cronbase")

URL_VARIABLES = ("CRONBASE_DATABASE_URL", "DATABASE_URL")
CONNECT_TIMEOUT_SECONDS = 10
# How long a pool keeps trying to replace a lost connection before it gives up until the next
# request. psycopg_pool doubles its delay between tries without a cap (1, 2, 4, 8 s...): after a
# 10 s outage the next try could come 16 s late. Giving up after a few seconds means the next
# request tries at once, so recovery follows the server within about a second.
RECONNECT_TIMEOUT_SECONDS = 3.0
# psycopg's own options, accepted in a URL's query string (libpq would refuse them).
_CLIENT_OPTIONS = ("prepare_threshold",)
# A server that vanishes without a word (its machine died, the network between us broke) leaves
# connections libpq alone gives up on only when the kernel does: ~15 minutes for a statement
# waiting for its reply, over 2 hours for an idle one (a LISTEN). With these, a silent peer is
# noticed in about half a minute: the connection fails, the worker says so and retries, and the
# pool makes new ones (to the promoted primary of a multi-host URL). Unacknowledged data for
# tcp_user_timeout, or keepalive probes unanswered, end it; a slow statement does not (the
# server's kernel acknowledges it, and answers the probes). A URL that names one sets it.
TCP_DEFAULTS = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",
}


def configured_url(explicit: str | None = None) -> str | None:
    """The database URL given explicitly, else from the environment, else None (embedded)."""
    if explicit:
        return explicit
    for name in URL_VARIABLES:
        value = os.environ.get(name)
        if value:
            return value
    return None


def masked(url: str) -> str:
    """The URL with its password hidden, for messages and logs."""
    url = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", url)


def describe(url: str) -> str:
    """Where a URL points, for a log line: ``host:port/dbname``, never a user or password
    (libpq's defaults and PG* variables fill what the URL leaves out)."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.Error:
        return masked(url)
    host = info.get("host") or info.get("hostaddr") or os.environ.get("PGHOST") or "localhost"
    port = info.get("port") or os.environ.get("PGPORT") or "5432"
    dbname = info.get("dbname") or os.environ.get("PGDATABASE") or info.get("user") or "(default)"
    return f"{host}:{port}/{dbname}"


def split_client_options(url: str) -> tuple[str, dict[str, Any]]:
    """The URL without psycopg's own options (``?prepare_threshold=0``), and those options."""
    options: dict[str, Any] = {}
    if not any(name in url for name in _CLIENT_OPTIONS):
        return url, options
    if "://" in url:
        try:
            parts = urlsplit(url)
        except ValueError:  # not a URL urllib can read: libpq's check names the fault
            return url, options
        query = parse_qsl(parts.query, keep_blank_values=True)
        kept = [(k, v) for k, v in query if k not in _CLIENT_OPTIONS]
        options = {k: v for k, v in query if k in _CLIENT_OPTIONS}
        if len(kept) != len(query):
            url = urlunsplit(parts._replace(query=urlencode(kept)))
    else:
        for name in _CLIENT_OPTIONS:
            match = re.search(rf"(?:^|\s){name}\s*=\s*(\S*)", url)
            if match:
                options[name] = match.group(1)
                url = (url[: match.start()] + url[match.end() :]).strip()
    if "prepare_threshold" in options:
        options["prepare_threshold"] = _threshold(url, options["prepare_threshold"])
    return url, options


def _threshold(url: str, value: str) -> int | None:
    if value.lower() in ("", "none", "null"):
        return None
    try:
        return int(value)
    except ValueError:
        raise DatabaseURLError(
            f"invalid database URL {masked(url)!r}: prepare_threshold must be a number or "
            f"'none', got {value!r}"
        ) from None


def check_url(url: str) -> None:
    """Raise DatabaseURLError, naming the URL, when it cannot be parsed."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else None
    if scheme is not None and scheme not in ("postgresql", "postgres"):
        base = scheme.split("+", 1)[0]
        hint = (
            f"drop the SQLAlchemy driver part {scheme[len(base) :]!r}: use a postgresql:// URL"
            if base in ("postgresql", "postgres")
            else "cronbase needs PostgreSQL; use a postgresql:// URL"
        )
        raise DatabaseURLError(f"invalid database URL {masked(url)!r}: {hint}")
    url, _ = split_client_options(url)
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        # libpq's reason can quote the whole URL, password included.
        reason = masked(str(exc).strip().splitlines()[0])
        raise DatabaseURLError(f"invalid database URL {masked(url)!r}: {reason}") from None


def unreachable(url: str, exc: Exception) -> DatabaseURLError:
    reason = masked((str(exc).strip().splitlines() or [type(exc).__name__])[-1])
    return DatabaseURLError(f"cannot connect to database {masked(url)!r}: {reason}")


def connection_kwargs(
    url: str, application_name: str, **options: Any
) -> tuple[str, dict[str, Any]]:
    """The libpq URL and psycopg's keyword arguments for a connection to ``url``."""
    bare, from_url = split_client_options(url)
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "connect_timeout": CONNECT_TIMEOUT_SECONDS,
        "application_name": application_name,
    }
    try:
        given = conninfo_to_dict(bare)
    except psycopg.ProgrammingError:  # not a URL libpq reads: connecting names the fault
        given = {}
    kwargs.update({name: value for name, value in TCP_DEFAULTS.items() if name not in given})
    kwargs.update(from_url)
    kwargs.update(options)
    return bare, kwargs


def raise_if_cancelled() -> None:
    """Raise CancelledError when the current task was cancelled but the cancel never reached
    it. psycopg_pool absorbs a cancel that arrives while a checked connection is handed out
    (psycopg#1401, seen with 3.3.3): a background loop that took a connection then runs on,
    and a stopping worker waits on it (a retention round's sleep, 5 minutes). Each loop that
    runs until cancelled calls this after each round."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def read_json_tolerantly(context: AdaptContext) -> None:
    """Make ``context`` (a connection, a cursor) read json and jsonb columns by payload/stored.py's
    rule: a value nested deeper than MAX_JSON_DEPTH, or one Python's json cannot read, is an
    UndecodableJSON. With psycopg's json.loads, one such row (written by other SQL) failed the
    whole statement with a RecursionError: every list that held it, every action on it."""
    set_json_loads(read_stored, context)


async def _read_json_tolerantly(conn: psycopg.AsyncConnection[Any]) -> None:
    read_json_tolerantly(conn)


def connect(url: str, *, application_name: str = "cronbase", **options: Any) -> psycopg.Connection:
    """One sync connection; errors name the (masked) URL."""
    check_url(url)
    bare, kwargs = connection_kwargs(url, application_name, **options)
    try:
        conn = psycopg.connect(bare, **kwargs)
    except psycopg.OperationalError as exc:
        raise unreachable(url, exc) from None
    read_json_tolerantly(conn)
    return conn


async def connect_async(
    url: str, *, application_name: str = "cronbase", **options: Any
) -> psycopg.AsyncConnection:
    """One async connection; errors name the (masked) URL."""
    check_url(url)
    bare, kwargs = connection_kwargs(url, application_name, **options)
    try:
        conn = await psycopg.AsyncConnection.connect(bare, **kwargs)
    except psycopg.OperationalError as exc:
        raise unreachable(url, exc) from None
    read_json_tolerantly(conn)
    return conn


# SQLSTATEs of a connection the server ended: admin shutdown, crash shutdown, cannot connect now.
_CONNECTION_ENDED = frozenset({"57P01", "57P02", "57P03"})


def is_connection_loss(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection itself was lost (or none could be had), as a restart
    or a failover does, rather than that a statement failed."""
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _CONNECTION_ENDED


def has_news(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection has something to read: a healthy one has nothing, one the
    server dropped (restart, failover, idle timeout) has its goodbye or end of file."""
    if conn.closed:
        return True
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    return bool(readable)


def _sync_check(holder: list[ConnectionPool]) -> Callable[[psycopg.Connection[Any]], None]:
    def check(conn: psycopg.Connection[Any]) -> None:
        # A round trip only for a connection that has news: a select() costs ~1 us, a check
        # query a round trip on every enqueue.
        if not has_news(conn):
            return
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            # One dead connection after a restart means the others are dead too: drop them all
            # now, or each request would find one and back off (1 s, 2 s, ...) before the next.
            holder[0].check()
            raise

    return check


def _async_check(
    holder: list[AsyncConnectionPool],
) -> Callable[[psycopg.AsyncConnection[Any]], Any]:
    async def check(conn: psycopg.AsyncConnection[Any]) -> None:
        if not has_news(conn):
            return
        try:
            await AsyncConnectionPool.check_connection(conn)
        except Exception:
            await holder[0].check()
            raise

    return check


def _waiting(pool: ConnectionPool | AsyncConnectionPool) -> int:
    return pool.get_stats().get("requests_waiting", 0)


def _retrying(pool: ConnectionPool | AsyncConnectionPool) -> bool:
    """Say that the pool's reconnect gave up; whether callers still wait for a connection (their
    timeout outlasts the reconnect's): then the pool tries again now, or they would wait out
    their whole timeout although the server may be back meanwhile (a replica promoted a few
    seconds after its primary died)."""
    waiting = bool(_waiting(pool))
    then = "retrying for waiting callers" if waiting else "the next request tries again"
    # Debug, on a logger of its own: the outage's one line says the database is away
    # (outage.py); this is for whoever watches the pools themselves (the failover test).
    logging.getLogger("cronbase.pool").debug(
        "pool %s: cannot reach the database yet; %s", pool.name, then
    )
    return waiting


def _gave_up(pool: ConnectionPool) -> None:
    if _retrying(pool):
        pool.check()  # with no connection left, it grows the pool: a new round of attempts


async def _async_gave_up(pool: AsyncConnectionPool) -> None:
    if _retrying(pool):
        await pool.check()


def new_pool(
    url: str, *, min_size: int, max_size: int, name: str, timeout: float, **options: Any
) -> ConnectionPool:
    """A sync pool, not yet open, of autocommit connections checked when taken."""
    return _new(
        ConnectionPool,
        _sync_check,
        _gave_up,
        read_json_tolerantly,
        url,
        name,
        min_size,
        max_size,
        timeout,
        options,
    )


def new_async_pool(
    url: str, *, min_size: int, max_size: int, name: str, timeout: float, **options: Any
) -> AsyncConnectionPool:
    """The async twin of :func:`new_pool`."""
    return _new(
        AsyncConnectionPool,
        _async_check,
        _async_gave_up,
        _read_json_tolerantly,
        url,
        name,
        min_size,
        max_size,
        timeout,
        options,
    )


PoolT = TypeVar("PoolT", ConnectionPool, AsyncConnectionPool)


def _new(
    kind: type[PoolT],
    check: Callable[[list[PoolT]], Any],
    gave_up: Callable[[PoolT], Any],
    configure: Callable[[Any], Any],
    url: str,
    name: str,
    min_size: int,
    max_size: int,
    timeout: float,
    options: dict[str, Any],
) -> PoolT:
    bare, kwargs = connection_kwargs(url, name, **options)
    # The check needs the pool it checks (to drop its other connections): known once built.
    holder: list[PoolT] = []
    pool = kind(
        bare,
        min_size=min_size,
        max_size=max_size,
        kwargs=kwargs,
        name=name,
        open=False,
        timeout=timeout,
        check=check(holder),
        configure=configure,
        reconnect_timeout=RECONNECT_TIMEOUT_SECONDS,
        reconnect_failed=gave_up,
    )
    holder.append(pool)
    return pool
