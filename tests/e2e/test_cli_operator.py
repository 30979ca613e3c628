"""The command line's answers an operator trips over (issue 16): each mistake gets one line that
says what to do, and nothing changes; a duplicate key says so; prune can show before it deletes."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import psycopg

from tests.e2e.test_cli import APP, cronbase, ok


def fails(result: Any, code: int = 2) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return str(lines[0])


def test_retry_without_a_job_asks_which(database_url: str) -> None:
    line = fails(cronbase(database_url, "jobs", "retry"))
    assert line == (
        "error: which job? give its ID (cronbase jobs retry 812), or --dead to retry every dead "
        "job (narrow with --task/--queue)"
    )


def test_run_at_with_delay_is_one_line_in_the_commands_words(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    line = fails(
        cronbase(
            database_url, "--app", APP, "enqueue", "record", "--payload", '{"n": 1}',
            "--run-at", "2030-01-01T00:00:00+00:00", "--delay", "60",
        )
    )  # fmt: skip
    assert line == "error: give --run-at or --delay, not both"
    assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (0,)


def test_a_duplicate_idempotency_key_says_nothing_new_was_enqueued(database_url: str) -> None:
    args = ("--app", APP, "enqueue", "record", "--payload", '{"n": 1}', "--idempotency-key", "k1")
    first = cronbase(database_url, *args)
    assert (first.returncode, first.stderr) == (0, "")
    again = cronbase(database_url, *args)
    assert again.returncode == 0
    assert again.stdout == first.stdout  # the id, for scripts
    assert again.stderr.strip() == (
        f"job {first.stdout.strip()} already existed with idempotency key 'k1': nothing new was "
        "enqueued"
    )


def test_queue_commands_refuse_a_queue_nothing_uses_unless_forced(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    ok(cronbase(database_url, "--app", APP, "enqueue", "record", "--payload", '{"n": 1}'))
    for args in (("pause", "defualt"), ("resume", "defualt"), ("limit", "defualt", "3"),
                 ("rate", "defualt", "5/second")):  # fmt: skip
        line = fails(cronbase(database_url, "queues", *args))
        assert line == (
            "error: no task, job or worker uses queue 'defualt' (known queues: default); "
            "--force to set it up anyway"
        ), args
    assert db.execute("SELECT count(*) FROM cronbase.queues").fetchone() == (0,)
    ok(cronbase(database_url, "queues", "pause", "defualt", "--force"))
    ok(cronbase(database_url, "queues", "pause", "default"))
    # With --app, its tasks' queues are known even before any job exists.
    ok(cronbase(database_url, "--app", APP, "queues", "resume", "default"))


def test_prune_dry_run_says_what_would_go_and_deletes_nothing(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    for n in range(2):
        ok(cronbase(database_url, "--app", APP, "enqueue", "record", "--payload", f'{{"n": {n}}}'))
    record = str(tmp_path / "record.txt")
    ok(cronbase(database_url, "--app", APP, "worker", "--burst", CLI_TEST_RECORD=record))
    out = ok(cronbase(database_url, "prune", "--older-than", "0s", "--dry-run"))
    assert out.strip() == (
        "would prune 2 jobs (2 succeeded, 0 cancelled) finished more than 0s ago; "
        "nothing was deleted"
    )
    assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (2,)
    out = ok(cronbase(database_url, "prune", "--older-than", "0s"))
    assert out.strip() == "pruned 2 jobs (succeeded, cancelled) finished more than 0s ago"
    week = ok(cronbase(database_url, "prune", "--older-than", "7d", "--dry-run"))
    assert "finished more than 7d ago" in week


def test_tables_do_not_wrap_when_piped_and_times_name_their_zone(database_url: str) -> None:
    for n in range(2):
        ok(cronbase(database_url, "--app", APP, "enqueue", "record", "--payload", f'{{"n": {n}}}'))
    # Piped, COLUMNS unset: every header whole, nothing cut to "…".
    piped = ok(cronbase(database_url, "stats", COLUMNS="", TZ="UTC"))
    assert "queued (due)" in piped
    assert "oldest wait" in piped
    assert "…" not in piped
    narrow = ok(cronbase(database_url, "--width", "50", "stats", COLUMNS="", TZ="UTC"))
    assert "…" in narrow
    assert max(len(line) for line in narrow.splitlines()) <= 50
    listed = ok(cronbase(database_url, "jobs", "list", COLUMNS="", TZ="UTC"))
    assert " UTC" in listed
    assert "…" not in listed


def test_a_schema_that_does_not_exist_is_named_with_the_ones_that_do(database_url: str) -> None:
    line = fails(cronbase(database_url, "--schema", "cronbsae", "stats"))
    assert line.startswith("error: schema 'cronbsae' does not exist on ")
    assert line.endswith(
        "(schemas with cronbase tables: 'cronbase'); a typo in --schema? `cronbase migrate` "
        "creates it"
    )


def test_a_dashboard_port_in_use_is_one_line_before_any_url(database_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = cronbase(database_url, "dashboard", "--port", str(port))
    line = fails(result)
    assert line == (
        f"error: cannot serve the dashboard on 127.0.0.1:{port}: the port is in use (another "
        "dashboard?); choose another with --port"
    )
    assert "http://" not in result.stdout + result.stderr


def test_queues_list_prints_json(database_url: str) -> None:
    ok(cronbase(database_url, "--app", APP, "enqueue", "record", "--payload", '{"n": 1}'))
    ok(cronbase(database_url, "queues", "limit", "default", "3"))
    listed = json.loads(ok(cronbase(database_url, "queues", "list", "--json")))
    assert listed["queues"] == [
        {
            "name": "default",
            "is_paused": False,
            "paused_at": None,
            "paused_by": None,
            "max_running": 3,
            "rate": None,
            "aging": None,
        }
    ]
    assert listed["task_limits"] == []


def seed_task_history(db: psycopg.Connection[Any]) -> None:
    """record: 4 successes of 1, 2, 3 and 10 s in the last hour, one 2 days ago, and 1 failed
    attempt (history) in the last hour."""
    for n, secs in enumerate((1, 2, 3, 10)):
        db.execute(
            "INSERT INTO cronbase.jobs (task, queue, payload, status, attempts, started_at,"
            " finished_at) VALUES ('record', 'default', %s, 'succeeded', 1,"
            " now() - interval '10 minutes' - make_interval(secs => %s),"
            " now() - interval '10 minutes')",
            (json.dumps({"n": n}), secs),
        )
    db.execute(
        "INSERT INTO cronbase.jobs (task, queue, status, attempts, started_at, finished_at)"
        " VALUES ('record', 'default', 'succeeded', 1, now() - interval '2 days 1 minute',"
        " now() - interval '2 days')"
    )
    row = db.execute(
        "INSERT INTO cronbase.jobs (task, queue, status, attempts) VALUES"
        " ('explode', 'default', 'failed', 1) RETURNING id"
    ).fetchone()
    assert row is not None
    db.execute(
        "INSERT INTO cronbase.job_attempts (job_id, attempt, started_at, finished_at, outcome)"
        " VALUES (%s, 1, now() - interval '5 minutes', now() - interval '5 minutes', 'failed')",
        (row[0],),
    )


def test_tasks_reports_rates_failures_and_durations_over_a_window(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    seed_task_history(db)
    found = json.loads(ok(cronbase(database_url, "tasks", "--json")))
    by_task = {t["task"]: t for t in found}
    record = by_task["record"]
    assert (record["succeeded"], record["failed"], record["failure_rate"]) == (4, 0, 0.0)
    assert record["p50_seconds"] == 2.5
    assert round(record["p95_seconds"], 2) == 8.95
    assert record["per_minute"] == round(4 / 60, 3)
    explode = by_task["explode"]
    assert (explode["succeeded"], explode["failed"], explode["failure_rate"]) == (0, 1, 1.0)
    week = {
        t["task"]: t
        for t in json.loads(ok(cronbase(database_url, "tasks", "--window", "7d", "--json")))
    }
    assert week["record"]["succeeded"] == 5
    table = ok(cronbase(database_url, "tasks", COLUMNS=""))
    assert "tasks, last 1h" in table
    assert "100.0%" in table
    bad = cronbase(database_url, "tasks", "--window", "3h")
    assert bad.returncode == 2


def test_audit_lists_operator_actions_newest_first(database_url: str) -> None:
    assert ok(cronbase(database_url, "audit")).strip() == "no operator actions recorded yet"
    ok(cronbase(database_url, "--app", APP, "enqueue", "record", "--payload", '{"n": 1}'))
    ok(cronbase(database_url, "queues", "pause", "default"))
    ok(cronbase(database_url, "queues", "resume", "default"))
    entries = json.loads(ok(cronbase(database_url, "audit", "--json")))
    assert [(e["action"], e["target"]) for e in entries] == [
        ("queue.resume", "queue:default"),
        ("queue.pause", "queue:default"),
    ]
    assert entries[0]["at"].endswith("+00:00")
    assert len(json.loads(ok(cronbase(database_url, "audit", "--json", "--limit", "1")))) == 1
    table = ok(cronbase(database_url, "audit", COLUMNS="", TZ="UTC"))
    assert "queue.pause" in table
    assert " UTC" in table


def test_migrating_a_new_schema_beside_an_existing_one_says_so(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    try:
        out = ok(cronbase(database_url, "--schema", "cronbsae", "migrate"))
        assert out.splitlines()[-1] == (
            "note: 'cronbsae' is a new schema; cronbase tables were already in 'cronbase'"
        )
        again = ok(cronbase(database_url, "--schema", "cronbsae", "migrate"))
        assert "note:" not in again  # an existing schema: nothing to point out
    finally:
        db.execute("DROP SCHEMA IF EXISTS cronbsae CASCADE")


def test_record_commands_print_json_and_tables_say_how_far_times_are(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    enqueue = ("--app", APP, "enqueue", "record", "--payload", '{"n": 1}', "--delay", "7200")
    later = int(ok(cronbase(database_url, *enqueue)))
    listed = ok(cronbase(database_url, "jobs", "list", COLUMNS="", TZ="UTC"))
    row = next(line for line in listed.splitlines() if f" {later} " in line)
    assert "in 2h" in row
    assert "queued (due) 0  scheduled 1" in listed.splitlines()[-1]
    cancelled = json.loads(ok(cronbase(database_url, "jobs", "cancel", str(later), "--json")))
    assert (cancelled["id"], cancelled["status"]) == (later, "cancelled")
    retried = json.loads(ok(cronbase(database_url, "jobs", "retry", str(later), "--json")))
    assert (retried["id"], retried["status"]) == (later, "queued")
    add = ("--app", APP, "schedules", "add", "record", "--cron", "0 8 * * *", "--key", "daily")
    added = json.loads(ok(cronbase(database_url, *add, "--payload", '{"n": 2}', "--json")))
    assert (added["key"], added["cron"], added["is_paused"]) == ("daily", "0 8 * * *", False)
    paused = json.loads(ok(cronbase(database_url, "schedules", "pause", "daily", "--json")))
    assert paused["is_paused"] is True
    resumed = ok(cronbase(database_url, "schedules", "resume", "daily"))
    assert resumed.startswith("schedule 'daily' (record, At 08:00 (UTC), cron '0 8 * * *')")
    table = ok(cronbase(database_url, "schedules", "list", COLUMNS=""))
    assert re.search(r"\(in \d+[hm]\)", table)
