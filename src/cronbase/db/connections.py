"""What ``configure(connection=...)`` accepts, turned into the psycopg connection a job is written on.

A psycopg connection is used as it is. A SQLAlchemy 2 ``Session``, ``Connection``,
``AsyncSession`` or ``AsyncConnection`` on the psycopg 3 driver gives its own, inside its
transaction (a savepoint of ``begin_nested()`` included), so the job commits or rolls back with
the caller's work. SQLAlchemy is an optional extra: it is imported only to look at an object
that comes from it, and then it is loaded already.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import psycopg

from ..errors import ConnectionTypeError

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Dialect
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session
    from sqlalchemy.orm import Session, scoped_session

    # What configure(connection=...) takes: defer() the sync ones, defer_async() the async ones.
    CallerConnection: TypeAlias = (
        psycopg.Connection[Any]
        | psycopg.AsyncConnection[Any]
        | Session
        | Connection
        | scoped_session[Any]
        | AsyncSession
        | AsyncConnection
        | async_scoped_session[Any]
    )

_SYNC_ACCEPTS = (
    "a psycopg.Connection, or a SQLAlchemy Session or Connection on postgresql+psycopg://"
)
_ASYNC_ACCEPTS = (
    "a psycopg.AsyncConnection, or a SQLAlchemy AsyncSession or AsyncConnection "
    "on postgresql+psycopg://"
)


def _name(obj: object) -> str:
    """The type as a reader knows it, with its article: ``a sqlalchemy.Connection``, ``an int``."""
    cls = type(obj)
    package = cls.__module__.partition(".")[0]
    name = cls.__qualname__ if package == "builtins" else f"{package}.{cls.__qualname__}"
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _sqlalchemy_module(obj: object) -> str | None:
    """The SQLAlchemy module ``obj``'s type (or a base of it) comes from, else None."""
    for cls in type(obj).__mro__:
        if cls.__module__.startswith("sqlalchemy."):
            return cls.__module__
    return None


def _refused(obj: object, call: str, accepts: str) -> ConnectionTypeError:
    hint = ""
    if type(obj).__name__.endswith("Engine"):
        # An engine has no transaction to join: the job would commit on its own.
        hint = " (open a connection or a session on the engine and pass that)"
    return ConnectionTypeError(f"{call} got {_name(obj)}; connection= takes {accepts}{hint}")


def _wrong_call(obj: object, call: str, other: str) -> ConnectionTypeError:
    return ConnectionTypeError(
        f"{call} got {_name(obj)}, which is {other}; use {_other_call(call)}"
    )


def _other_call(call: str) -> str:
    if call == "defer()":
        return "defer_async() with it, or pass a sync connection or Session"
    return "defer() with it, or pass an async connection or AsyncSession"


def _check_driver(obj: object, call: str, dialect: Dialect, is_async: bool) -> None:
    """Refuse an engine on another driver before a connection is opened or a transaction begun."""
    if dialect.name != "postgresql" or dialect.driver != "psycopg":
        raise ConnectionTypeError(
            f"{call} got {_name(obj)} on {dialect.name}+{dialect.driver}; cronbase writes "
            "through psycopg 3: create the engine with a postgresql+psycopg:// URL"
        )
    if dialect.is_async != is_async:
        # A sync Session on an AsyncEngine's sync_engine: its driver connection is async.
        raise ConnectionTypeError(
            f"{call} got {_name(obj)} bound to {'an async' if dialect.is_async else 'a sync'} "
            "engine; pass an AsyncSession or AsyncConnection to defer_async(), a sync Session "
            "or Connection to defer()"
        )


def _begun(connection: Connection) -> None:
    # A Connection that has run nothing yet is outside any transaction as SQLAlchemy sees it: its
    # commit() would do nothing, and the job, written in the driver's implicit transaction, would
    # be rolled back when the connection goes back to the pool. begin() is what its own first
    # execute would do (autobegin), so the caller's commit() then commits the job.
    if not connection.in_transaction():
        connection.begin()


def sync_connection(obj: object) -> psycopg.Connection[Any]:
    """The psycopg connection to write on for ``defer()``'s ``connection=``."""
    if isinstance(obj, psycopg.Connection):
        return obj
    if isinstance(obj, psycopg.AsyncConnection):
        raise _wrong_call(obj, "defer()", "async")
    module = _sqlalchemy_module(obj)
    if module is None:
        raise _refused(obj, "defer()", _SYNC_ACCEPTS)
    if module.startswith("sqlalchemy.ext.asyncio."):
        from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session

        if isinstance(obj, AsyncSession | AsyncConnection | async_scoped_session):
            raise _wrong_call(obj, "defer()", "async")
        raise _refused(obj, "defer()", _SYNC_ACCEPTS)

    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session, scoped_session

    if isinstance(obj, scoped_session):
        obj = obj()
    if isinstance(obj, Session):
        _check_driver(obj, "defer()", obj.get_bind().dialect, is_async=False)
        # connection() joins the session's transaction, or begins it (and its Connection's).
        connection = obj.connection()
    elif isinstance(obj, Connection):
        _check_driver(obj, "defer()", obj.dialect, is_async=False)
        connection = obj
        _begun(connection)
    else:
        raise _refused(obj, "defer()", _SYNC_ACCEPTS)
    driver = connection.connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise _refused(obj, "defer()", _SYNC_ACCEPTS)
    return driver


async def async_connection(obj: object) -> psycopg.AsyncConnection[Any]:
    """The psycopg connection to write on for ``defer_async()``'s ``connection=``."""
    if isinstance(obj, psycopg.AsyncConnection):
        return obj
    if isinstance(obj, psycopg.Connection):
        raise _wrong_call(obj, "defer_async()", "sync")
    module = _sqlalchemy_module(obj)
    if module is None:
        raise _refused(obj, "defer_async()", _ASYNC_ACCEPTS)
    if not module.startswith("sqlalchemy.ext.asyncio."):
        from sqlalchemy.engine import Connection
        from sqlalchemy.orm import Session, scoped_session

        if isinstance(obj, Session | Connection | scoped_session):
            raise _wrong_call(obj, "defer_async()", "sync")
        raise _refused(obj, "defer_async()", _ASYNC_ACCEPTS)

    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session

    if isinstance(obj, async_scoped_session):
        obj = obj()
    if isinstance(obj, AsyncSession):
        _check_driver(obj, "defer_async()", obj.get_bind().dialect, is_async=True)
        connection = await obj.connection()
    elif isinstance(obj, AsyncConnection):
        _check_driver(obj, "defer_async()", obj.sync_engine.dialect, is_async=True)
        connection = obj
        if not connection.in_transaction():
            await connection.begin()  # as _begun: what its first execute would do
    else:
        raise _refused(obj, "defer_async()", _ASYNC_ACCEPTS)
    driver = (await connection.get_raw_connection()).driver_connection
    if not isinstance(driver, psycopg.AsyncConnection):
        raise _refused(obj, "defer_async()", _ASYNC_ACCEPTS)
    return driver
