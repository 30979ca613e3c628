"""The only module that creates connections: URL resolution, checks, and psycopg pools."""

from __future__ import annotations

import logging
import os
import re

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ..errors import DatabaseURLError

logger = logging.getLogger("cronbase")

URL_VARIABLES = ("CRONBASE_DATABASE_URL", "DATABASE_URL")
CONNECT_TIMEOUT_SECONDS = 10


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


def check_url(url: str) -> None:
    """Raise DatabaseURLError, naming the URL, when it cannot be parsed."""
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        # libpq's reason can quote the whole URL, password included.
        reason = masked(str(exc).strip().splitlines()[0])
        raise DatabaseURLError(f"invalid database URL {masked(url)!r}: {reason}") from None


def _unreachable(url: str, exc: Exception) -> DatabaseURLError:
    reason = masked((str(exc).strip().splitlines() or [type(exc).__name__])[-1])
    return DatabaseURLError(f"cannot connect to database {masked(url)!r}: {reason}")


def connect(
    url: str, *, autocommit: bool = True, application_name: str = "cronbase"
) -> psycopg.Connection:
    """One sync connection; errors name the (masked) URL."""
    check_url(url)
    try:
        return psycopg.connect(
            url,
            autocommit=autocommit,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            application_name=application_name,
        )
    except psycopg.OperationalError as exc:
        raise _unreachable(url, exc) from None


async def connect_async(
    url: str, *, autocommit: bool = True, application_name: str = "cronbase"
) -> psycopg.AsyncConnection:
    """One async connection; errors name the (masked) URL."""
    check_url(url)
    try:
        return await psycopg.AsyncConnection.connect(
            url,
            autocommit=autocommit,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            application_name=application_name,
        )
    except psycopg.OperationalError as exc:
        raise _unreachable(url, exc) from None


def open_pool(
    url: str, *, min_size: int = 1, max_size: int = 4, name: str = "cronbase"
) -> ConnectionPool:
    """An open sync pool of autocommit connections; fails fast with the server's reason."""
    # One direct connection first: the pool would only say "timeout" where the server says why.
    connect(url).close()
    pool = ConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        kwargs={"autocommit": True, "application_name": name},
        name=name,
        open=False,
    )
    pool.open(wait=True, timeout=CONNECT_TIMEOUT_SECONDS)
    return pool


async def open_async_pool(
    url: str, *, min_size: int = 1, max_size: int = 4, name: str = "cronbase"
) -> AsyncConnectionPool:
    """An open async pool of autocommit connections; fails fast with the server's reason."""
    await (await connect_async(url)).close()
    pool = AsyncConnectionPool(
        url,
        min_size=min_size,
        max_size=max_size,
        kwargs={"autocommit": True, "application_name": name},
        name=name,
        open=False,
    )
    await pool.open(wait=True, timeout=CONNECT_TIMEOUT_SECONDS)
    return pool
