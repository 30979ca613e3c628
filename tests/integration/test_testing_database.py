"""cronbase.testing.throwaway_schema and use_database on the real test server: the schema is
migrated and dropped, the App is pointed at it and back, and a lock left behind is named."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

import cronbase
from cronbase.db.migrate import LATEST_VERSION
from cronbase.errors import ConfigurationError
from cronbase.testing import database, drain, throwaway_schema, use_database, use_database_async

NOWHERE = "postgresql://must-not-connect@127.0.0.1:1/none"


def schema_exists(db: psycopg.Connection[Any], name: str) -> bool:
    row = db.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", [name]).fetchone()
    return row is not None and row[0] == 1


def test_a_throwaway_schema_is_migrated_then_dropped_even_after_an_error(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    names: list[str] = []

    def fail_inside() -> None:
        with throwaway_schema(database_url) as schema:
            names.append(schema)
            version = db.execute(
                sql.SQL("SELECT max(version) FROM {}.migrations").format(sql.Identifier(schema))
            ).fetchone()
            assert version == (LATEST_VERSION,)
            raise RuntimeError("the test failed")

    with pytest.raises(RuntimeError, match="the test failed"):
        fail_inside()
    [s] = names
    assert s.startswith("cronbase_test_")
    assert not schema_exists(db, s)
    with throwaway_schema(database_url) as other:
        assert other != s


def test_use_database_points_the_app_and_its_tasks_there_and_back(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    app = cronbase.App(database_url=NOWHERE, max_payload_bytes=1000)

    @app.task
    def work(n: int) -> None: ...

    own = app.db
    with throwaway_schema(database_url) as schema:
        with use_database(app, database_url, schema) as same:
            assert same is app
            assert work.db is app.db is not own
            assert app.db.max_payload_bytes == 1000  # the App's own payload settings
            job_id = work.defer(n=1)
            assert app.jobs.get(job_id).status is cronbase.JobStatus.QUEUED
            assert [o.outcome for o in drain(app)] == ["succeeded"]
            test_db = app.db
        count = db.execute(
            sql.SQL("SELECT count(*) FROM {}.jobs_all").format(sql.Identifier(schema))
        ).fetchone()
        assert count == (1,)
    assert app.db is own
    assert work.db is own
    assert app.jobs.db is own
    assert test_db._pool is None  # closed at the end of the block
    assert own._pool is None  # the App's own database was never used


@pytest.mark.anyio
async def test_use_database_async_closes_the_async_pool(database_url: str) -> None:
    app = cronbase.App(database_url=NOWHERE)

    @app.task
    async def work(n: int) -> None: ...

    with throwaway_schema(database_url) as schema:
        async with use_database_async(app, database_url, schema):
            await work.defer_async(n=1)
            test_db = app.db
            assert test_db._async_pool is not None
        assert test_db._async_pool is None
        assert app.db is not test_db


def test_a_lock_left_by_the_test_is_named_instead_of_hanging(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database, "DROP_LOCK_TIMEOUT", "200ms")
    with psycopg.connect(database_url) as holder:  # not autocommit: a transaction stays open
        with pytest.raises(ConfigurationError) as raised:  # noqa: SIM117
            with throwaway_schema(database_url) as schema:
                holder.execute(sql.SQL("SELECT * FROM {}.jobs").format(sql.Identifier(schema)))
        message = str(raised.value)
        assert f"cannot drop test schema {schema!r}" in message
        assert "still holds a lock on it after 200ms; commit or close it" in message
        holder.rollback()
    # Once the lock is gone the schema can go too.
    database.drop_schema(database_url, schema)
