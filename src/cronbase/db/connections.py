"""What ``configure(connection=...)`` accepts, turned into the psycopg connection a job is written on.

A psycopg connection is used as it is. A SQLAlchemy 2 ``Session``, ``Connection``,
``AsyncSession`` or ``AsyncConnection`` on the psycopg 3 driver gives its own, inside its
transaction (a savepoint of ``begin_nested()`` included), so the job commits or rolls back with
the caller's work. SQLAlchemy is an optional extra: it is imported only to look at an object
that comes from it, and then it is loaded already.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

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


C = TypeVar("C", psycopg.Connection[Any], psycopg.AsyncConnection[Any])

# By the side a defer is on (is_async): its name, what it accepts, its psycopg connection type.
_SIDES = {
    False: ("defer()", _SYNC_ACCEPTS, psycopg.Connection),
    True: ("defer_async()", _ASYNC_ACCEPTS, psycopg.AsyncConnection),
}


def _sqlalchemy_types(is_async: bool) -> tuple[Any, Any, Any]:
    """SQLAlchemy's session, connection and scoped-session types of one side (imported only
    once an object from SQLAlchemy is seen: then it is loaded already)."""
    if is_async:
        from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session

        return AsyncSession, AsyncConnection, async_scoped_session
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session, scoped_session

    return Session, Connection, scoped_session


def _sqlalchemy_object(obj: object, is_async: bool) -> tuple[Any, bool]:
    """``obj`` (not a psycopg connection of this side) as a SQLAlchemy Session (True) or
    Connection (False) of this side on psycopg 3; ConnectionTypeError saying what is wrong."""
    call, accepts, _ = _SIDES[is_async]
    if isinstance(obj, _SIDES[not is_async][2]):
        raise _wrong_call(obj, call, "sync" if is_async else "async")
    module = _sqlalchemy_module(obj)
    if module is None:
        raise _refused(obj, call, accepts)
    if module.startswith("sqlalchemy.ext.asyncio.") != is_async:
        if isinstance(obj, _sqlalchemy_types(not is_async)):
            raise _wrong_call(obj, call, "sync" if is_async else "async")
        raise _refused(obj, call, accepts)
    session, connection, scoped = _sqlalchemy_types(is_async)
    found = obj() if isinstance(obj, scoped) else obj
    if isinstance(found, session):
        _check_driver(found, call, found.get_bind().dialect, is_async)
        return found, True
    if isinstance(found, connection):
        dialect = found.sync_engine.dialect if is_async else found.dialect
        _check_driver(found, call, dialect, is_async)
        return found, False
    raise _refused(found, call, accepts)


def _driver(obj: object, driver: object, kind: type[C]) -> C:
    """The psycopg connection under a SQLAlchemy one; refused when it is another driver's."""
    if not isinstance(driver, kind):
        call, accepts, _ = _SIDES[kind is psycopg.AsyncConnection]
        raise _refused(obj, call, accepts)
    return driver


def sync_connection(obj: object) -> psycopg.Connection[Any]:
    """The psycopg connection to write on for ``defer()``'s ``connection=``."""
    if isinstance(obj, psycopg.Connection):
        return obj
    found, is_session = _sqlalchemy_object(obj, is_async=False)
    if is_session:
        # connection() joins the session's transaction, or begins it (and its Connection's).
        connection = found.connection()
    else:
        connection = found
        _begun(connection)
    return _driver(found, connection.connection.driver_connection, psycopg.Connection)


async def async_connection(obj: object) -> psycopg.AsyncConnection[Any]:
    """The psycopg connection to write on for ``defer_async()``'s ``connection=``."""
    if isinstance(obj, psycopg.AsyncConnection):
        return obj
    found, is_session = _sqlalchemy_object(obj, is_async=True)
    if is_session:
        connection = await found.connection()
    else:
        connection = found
        if not connection.in_transaction():
            await connection.begin()  # as _begun: what its first execute would do
    raw = await connection.get_raw_connection()
    return _driver(found, raw.driver_connection, psycopg.AsyncConnection)
