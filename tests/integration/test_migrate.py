"""Migrations: the schema they build matches the snapshot; concurrent runs apply once."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.db import migrate
from tests.integration.schema_snapshot import SNAPSHOT, describe


@pytest.fixture
def scratch_schema(database_url: str) -> Any:
    name = "cronbase_scratch"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        yield conn, name
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def test_migrations_build_the_snapshot_schema(scratch_schema: Any) -> None:
    conn, name = scratch_schema
    applied = migrate.apply_migrations(conn, name)
    assert applied == [f"{m.version:04d}_{m.name}" for m in migrate.MIGRATIONS]
    assert describe(conn, name) == SNAPSHOT.read_text(), (
        "schema differs from tests/integration/schema_snapshot.txt; if the change is intended, "
        "run: python -m tests.integration.schema_snapshot --write"
    )


def test_migrate_twice_applies_nothing_the_second_time(scratch_schema: Any) -> None:
    conn, name = scratch_schema
    assert migrate.apply_migrations(conn, name)
    assert migrate.apply_migrations(conn, name) == []
    assert migrate.schema_version(conn, name) == migrate.LATEST_VERSION


def test_concurrent_migrate_processes_apply_each_migration_once(
    scratch_schema: Any, database_url: str
) -> None:
    conn, name = scratch_schema
    code = (
        "import sys, psycopg; from cronbase.db import migrate; "
        "c = psycopg.connect(sys.argv[1], autocommit=True); "
        "print(len(migrate.apply_migrations(c, sys.argv[2])))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, database_url, name], stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    counts = [int(p.communicate(timeout=60)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(counts) == [0, 0, 0, len(migrate.MIGRATIONS)]
    rows = conn.execute(f"SELECT count(*) FROM {name}.migrations").fetchone()
    assert rows == (len(migrate.MIGRATIONS),)


def test_worker_refuses_an_unmigrated_schema(database_url: str, scratch_schema: Any) -> None:
    _, name = scratch_schema
    app = cronbase.App(database_url=database_url, schema=name)
    with pytest.raises(cronbase.MigrationError, match=r"run `cronbase migrate`"):
        app.run_worker(burst=True, install_signal_handlers=False)


def test_a_newer_schema_is_refused(scratch_schema: Any) -> None:
    conn, name = scratch_schema
    migrate.apply_migrations(conn, name)
    conn.execute(f"INSERT INTO {name}.migrations (version, name) VALUES (9999, 'future')")
    with pytest.raises(cronbase.MigrationError, match="version 9999, newer than this cronbase"):
        migrate.apply_migrations(conn, name)


def test_0006_moves_a_success_recorded_in_the_history_to_the_job_row(
    scratch_schema: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before 0006 a success wrote a history row too; after it the job row records the final
    # attempt, and the old row would be listed twice.
    conn, name = scratch_schema
    before = [m for m in migrate.MIGRATIONS if m.version < 6]
    with monkeypatch.context() as patched:
        patched.setattr(migrate, "MIGRATIONS", before)
        patched.setattr(migrate, "LATEST_VERSION", before[-1].version)
        migrate.apply_migrations(conn, name)
    conn.execute(
        f"""
        INSERT INTO {name}.jobs (id, task, status, attempts, started_at, finished_at)
        VALUES (1, 'ok', 'succeeded', 2, now(), now()), (2, 'ok', 'queued', 1, NULL, NULL)
        """
    )
    conn.execute(
        f"""
        INSERT INTO {name}.job_attempts (job_id, attempt, worker, outcome)
        VALUES (1, 1, 'A', 'failed'), (1, 2, 'B', 'succeeded'), (2, 1, 'C', 'succeeded')
        """
    )
    assert migrate.apply_migrations(conn, name)[0] == "0006_success_in_job_row"
    history = conn.execute(
        f"SELECT job_id, attempt, worker, outcome FROM {name}.job_attempts_all"
        " ORDER BY job_id, attempt"
    ).fetchall()
    # Job 2 was retried after its success (queued again): its history row stays.
    assert history == [(1, 1, "A", "failed"), (2, 1, "C", "succeeded")]
    workers = conn.execute(f"SELECT id, locked_by FROM {name}.jobs ORDER BY id").fetchall()
    assert workers == [(1, "B"), (2, None)]
    listed = cronbase.App(database_url=conn.info.dsn, schema=name).jobs.attempts(1)
    assert [(a.attempt, a.worker, a.outcome) for a in listed] == [
        (1, "A", "failed"),
        (2, "B", "succeeded"),
    ]
