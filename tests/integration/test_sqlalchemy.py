"""configure(connection=...) with SQLAlchemy 2 Session, Connection, AsyncSession and
AsyncConnection on psycopg 3: the job commits, rolls back and leaves a savepoint with the caller's
work, is seen by nobody else before the commit, and a wrong object or driver is refused."""

from __future__ import annotations

import os
import sys
import types
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import URL, Engine, create_engine, text
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import Session, scoped_session, sessionmaker

import cronbase
from cronbase.errors import CronbaseError
from tests.e2e.harness import after_inherited, run_example

REPO = Path(__file__).resolve().parents[2]
SYNC_KINDS = ["session", "connection"]
ASYNC_KINDS = ["async_session", "async_connection"]
SELECT_JOBS = text("SELECT id FROM cronbase.jobs_all ORDER BY id")


def sqlalchemy_url(conninfo: str, driver: str = "postgresql+psycopg") -> URL:
    """The test database as a SQLAlchemy URL (the fixture's is libpq key=value text)."""
    parts = {k: str(v) for k, v in conninfo_to_dict(conninfo).items()}
    return URL.create(
        driver,
        username=parts.pop("user", None),
        password=parts.pop("password", None),
        database=parts.pop("dbname", None),
        query=parts,  # host (perhaps a socket folder), port...: libpq takes them here too
    )


def committed(db: psycopg.Connection[Any]) -> list[int]:
    """The job ids another connection sees."""
    return [r[0] for r in db.execute("SELECT id FROM cronbase.jobs_all ORDER BY id").fetchall()]


@pytest.fixture
def ship(app: cronbase.App) -> cronbase.Task[Any, Any]:
    @app.task
    def ship(order: int) -> None: ...

    return ship


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    made = create_engine(sqlalchemy_url(database_url))
    yield made
    made.dispose()


@contextmanager
def opened(engine: Engine, kind: str) -> Iterator[Any]:
    """A Session or a Connection: both commit(), rollback(), begin_nested() and execute()."""
    if kind == "session":
        with Session(engine) as session:
            yield session
    else:
        with engine.connect() as connection:
            yield connection


@asynccontextmanager
async def opened_async(database_url: str, kind: str) -> AsyncIterator[Any]:
    made: AsyncEngine = create_async_engine(sqlalchemy_url(database_url))
    try:
        if kind == "async_session":
            async with AsyncSession(made) as session:
                yield session
        else:
            async with made.connect() as connection:
                yield connection
    finally:
        await made.dispose()


def seen_by(handle: Any) -> list[int]:
    return [r[0] for r in handle.execute(SELECT_JOBS)]


async def seen_by_async(handle: Any) -> list[int]:
    return [r[0] for r in await handle.execute(SELECT_JOBS)]


# -- sync: Session and Connection -----------------------------------------------------------------


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_commit_keeps_the_job_seen_before_by_the_caller_only(
    ship: cronbase.Task[Any, Any], engine: Engine, db: psycopg.Connection[Any], kind: str
) -> None:
    with opened(engine, kind) as handle:
        # The first thing on a fresh Connection (nothing has begun its transaction), then commit.
        first = ship.configure(connection=handle).defer(order=1)
        handle.commit()
        assert committed(db) == [first]
        second = ship.configure(connection=handle).defer(order=2)
        assert seen_by(handle) == [first, second]
        assert committed(db) == [first]
        handle.commit()
    assert committed(db) == [first, second]


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_rollback_drops_the_job_and_the_next_transaction_still_commits(
    ship: cronbase.Task[Any, Any], engine: Engine, db: psycopg.Connection[Any], kind: str
) -> None:
    with opened(engine, kind) as handle:
        ship.configure(connection=handle).defer(order=1)
        ship.configure(connection=handle).defer_many([{"order": 2}, {"order": 3}])
        handle.rollback()
        assert seen_by(handle) == []
        handle.rollback()  # ends the transaction the select began: the defer begins a new one
        kept = ship.configure(connection=handle).defer(order=4)
        handle.commit()
    assert committed(db) == [kept]


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_a_rolled_back_savepoint_drops_only_the_jobs_deferred_inside_it(
    ship: cronbase.Task[Any, Any], engine: Engine, db: psycopg.Connection[Any], kind: str
) -> None:
    with opened(engine, kind) as handle:
        before = ship.configure(connection=handle).defer(order=1)
        savepoint = handle.begin_nested()
        ship.configure(connection=handle).defer(order=2)
        ship.configure(connection=handle).defer_many([{"order": 3}, {"order": 4}])
        savepoint.rollback()
        kept_savepoint = handle.begin_nested()
        inner = ship.configure(connection=handle).defer_many([{"order": 5}])
        kept_savepoint.commit()
        after = ship.configure(connection=handle).defer(order=6)
        assert committed(db) == []
        handle.commit()
    assert committed(db) == [before, *inner, after]


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_defer_many_commits_with_the_caller(
    ship: cronbase.Task[Any, Any], engine: Engine, db: psycopg.Connection[Any], kind: str
) -> None:
    with opened(engine, kind) as handle:
        ids = ship.configure(connection=handle).defer_many([{"order": n} for n in range(3)])
        assert len(ids) == 3
        assert seen_by(handle) == ids
        assert committed(db) == []
        handle.commit()
    assert committed(db) == ids


def test_the_job_commits_with_the_callers_own_rows(
    ship: cronbase.Task[Any, Any], engine: Engine, db: psycopg.Connection[Any]
) -> None:
    db.execute("CREATE TABLE IF NOT EXISTS public.sqlalchemy_test_orders (id int PRIMARY KEY)")
    db.execute("TRUNCATE public.sqlalchemy_test_orders")
    factory = sessionmaker(engine)
    with factory.begin() as session:  # commits at the end of the block
        session.execute(text("INSERT INTO public.sqlalchemy_test_orders VALUES (7)"))
        job_id = ship.configure(connection=session).defer(order=7)

    def refused_after_the_defer() -> None:
        with factory.begin() as session:  # rolls back: the block raises
            session.execute(text("INSERT INTO public.sqlalchemy_test_orders VALUES (8)"))
            ship.configure(connection=session).defer(order=8)
            raise RuntimeError("refused after the defer")

    with pytest.raises(RuntimeError):
        refused_after_the_defer()
    assert [
        r[0] for r in db.execute("SELECT id FROM public.sqlalchemy_test_orders").fetchall()
    ] == [7]
    assert committed(db) == [job_id]


def test_engine_begin_block_and_scoped_session(
    ship: cronbase.Task[Any, Any], engine: Engine, db: psycopg.Connection[Any]
) -> None:
    with engine.begin() as connection:
        first = ship.configure(connection=connection).defer(order=1)

    def rolled_back() -> None:
        with engine.begin() as connection:
            ship.configure(connection=connection).defer(order=2)
            raise RuntimeError("rolls the block back")

    with pytest.raises(RuntimeError):
        rolled_back()
    scoped = scoped_session(sessionmaker(engine))
    try:
        second = ship.configure(connection=scoped).defer(order=3)
        assert committed(db) == [first]
        scoped.commit()
    finally:
        scoped.remove()
    assert committed(db) == [first, second]


# -- async: AsyncSession and AsyncConnection ------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ASYNC_KINDS)
async def test_async_commit_keeps_the_job_seen_before_by_the_caller_only(
    ship: cronbase.Task[Any, Any], database_url: str, db: psycopg.Connection[Any], kind: str
) -> None:
    async with opened_async(database_url, kind) as handle:
        first = await ship.configure(connection=handle).defer_async(order=1)
        await handle.commit()
        assert committed(db) == [first]
        second = await ship.configure(connection=handle).defer_async(order=2)
        assert await seen_by_async(handle) == [first, second]
        assert committed(db) == [first]
        await handle.commit()
    assert committed(db) == [first, second]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ASYNC_KINDS)
async def test_async_rollback_drops_the_job_and_the_next_transaction_still_commits(
    ship: cronbase.Task[Any, Any], database_url: str, db: psycopg.Connection[Any], kind: str
) -> None:
    async with opened_async(database_url, kind) as handle:
        await ship.configure(connection=handle).defer_async(order=1)
        await ship.configure(connection=handle).defer_many_async([{"order": 2}, {"order": 3}])
        await handle.rollback()
        assert await seen_by_async(handle) == []
        await handle.rollback()
        kept = await ship.configure(connection=handle).defer_async(order=4)
        await handle.commit()
    assert committed(db) == [kept]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ASYNC_KINDS)
async def test_async_rolled_back_savepoint_drops_only_the_jobs_deferred_inside_it(
    ship: cronbase.Task[Any, Any], database_url: str, db: psycopg.Connection[Any], kind: str
) -> None:
    async with opened_async(database_url, kind) as handle:
        before = await ship.configure(connection=handle).defer_async(order=1)
        savepoint = await handle.begin_nested()
        await ship.configure(connection=handle).defer_async(order=2)
        await ship.configure(connection=handle).defer_many_async([{"order": 3}, {"order": 4}])
        await savepoint.rollback()
        kept_savepoint = await handle.begin_nested()
        inner = await ship.configure(connection=handle).defer_many_async([{"order": 5}])
        await kept_savepoint.commit()
        after = await ship.configure(connection=handle).defer_async(order=6)
        assert committed(db) == []
        await handle.commit()
    assert committed(db) == [before, *inner, after]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ASYNC_KINDS)
async def test_async_defer_many_commits_with_the_caller(
    ship: cronbase.Task[Any, Any], database_url: str, db: psycopg.Connection[Any], kind: str
) -> None:
    async with opened_async(database_url, kind) as handle:
        ids = await ship.configure(connection=handle).defer_many_async(
            [{"order": n} for n in range(3)]
        )
        assert len(ids) == 3
        assert await seen_by_async(handle) == ids
        assert committed(db) == []
        await handle.commit()
    assert committed(db) == ids


@pytest.mark.anyio
async def test_async_sessionmaker_begin_block(
    ship: cronbase.Task[Any, Any], database_url: str, db: psycopg.Connection[Any]
) -> None:
    made = create_async_engine(sqlalchemy_url(database_url))
    factory = async_sessionmaker(made)
    try:
        async with factory.begin() as session:
            kept = await ship.configure(connection=session).defer_async(order=1)

        async def rolled_back() -> None:
            async with factory.begin() as session:
                await ship.configure(connection=session).defer_async(order=2)
                raise RuntimeError("rolls the block back")

        with pytest.raises(RuntimeError):
            await rolled_back()
    finally:
        await made.dispose()
    assert committed(db) == [kept]


# -- what is refused ------------------------------------------------------------------------------


def refusal(call: Any) -> str:
    with pytest.raises(CronbaseError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    return message


async def refusal_async(call: Any) -> str:
    with pytest.raises(CronbaseError) as caught:
        await call()
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_engines_and_other_objects_are_refused_naming_what_is_accepted(
    ship: cronbase.Task[Any, Any], engine: Engine, db: psycopg.Connection[Any]
) -> None:
    message = refusal(lambda: ship.configure(connection=engine).defer(order=1))  # type: ignore[arg-type]
    assert message.startswith("defer() got a sqlalchemy.Engine; connection= takes a psycopg.")
    assert "Session or Connection" in message
    assert "engine" in message.rsplit(";", 1)[1]  # says to open a connection on it
    message = refusal(lambda: ship.configure(connection="postgresql://x").defer(order=1))  # type: ignore[arg-type]
    assert message.startswith("defer() got a str; connection= takes a psycopg.Connection")
    message = refusal(lambda: ship.configure(connection=object()).defer_many([{"order": 1}]))  # type: ignore[arg-type]
    assert message.startswith("defer() got an object;")
    assert committed(db) == []


@pytest.mark.anyio
async def test_async_engines_and_other_objects_are_refused(
    ship: cronbase.Task[Any, Any], database_url: str
) -> None:
    made = create_async_engine(sqlalchemy_url(database_url))
    try:
        message = await refusal_async(
            lambda: ship.configure(connection=made).defer_async(order=1)  # type: ignore[arg-type]
        )
        assert message.startswith("defer_async() got a sqlalchemy.AsyncEngine; connection= takes")
        assert "AsyncSession or AsyncConnection" in message
        message = await refusal_async(
            lambda: ship.configure(connection=42).defer_many_async([{"order": 1}])  # type: ignore[arg-type]
        )
        assert message.startswith("defer_async() got an int; connection= takes a psycopg.Async")
        # Something else of SQLAlchemy's is not taken for a sync connection.
        message = await refusal_async(
            lambda: ship.configure(connection=SELECT_JOBS).defer_async(order=1)  # type: ignore[arg-type]
        )
        assert message.startswith("defer_async() got a sqlalchemy.TextClause; connection= takes")
        # The async engine given to defer(): what defer() takes, and to open a connection.
        message = refusal(lambda: ship.configure(connection=made).defer(order=1))  # type: ignore[arg-type]
        assert message.startswith(
            "defer() got a sqlalchemy.AsyncEngine; connection= takes a psycopg"
        )
        assert message.endswith("(open a connection or a session on the engine and pass that)")
        # A sync Session on an async engine's sync_engine has an async driver connection.
        message = refusal(
            lambda: ship.configure(connection=Session(made.sync_engine)).defer(order=1)
        )
        assert "got a sqlalchemy.Session bound to an async engine; pass an AsyncSession" in message
    finally:
        await made.dispose()


@pytest.mark.anyio
async def test_an_async_object_given_to_defer_says_to_use_defer_async(
    ship: cronbase.Task[Any, Any], database_url: str
) -> None:
    made = create_async_engine(sqlalchemy_url(database_url))
    try:
        # Refused before anything connects: these two are never opened.
        for handle in (AsyncSession(made), AsyncConnection(made)):
            message = refusal(lambda h=handle: ship.configure(connection=h).defer(order=1))
            assert f"got a sqlalchemy.{type(handle).__name__}, which is async" in message
            assert "use defer_async() with it" in message
    finally:
        await made.dispose()
    async with await psycopg.AsyncConnection.connect(database_url) as raw:
        message = refusal(lambda: ship.configure(connection=raw).defer_many([{"order": 1}]))
        assert "got a psycopg.AsyncConnection, which is async; use defer_async()" in message


@pytest.mark.anyio
async def test_a_sync_object_given_to_defer_async_says_to_use_defer(
    ship: cronbase.Task[Any, Any], engine: Engine, database_url: str
) -> None:
    with Session(engine) as session, engine.connect() as connection:
        for handle in (session, connection):
            message = await refusal_async(
                lambda h=handle: ship.configure(connection=h).defer_async(order=1)
            )
            assert f"got a sqlalchemy.{type(handle).__name__}, which is sync" in message
            assert "use defer() with it" in message
        assert not session.in_transaction()  # refused before anything began
    with psycopg.connect(database_url) as raw:
        message = await refusal_async(lambda: ship.configure(connection=raw).defer_async(order=1))
        assert "got a psycopg.Connection, which is sync; use defer() with it" in message


@pytest.fixture
def psycopg2_engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    """An engine on SQLAlchemy's psycopg2 dialect (psycopg2 is not installed: a stand-in module
    lets the dialect load; nothing connects, since the refusal comes first)."""
    fake = types.ModuleType("psycopg2")
    fake.paramstyle = "pyformat"  # type: ignore[attr-defined]
    fake.__version__ = "2.9.9 (dt dec pq3 ext lo64)"  # type: ignore[attr-defined]
    for name in ("extras", "extensions"):
        part = types.ModuleType(f"psycopg2.{name}")
        setattr(fake, name, part)
        monkeypatch.setitem(sys.modules, f"psycopg2.{name}", part)
    monkeypatch.setitem(sys.modules, "psycopg2", fake)
    made = create_engine("postgresql+psycopg2://user@db.invalid/shop")
    yield made
    made.dispose()


def test_other_drivers_are_refused_before_anything_connects(
    ship: cronbase.Task[Any, Any], psycopg2_engine: Engine
) -> None:
    for handle in (Session(psycopg2_engine), scoped_session(sessionmaker(psycopg2_engine))):
        message = refusal(lambda h=handle: ship.configure(connection=h).defer(order=1))
        assert "Session on postgresql+psycopg2; " in message
        assert message.endswith("create the engine with a postgresql+psycopg:// URL")
    sqlite = create_engine("sqlite://")
    try:
        with sqlite.connect() as connection:
            message = refusal(lambda: ship.configure(connection=connection).defer(order=1))
            assert "got a sqlalchemy.Connection on sqlite+pysqlite; " in message
            assert not connection.in_transaction()
    finally:
        sqlite.dispose()


@pytest.mark.anyio
async def test_asyncpg_is_refused_before_anything_connects(
    ship: cronbase.Task[Any, Any],
) -> None:
    # asyncpg is not installed; with module= the dialect loads without it, and nothing connects.
    stand_in = types.SimpleNamespace(paramstyle="numeric_dollar")
    made = create_async_engine("postgresql+asyncpg://user@db.invalid/shop", module=stand_in)
    try:
        for handle in (AsyncSession(made), AsyncConnection(made)):
            message = await refusal_async(
                lambda h=handle: ship.configure(connection=h).defer_async(order=1)
            )
            assert f"got a sqlalchemy.{type(handle).__name__} on postgresql+asyncpg; " in message
            assert "postgresql+psycopg://" in message
    finally:
        await made.dispose()


# -- examples/sqlalchemy_session.py ---------------------------------------------------------------


def test_the_session_example_keeps_what_commits_and_drops_the_savepoint(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    db.execute("DROP TABLE IF EXISTS public.users")
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    url = sqlalchemy_url(database_url, "postgresql").render_as_string(hide_password=False)
    env.update(CRONBASE_DATABASE_URL=url, PYTHONPATH=after_inherited(str(REPO)))
    result = run_example("sqlalchemy_session", env)
    assert result.stdout.splitlines()[-1] == "['send_gift', 'send_welcome', 'send_welcome']"
    users = dict(db.execute("SELECT email, id FROM public.users").fetchall())
    rows = db.execute("SELECT task, (payload->>'user_id')::int FROM cronbase.jobs_all").fetchall()
    assert sorted(rows) == sorted(
        [
            ("send_welcome", users["ada@example.com"]),
            ("send_gift", users["ada@example.com"]),
            ("send_welcome", users["bob@example.com"]),
        ]
    )
