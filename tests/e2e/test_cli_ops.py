"""The operator's commands as a user runs them: stats, queues, prune, check, retry --dead, logs."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from tests.e2e.test_cli import APP, cronbase, ok


def enqueue(database_url: str, task: str, payload: str, *extra: str) -> int:
    return int(
        ok(cronbase(database_url, "--app", APP, "enqueue", task, "--payload", payload, *extra))
    )


def audit(db: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    return db.execute("SELECT action, target FROM cronbase.audit_log ORDER BY id").fetchall()


def test_stats_and_check_on_a_known_workload(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    record = str(tmp_path / "record.txt")
    for n in range(3):
        enqueue(database_url, "record", json.dumps({"n": n}))
    enqueue(database_url, "explode", '{"message": "boom"}')
    ok(cronbase(database_url, "--app", APP, "worker", "--burst", CLI_TEST_RECORD=record))
    enqueue(database_url, "record", '{"n": 9}', "--queue", "later", "--delay", "3600")

    overview = json.loads(ok(cronbase(database_url, "stats", "--json")))
    counts = {q["queue"]: q["counts"] for q in overview["queues"]}
    assert counts["default"]["succeeded"] == 3
    assert counts["default"]["dead"] == 1
    assert counts["later"]["queued"] == 1
    later = next(q for q in overview["queues"] if q["queue"] == "later")
    assert (later["due"], later["scheduled"]) == (0, 1)  # deferred an hour ahead: not due
    assert overview["scheduled"] == 1
    table = ok(cronbase(database_url, "stats"))
    assert "queued (due)" in table
    assert "scheduled" in table
    assert sum(m["succeeded"] for m in overview["minutes"]) == 3
    table = ok(cronbase(database_url, "stats"))
    assert "default" in table
    assert "last hour: 3 attempts succeeded, 1 failed" in table

    failing = cronbase(database_url, "check", "--max-dead", "0")
    assert failing.returncode == 1
    assert "check failed: 1 dead jobs (more than 0)" in failing.stderr
    assert (
        ok(cronbase(database_url, "check", "--max-dead", "1", "--max-wait", "5m")).strip() == "ok"
    )
    # A due job waiting longer than allowed.
    db.execute(
        "UPDATE cronbase.jobs SET run_at = now() - interval '10 minutes' WHERE queue = 'later'"
    )
    waiting = cronbase(database_url, "check", "--max-wait", "5m")
    assert waiting.returncode == 1
    assert "queue 'later': a job has waited" in waiting.stderr
    bad = cronbase(database_url, "check", "--max-wait", "5 minutes")
    assert bad.returncode == 2
    assert "'5 minutes' is not a duration" in bad.stderr


def test_queue_pause_resume_and_the_audit_log(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    record = tmp_path / "record.txt"
    job_id = enqueue(database_url, "record", '{"n": 1}', "--queue", "reports")
    assert "paused" in ok(cronbase(database_url, "queues", "pause", "reports"))
    assert "reports: paused since" in ok(cronbase(database_url, "queues", "list"))
    ok(cronbase(database_url, "--app", APP, "worker", "--burst", CLI_TEST_RECORD=str(record)))
    assert db.execute(
        "SELECT status FROM cronbase.jobs_all WHERE id = %s", [job_id]
    ).fetchone() == ("queued",)
    ok(cronbase(database_url, "queues", "resume", "reports"))
    ok(cronbase(database_url, "--app", APP, "worker", "--burst", CLI_TEST_RECORD=str(record)))
    assert record.read_text().split() == ["1"]
    actions = audit(db)
    assert actions == [("queue.pause", "queue:reports"), ("queue.resume", "queue:reports")]
    actor = db.execute("SELECT actor FROM cronbase.audit_log LIMIT 1").fetchone()
    assert actor is not None
    assert actor[0].startswith("cli:")


def test_retry_dead_of_a_task_then_prune(database_url: str, db: psycopg.Connection[Any]) -> None:
    ids = [enqueue(database_url, "explode", json.dumps({"message": str(n)})) for n in range(2)]
    ok(cronbase(database_url, "--app", APP, "worker", "--burst"))
    out = ok(cronbase(database_url, "jobs", "retry", "--dead", "--task", "explode"))
    assert "2 dead jobs queued again (task=explode)" in out
    rows = db.execute("SELECT id, status FROM cronbase.jobs_all ORDER BY id").fetchall()
    assert rows == [(ids[0], "queued"), (ids[1], "queued")]
    both = cronbase(database_url, "jobs", "retry", "1", "--dead")
    assert both.returncode == 2

    ok(cronbase(database_url, "--app", APP, "worker", "--burst"))  # dead again
    db.execute("UPDATE cronbase.jobs_history SET finished_at = now() - interval '40 days'")
    out = ok(cronbase(database_url, "prune", "--older-than", "30d", "--status", "dead"))
    assert out.startswith("pruned 2 jobs (dead)")
    assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (0,)
    assert [a for a, _ in audit(db)] == ["dead.requeue", "jobs.prune"]


def test_json_logs_carry_the_job_events(database_url: str, tmp_path: Path) -> None:
    job_id = enqueue(database_url, "record", '{"n": 5}')
    result = cronbase(
        database_url,
        "--log-format",
        "json",
        "--app",
        APP,
        "worker",
        "--burst",
        CLI_TEST_RECORD=str(tmp_path / "record.txt"),
    )
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stderr.splitlines()]
    mine = [e for e in events if e.get("job_id") == job_id]
    assert [e["event"] for e in mine] == ["claimed", "succeeded"]
    assert mine[1]["task"] == "record"
    assert mine[1]["attempt"] == 1
    assert mine[1]["duration"] >= 0
    assert all({"time", "level", "logger", "message"} <= e.keys() for e in events)


def test_stats_and_check_name_due_jobs_no_live_worker_registers(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    db.execute(
        "INSERT INTO cronbase.jobs (task, queue, payload) VALUES ('renamed_task', 'mail', '{}')"
    )
    line = (
        "1 due jobs of task 'renamed_task' (queue 'mail') wait for a worker: no live worker "
        "registers that task"
    )
    assert line in ok(cronbase(database_url, "stats"))
    unserved = json.loads(ok(cronbase(database_url, "stats", "--json")))["unserved"]
    assert [(u["task"], u["queue"], u["waiting"]) for u in unserved] == [
        ("renamed_task", "mail", 1)
    ]
    # Not old enough to trip --max-wait, but nothing will ever run it: check fails.
    failing = cronbase(database_url, "check", "--max-wait", "1h")
    assert failing.returncode == 1
    assert f"check failed: {line}" in failing.stderr
    assert (
        ok(cronbase(database_url, "check", "--max-wait", "1h", "--queue", "other")).strip() == "ok"
    )


def test_queue_limit_and_rate_from_the_command_line(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    # --force: set up ahead of any job of the queue.
    assert ok(cronbase(database_url, "queues", "limit", "emails", "5", "--force")).strip() == (
        "emails: active, at most 5 running"
    )
    assert ok(cronbase(database_url, "queues", "rate", "emails", "100/minute")).strip() == (
        "emails: active, at most 5 running, at most 100/minute starts"
    )
    listed = ok(cronbase(database_url, "queues", "list")).splitlines()
    assert "emails: active, at most 5 running, at most 100/minute starts" in listed
    # A task's limits, as its workers registered them (here: as a worker would).
    db.execute(
        "INSERT INTO cronbase.flow_limits (scope, key_max_running, key_rate_n, key_rate_period) "
        "VALUES ('task:sync', 1, 10, interval '1 second')"
    )
    assert ok(cronbase(database_url, "queues", "list")).splitlines()[-1] == (
        "task sync: at most 1 running per key, at most 10/second starts per key"
    )
    assert db.execute(
        "SELECT max_running, rate_n, rate_period FROM cronbase.queues WHERE name = 'emails'"
    ).fetchone() == (5, 100, timedelta(minutes=1))
    ok(cronbase(database_url, "queues", "limit", "emails", "none"))
    ok(cronbase(database_url, "queues", "rate", "emails", "none"))
    assert db.execute(
        "SELECT max_running, rate_n, holds_claims FROM cronbase.queues WHERE name = 'emails'"
    ).fetchone() == (None, None, False)
    assert [a for a, _ in audit(db)][-4:] == [
        "queue.limit",
        "queue.rate",
        "queue.limit",
        "queue.rate",
    ]


def test_queue_aging_from_the_command_line(database_url: str, db: psycopg.Connection[Any]) -> None:
    db.execute("INSERT INTO cronbase.jobs (task, queue, payload) VALUES ('t', 'imports', '{}')")
    aging = ("queues", "aging", "imports")
    assert ok(cronbase(database_url, *aging, "5m", "--step", "20")).strip() == (
        "imports: active, waiting jobs gain 20 priority every 5m"
    )
    listed = ok(cronbase(database_url, "queues", "list")).splitlines()
    assert "imports: active, waiting jobs gain 20 priority every 5m" in listed
    stats = json.loads(ok(cronbase(database_url, "stats", "--json")))
    assert [q["aging"] for q in stats["queues"] if q["queue"] == "imports"] == ["20 every 5m"]
    assert db.execute(
        "SELECT aging_every, aging_step FROM cronbase.queues WHERE name = 'imports'"
    ).fetchone() == (timedelta(minutes=5), 20)
    for args, message in [
        (("soon",), "'soon' is not a duration; use e.g. 30s, 5m, 2h, 7d or 1w"),
        (("0s",), "queue 'imports' aging interval must be a duration of more than 0"),
        (("1m", "--step", "0"), "0 is not in the range x>=1"),
    ]:
        result = cronbase(database_url, *aging, *args)
        assert result.returncode != 0, args
        assert message in result.stderr, result.stderr
    typo = cronbase(database_url, "queues", "aging", "imprts", "5m")
    assert typo.returncode != 0
    assert "no task, job or worker uses queue 'imprts'" in typo.stderr
    assert ok(cronbase(database_url, *aging, "none")).strip() == "imports: active"
    assert db.execute(
        "SELECT detail->>'aging' FROM cronbase.audit_log WHERE action = 'queue.aging' ORDER BY id"
    ).fetchall() == [("20 every 5m",), (None,)]


def test_bad_queue_limits_are_one_line_errors_that_change_nothing(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    for args, message in [
        (
            ("limit", "emails", "0"),
            "queue 'emails' limit must be a whole number of at least 1, got 0",
        ),
        (("limit", "emails", "lots"), "'lots' is not a number of jobs"),
        (("rate", "emails", "100/minit"), "queue 'emails' rate '100/minit' is not a rate"),
        (("rate", "emails", "0/second"), "the count must be from 1 to 10000"),
        (("limit", "bad name", "2"), "invalid queue name 'bad name'"),
    ]:
        result = cronbase(database_url, "queues", *args)
        assert result.returncode != 0, args
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert message in lines[0], lines[0]
    assert db.execute("SELECT count(*) FROM cronbase.queues").fetchone() == (0,)
