"""A migration that a deadlock with the running release's workers ends is run again
(db/migrate.py): in a rolling deploy the old workers keep locking the tables the migration
alters, each in its own order, and PostgreSQL breaks such a cycle by failing one transaction."""

from __future__ import annotations

import logging
import threading
from typing import Any

import psycopg
import pytest

from cronbase.db import migrate
from tests.conftest import wait_for
from tests.integration.test_migrate_contract import SCHEMA, ship_next
from tests.integration.test_migrate_contract import conn as conn  # the schema of its own


def test_a_migration_ended_by_a_deadlock_runs_again(
    conn: psycopg.Connection[Any],
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    version = ship_next(monkeypatch, None)
    step = migrate.MIGRATIONS[-1]
    # The migration locks queues and then schedules; the "worker" below holds schedules and
    # then asks for queues: a cycle.
    text = (
        f"LOCK TABLE {{schema}}.queues IN ACCESS EXCLUSIVE MODE;\n"
        f"LOCK TABLE {{schema}}.schedules IN ACCESS EXCLUSIVE MODE;\n{step.template}"
    )
    monkeypatch.setattr(
        migrate,
        "MIGRATIONS",
        [*migrate.MIGRATIONS[:-1], migrate.Migration(step.version, step.name, text, None)],
    )
    with psycopg.connect(database_url, autocommit=True) as other:
        # The migration, waiting first, is the one PostgreSQL's check finds in the cycle.
        other.execute("SET deadlock_timeout = '60s'")
        other.execute("SET statement_timeout = '120s'")
        other.execute("BEGIN")
        other.execute(f"LOCK TABLE {SCHEMA}.schedules IN ROW EXCLUSIVE MODE")
        outcome: list[object] = []

        def run() -> None:
            try:
                with psycopg.connect(database_url, autocommit=True) as c:
                    outcome.append(migrate.apply_migrations(c, SCHEMA))
            except Exception as exc:  # reported by the assertion below
                outcome.append(exc)

        caplog.set_level(logging.WARNING, logger="cronbase.db.migrate")
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        wait_for(
            lambda: (
                conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = %s::regclass",
                    [f"{SCHEMA}.schedules"],
                ).fetchone()[0]  # type: ignore[index]
                == 1
            ),
            timeout=60,
            what="the migration waiting for the schedules table",
        )
        # Returns once the deadlock check has ended the migration's transaction.
        other.execute(f"LOCK TABLE {SCHEMA}.queues IN ROW EXCLUSIVE MODE")
        other.execute("COMMIT")
        thread.join(120)
    assert not thread.is_alive()
    assert outcome == [[f"{version:04d}_{step.name}"]], outcome
    assert migrate.schema_version(conn, SCHEMA) == version
    assert any(
        "deadlock detected; running it again (2 of" in r.getMessage() for r in caplog.records
    )
