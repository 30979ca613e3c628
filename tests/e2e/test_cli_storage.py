"""Bloat made visible from the command line: `cronbase stats` shows every table's storage and
`cronbase check` fails, naming it, on a transaction held open past --max-xmin-age."""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg

from tests.e2e.test_cli import APP, cronbase, ok
from tests.e2e.test_cli_ops import enqueue


def test_check_names_a_transaction_held_open_and_passes_once_it_ends(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    assert ok(cronbase(database_url, "check", "--max-xmin-age", "1s")).strip() == "ok"
    # A transaction that wrote and then sat idle: READ COMMITTED keeps no snapshot between its
    # statements, but its transaction id holds vacuum back all the same.
    with psycopg.connect(database_url, application_name="forgotten-migration") as held:
        held.execute("SELECT txid_current()")
        pid = held.info.backend_pid
        time.sleep(1.5)
        failed = cronbase(database_url, "check", "--max-xmin-age", "1s")
        assert failed.returncode == 1, failed.stdout + failed.stderr
        assert f"pid {pid} (forgotten-migration), idle in transaction" in failed.stderr
        assert "check failed: vacuum is held back" in failed.stderr
        # 0: never fail on it; a longer limit: not yet.
        ok(cronbase(database_url, "check", "--max-xmin-age", "0s"))
        ok(cronbase(database_url, "check", "--max-xmin-age", "1h"))
        listed = json.loads(ok(cronbase(database_url, "stats", "--json")))["storage"]
        holders = [h for h in listed["xmin_holders"] if h["pid"] == pid]
        assert [(h["kind"], h["application"]) for h in holders] == [
            ("session", "forgotten-migration")
        ]
        held.rollback()
    assert ok(cronbase(database_url, "check", "--max-xmin-age", "1s")).strip() == "ok"


def test_stats_shows_the_live_table_and_the_history_with_their_partitions(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    enqueue(database_url, "explode", '{"message": "boom"}')
    ok(cronbase(database_url, "--app", APP, "worker", "--burst"))
    db.execute("ANALYZE cronbase.jobs_history")
    tables = {
        t["name"]: t
        for t in json.loads(ok(cronbase(database_url, "stats", "--json")))["storage"]["tables"]
    }
    assert {"jobs", "jobs_history", "job_attempts", "job_keys"} <= tables.keys(), sorted(tables)
    assert tables["jobs"]["partitions"] is None
    # Three statuses, each a default partition and today's day at least.
    assert tables["jobs_history"]["partitions"] >= 6
    assert tables["jobs_history"]["live_rows"] == 1  # the dead job, moved
    assert tables["jobs_history"]["heap_bytes"] > 0
    printed = ok(cronbase(database_url, "stats"))
    assert "jobs_history" in printed


def test_a_bad_max_xmin_age_is_one_line_naming_it(database_url: str) -> None:
    result = cronbase(database_url, "check", "--max-xmin-age", "soon")
    assert result.returncode == 2
    error = result.stderr.strip()
    assert len(error.splitlines()) == 1, error
    assert "soon" in error, error
    assert "--max-xmin-age" in error, error
