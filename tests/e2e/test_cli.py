"""The ``cronbase`` console script, run as a user runs it: a subprocess on the test database."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import wait_for
from tests.e2e.harness import python_path

REPO = Path(__file__).resolve().parents[2]
CRONBASE = Path(sys.executable).with_name("cronbase")
APP = "tests.e2e.cli_app:app"


def cli_env(database_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CRONBASE_APP")}
    # The repository (the tests' apps), and a worktree's PYTHONPATH=src after it.
    env.update(CRONBASE_DATABASE_URL=database_url, PYTHONPATH=python_path(), COLUMNS="200")
    env.update(extra)
    return env


def cronbase(database_url: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    assert CRONBASE.exists(), f"console script missing: {CRONBASE}"
    return subprocess.run(
        [str(CRONBASE), *args],
        env=cli_env(database_url, **extra),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def job_rows(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT id, task, status, attempts FROM cronbase.jobs_all ORDER BY id"
    ).fetchall()


def test_migrate_applies_then_reports_up_to_date(database_url: str) -> None:
    schema = f"cli_migrate_{secrets.token_hex(3)}"
    try:
        first = ok(cronbase(database_url, "--schema", schema, "migrate"))
        assert "applied 0001_initial" in first
        second = ok(cronbase(database_url, "--schema", schema, "migrate"))
        assert "applied" not in second
        assert f"schema '{schema}'" in second
        assert "up to date" in second
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_python_dash_m_runs_the_same_cli(database_url: str, db: psycopg.Connection[Any]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cronbase", "jobs", "list", "--json"],
        env=cli_env(database_url),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert json.loads(ok(result)) == []


def test_enqueue_then_list_and_show(database_url: str, db: psycopg.Connection[Any]) -> None:
    out = ok(cronbase(database_url, "--app", APP, "enqueue", "record", "--payload", '{"n": 7}'))
    job_id = int(out.strip())

    listed = json.loads(ok(cronbase(database_url, "jobs", "list", "--json")))
    assert [(j["id"], j["task"], j["status"], j["payload"]) for j in listed] == [
        (job_id, "record", "queued", {"n": 7})
    ]
    table = ok(cronbase(database_url, "jobs", "list"))
    assert "record" in table
    assert "queued (due) 1  scheduled 0" in table

    shown = json.loads(ok(cronbase(database_url, "jobs", "show", str(job_id), "--json")))
    assert (shown["job"]["id"], shown["job"]["attempts"], shown["attempts"]) == (job_id, 0, [])
    text = ok(cronbase(database_url, "jobs", "show", str(job_id)))
    assert "record" in text
    assert '{"n": 7}' in text


def test_enqueue_options_reach_the_job(database_url: str, db: psycopg.Connection[Any]) -> None:
    args = ["--app", APP, "enqueue", "record", "--payload", '{"n": 1}', "--queue", "slow"]
    args += ["--priority", "5", "--delay", "3600", "--idempotency-key", "k1"]
    first = ok(cronbase(database_url, *args)).strip()
    again = ok(cronbase(database_url, *args)).strip()
    assert again == first  # the key is taken: the existing job's id, nothing inserted
    row = db.execute(
        "SELECT queue, priority, run_at > now() + interval '50 minutes', idempotency_key "
        "FROM cronbase.jobs_all"
    ).fetchall()
    assert row == [("slow", 5, True, "k1")]

    at = "2030-01-31T09:00:00+00:00"
    run_at_id = ok(
        cronbase(
            database_url, "--app", APP, "enqueue", "record", "--payload", '{"n": 2}', "--run-at", at
        )
    )
    stored = db.execute(
        "SELECT run_at = %s::timestamptz FROM cronbase.jobs_all WHERE id = %s", [at, int(run_at_id)]
    ).fetchone()
    assert stored == (True,)


def test_worker_burst_runs_the_jobs_then_retry_and_cancel(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    record_file = tmp_path / "record.txt"
    ids = [
        int(ok(cronbase(database_url, "--app", APP, "enqueue", "record", "--payload", p)))
        for p in ('{"n": 1}', '{"n": 2}')
    ]
    boom = int(
        ok(
            cronbase(
                database_url, "--app", APP, "enqueue", "explode", "--payload", '{"message": "boom"}'
            )
        )
    )

    result = cronbase(
        database_url,
        "--app",
        APP,
        "worker",
        "--burst",
        "--concurrency",
        "2",
        CLI_TEST_RECORD=str(record_file),
    )
    ok(result)
    assert "started" in result.stderr  # log lines go to stderr
    assert sorted(record_file.read_text().split()) == ["1", "2"]
    assert job_rows(db) == [
        (ids[0], "record", "succeeded", 1),
        (ids[1], "record", "succeeded", 1),
        (boom, "explode", "dead", 1),
    ]

    shown = ok(cronbase(database_url, "jobs", "show", str(boom)))
    assert "RuntimeError: boom" in shown
    assert "Traceback (most recent call last)" in shown
    detail = json.loads(ok(cronbase(database_url, "jobs", "show", str(boom), "--json")))
    assert [a["outcome"] for a in detail["attempts"]] == ["dead"]

    assert "queued" in ok(cronbase(database_url, "jobs", "retry", str(boom)))
    assert "cancelled" in ok(cronbase(database_url, "jobs", "cancel", str(boom)))
    assert db.execute("SELECT status FROM cronbase.jobs_all WHERE id = %s", [boom]).fetchone() == (
        "cancelled",
    )

    refused = cronbase(database_url, "jobs", "cancel", str(ids[0]))
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"error: cannot cancel job {ids[0]}: it is succeeded (cancel needs pending, queued, failed or running)"
    )


def test_worker_exits_when_a_sync_handler_ignores_shutdown(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    job_id = int(
        ok(
            cronbase(
                database_url,
                "--app",
                APP,
                "enqueue",
                "stubborn",
                "--payload",
                json.dumps({"marker": str(marker)}),
            )
        )
    )
    worker = subprocess.Popen(
        [
            str(CRONBASE),
            "--app",
            APP,
            "worker",
            "--shutdown-grace",
            "0.2",
            "--poll-interval",
            "0.1",
        ],
        env=cli_env(database_url),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(marker.exists, timeout=30, what="the stubborn handler to start")
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, stderr
    assert "exiting without them" in stderr
    # Handed back by the shutdown: queued again, the interrupted attempt not counted.
    assert job_rows(db) == [(job_id, "stubborn", "queued", 0)]


BAD_INPUT = [
    pytest.param(
        ["--app", APP, "enqueue", "record", "--payload", '{"n": 1'],
        """Invalid value for '--payload': '{"n": 1' is not valid JSON""",
        id="payload-not-json",
    ),
    pytest.param(
        ["--app", APP, "enqueue", "record", "--payload", "[1, 2]"],
        "Invalid value for '--payload': '[1, 2]' is an array; it must be a JSON object",
        id="payload-not-an-object",
    ),
    pytest.param(
        ["--app", APP, "enqueue", "record", "--payload", '{"m": 1}'],
        "payload does not fit task 'record' (n)",
        id="payload-does-not-fit",
    ),
    pytest.param(
        ["--app", APP, "enqueue", "record", "--payload", '{"n": "7"}'],
        "payload for task 'record' does not convert to argument 'n': payload['n'] is '7', "
        "not an int",
        id="payload-value-of-another-type",
    ),
    pytest.param(
        ["--app", APP, "enqueue", "record", "--payload", '{"n": 7.0}'],
        "payload['n'] is 7.0, not an int",
        id="payload-float-for-an-int",
    ),
    pytest.param(
        ["--app", APP, "enqueue", "recrod", "--payload", '{"n": 1}'],
        "unknown task 'recrod'; registered: explode, record, stubborn",
        id="unknown-task",
    ),
    pytest.param(
        ["--app", APP, "enqueue", "record", "--run-at", "2030-01-31T09:00"],
        "Invalid value for '--run-at': '2030-01-31T09:00' has no time zone",
        id="naive-run-at",
    ),
    pytest.param(
        ["--app", APP, "enqueue", "record", "--payload", '{"n": 1}', "--priority", "99999"],
        "Invalid value for '--priority': 99999 is not in the range -32768<=x<=32767",
        id="priority-out-of-range",
    ),
    pytest.param(
        ["--app", "nosuchpkg.jobs:app", "enqueue", "record"],
        "cannot import app 'nosuchpkg.jobs:app': No module named 'nosuchpkg'",
        id="app-module-missing",
    ),
    pytest.param(
        ["--app", "tests.e2e.cli_app:ap", "enqueue", "record"],
        "cannot import app 'tests.e2e.cli_app:ap': module 'tests.e2e.cli_app' has no attribute 'ap'",
        id="app-attribute-missing",
    ),
    pytest.param(
        ["--app", "tests.e2e.cli_app:record", "worker"],
        "'record' is a Task, not a cronbase.App",
        id="app-not-an-app",
    ),
    pytest.param(
        ["--app", "tests.e2e.cli_app", "worker"],
        "cannot import app 'tests.e2e.cli_app': expected 'module:attribute'",
        id="app-without-colon",
    ),
    pytest.param(
        ["enqueue", "record", "--payload", '{"n": 1}'],
        "this command needs your tasks: pass --app",
        id="enqueue-without-app",
    ),
    pytest.param(
        ["--database-url", "postgresql://u:secret@/db?host=/nonexistent", "jobs", "list"],
        "cannot connect to database 'postgresql://u:***@/db?host=/nonexistent'",
        id="unreachable-url-masked",
    ),
    pytest.param(
        [
            *("--database-url", "postgresql://u:secret@/db?host=/nonexistent", "--app", APP),
            *("enqueue", "record", "--payload", '{"n": 1}'),
        ],
        "cannot connect to database 'postgresql://u:***@/db?host=/nonexistent'",
        id="unreachable-url-enqueue",
    ),
    pytest.param(
        ["--database-url", "not a dsn ==", "jobs", "list"],
        "invalid database URL 'not a dsn =='",
        id="unparsable-url",
    ),
    pytest.param(["jobs", "retry", "999999"], "no job with id 999999", id="retry-unknown-id"),
    pytest.param(["jobs", "cancel", "999999"], "no job with id 999999", id="cancel-unknown-id"),
    pytest.param(["jobs", "show", "999999"], "no job with id 999999", id="show-unknown-id"),
    pytest.param(
        ["jobs", "show", "abc"], "Invalid value for 'ID': 'abc' is not a valid integer", id="bad-id"
    ),
    pytest.param(
        ["jobs", "list", "--status", "bogus"],
        "Invalid value for '--status': 'bogus' is not one of",
        id="unknown-status",
    ),
    pytest.param(
        ["--schema", "Bad-Name", "jobs", "list"],
        "schema name 'Bad-Name' must be lower-case letters",
        id="bad-schema",
    ),
    pytest.param(
        ["--schema", "never_migrated", "jobs", "list"],
        "schema 'never_migrated' does not exist on ",
        id="schema-not-migrated",
    ),
    pytest.param(
        ["--app", APP, "worker", "--concurrency", "0"],
        "Invalid value for '--concurrency': 0 is not in the range 1<=x<=2147483647",
        id="zero-concurrency",
    ),
]


@pytest.mark.parametrize(("args", "message"), BAD_INPUT)
def test_bad_input_is_one_error_line_and_writes_nothing(
    database_url: str, db: psycopg.Connection[Any], args: list[str], message: str
) -> None:
    result = cronbase(database_url, *args)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert message in lines[0]
    assert "secret" not in result.stderr
    assert "Traceback" not in result.stderr
    assert job_rows(db) == []


def test_debug_shows_the_traceback(database_url: str, db: psycopg.Connection[Any]) -> None:
    result = cronbase(database_url, "--debug", "--app", "nosuchpkg.jobs:app", "worker")
    assert result.returncode == 2
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: cannot import app 'nosuchpkg.jobs:app': No module named 'nosuchpkg'"
    )


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["enqueue", "record", "--payload", '{"n": 1}', "--queue", " "], "invalid queue name ' '"),
        (
            ["enqueue", "record", "--payload", '{"n": 1}', "--queue", "q" * 200],
            "invalid queue name",
        ),
        (["queues", "pause", "emails; DROP TABLE jobs"], "invalid queue name 'emails; DROP"),
        (["worker", "--burst", "--queue", "a b"], "invalid queue name 'a b'"),
    ],
)
def test_hostile_queue_names_get_one_line_and_nothing_is_written(
    database_url: str, db: psycopg.Connection[Any], args: list[str], shown: str
) -> None:
    result = cronbase(database_url, "--app", APP, *args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines
    assert shown in lines[0], lines
    assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM cronbase.queues").fetchone() == (0,)


def test_show_prints_a_result_and_snoozes(database_url: str, db: psycopg.Connection[Any]) -> None:
    job_id = int(
        ok(cronbase(database_url, "--app", APP, "enqueue", "record", "--payload", '{"n": 1}'))
    )
    db.execute(
        "UPDATE cronbase.jobs SET status = 'succeeded', finished_at = now(), attempts = 1, "
        """result = '{"total": 6}', snoozes = 2 WHERE id = %s""",
        (job_id,),
    )
    text = ok(cronbase(database_url, "jobs", "show", str(job_id)))
    assert '{"total": 6}' in text
    assert "1 of 20, snoozed 2 times" in text
    shown = json.loads(ok(cronbase(database_url, "jobs", "show", str(job_id), "--json")))
    assert (shown["job"]["result"], shown["job"]["snoozes"]) == ({"total": 6}, 2)
