"""The migration-vs-old-workers rule (db/migrate.py, docs/guides/upgrade.md): a migration marked
``-- contract: workers from NNNN`` is refused while a live worker's code knows less, naming it,
unless forced; expand migrations (all of today's) never wait for anyone."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.db import migrate
from cronbase.errors import MigrationError

SCHEMA = "cronbase_contract"


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A schema of its own at this code's version (the shared one must stay at it)."""
    with psycopg.connect(database_url, autocommit=True) as c:
        c.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        migrate.apply_migrations(c, SCHEMA)
        yield c
        c.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


def worker(conn: psycopg.Connection[Any], name: str, known: int | None, seen: str = "0s") -> None:
    conn.execute(
        f"INSERT INTO {SCHEMA}.workers (id, hostname, pid, concurrency, version, schema_version,"
        " last_seen_at) VALUES (%s, 'host-a', 7, 1, %s, %s, now() - %s::interval)",
        [name, None if known is None else "0.1.0", known, seen],
    )


def ship_next(monkeypatch: pytest.MonkeyPatch, *contract_from: int | None) -> int:
    """Ship more migrations, one per value (None: expand; else a contract one), as a later
    release would; returns the newest version."""
    steps = list(migrate.MIGRATIONS)
    for needs in contract_from:
        version = steps[-1].version + 1
        mark = "" if needs is None else f"-- contract: workers from {needs:04d}\n"
        text = f"{mark}COMMENT ON TABLE {{schema}}.queues IS 'v{version}';\n"
        steps.append(migrate.Migration(version, f"next_{version}", text, needs))
    monkeypatch.setattr(migrate, "MIGRATIONS", steps)
    monkeypatch.setattr(migrate, "LATEST_VERSION", steps[-1].version)
    return steps[-1].version


def scalar_contract(conn: psycopg.Connection[Any], version: int) -> int | None:
    row = conn.execute(
        f"SELECT contract_from FROM {SCHEMA}.migrations WHERE version = %s", [version]
    ).fetchone()
    assert row is not None
    return row[0]


def test_a_contract_migration_says_so_on_a_line_of_its_own() -> None:
    marked = "-- 0020: drop jobs.old.\n-- contract: workers from 0019\nALTER TABLE x DROP y;\n"
    assert migrate.parse_migration("0020_drop_old.sql", marked).contract_from == 19
    quoted = "-- a line that mentions -- contract: workers from 0019 is no mark\n"
    assert migrate.parse_migration("0020_drop_old.sql", quoted).contract_from is None


def test_packaged_migrations_are_all_expand() -> None:
    assert [m.version for m in migrate.MIGRATIONS if m.contract_from is not None] == []


def test_a_contract_migration_waits_for_old_workers_naming_them(
    conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    current = migrate.LATEST_VERSION
    needs = current + 1
    worker(conn, "older-code", current)
    worker(conn, "before-0016", None)
    worker(conn, "current", needs)
    worker(conn, "gone-long-ago", None, seen="10 minutes")
    version = ship_next(monkeypatch, needs)

    with pytest.raises(MigrationError) as refused:
        migrate.apply_migrations(conn, SCHEMA)
    message = str(refused.value)
    assert f"{version:04d}_next_{version} is a contract migration" in message
    assert f"older-code (host host-a pid 7, code 0.1.0 m{current})" in message
    assert "before-0016 (host host-a pid 7, code before 0016)" in message
    assert "current (host" not in message
    assert "gone-long-ago" not in message
    assert "--force" in message
    assert migrate.schema_version(conn, SCHEMA) == current

    assert migrate.apply_migrations(conn, SCHEMA, force=True) == [f"{version:04d}_next_{version}"]
    assert scalar_contract(conn, version) == needs


def test_a_contract_migration_runs_once_the_old_workers_are_gone(
    conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    worker(conn, "upgraded", migrate.LATEST_VERSION)
    version = ship_next(monkeypatch, migrate.LATEST_VERSION)
    assert migrate.apply_migrations(conn, SCHEMA) == [f"{version:04d}_next_{version}"]


def run_burst_worker(database_url: str) -> None:
    app = cronbase.App(database_url, schema=SCHEMA)
    try:
        app.run_worker(burst=True, install_signal_handlers=False, schedule=False, retention=None)
    finally:
        app.close()


def test_a_worker_older_than_the_schema_starts_unless_a_contract_needs_newer_code(
    conn: psycopg.Connection[Any], database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    ours = migrate.LATEST_VERSION
    with pytest.MonkeyPatch.context() as future:
        expand = ship_next(future, None)
        migrate.apply_migrations(conn, SCHEMA)
    # This code is now the previous release: an expand migration newer than it is fine for a
    # worker starting (a restart mid-deploy), not for other commands.
    assert migrate.require_current(conn, SCHEMA, newer_ok=True) == expand
    with pytest.raises(MigrationError, match=f"newer than this cronbase \\({ours}\\)"):
        migrate.require_current(conn, SCHEMA)
    with caplog.at_level(logging.WARNING, logger="cronbase"):
        run_burst_worker(database_url)
    assert f"is at version {expand}, newer than this cronbase ({ours})" in caplog.text

    with pytest.MonkeyPatch.context() as future:
        ship_next(future, None, expand + 1)
        migrate.apply_migrations(conn, SCHEMA)
    with pytest.raises(MigrationError) as refused:
        migrate.require_current(conn, SCHEMA, newer_ok=True)
    assert str(refused.value) == (
        f"schema {SCHEMA!r} is at version {expand + 1}, and its migration "
        f"{expand + 1:04d}_next_{expand + 1} needs workers whose code knows migration "
        f"{expand + 1:04d}; this cronbase knows {ours}: upgrade cronbase"
    )
    with pytest.raises(MigrationError, match="upgrade cronbase"):
        run_burst_worker(database_url)
