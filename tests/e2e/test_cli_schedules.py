"""``cronbase schedules ...`` and ``cronbase tick`` as a user runs them: subprocesses, real DB."""

from __future__ import annotations

import json
import signal
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import wait_for
from tests.e2e.test_cli import APP, CRONBASE, REPO, cli_env, cronbase, ok


def schedule_rows(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return db.execute("SELECT key, task, cron, tz, is_paused FROM cronbase.schedules").fetchall()


def slot_jobs(db: psycopg.Connection[Any], key: str) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT idempotency_key, status FROM cronbase.jobs_all "
        "WHERE idempotency_key LIKE %s ORDER BY idempotency_key",
        [f"schedule:{key}@%"],
    ).fetchall()


def add(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return cronbase(database_url, "--app", APP, "schedules", "add", *args)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["record", "--cron", "0 25 * * *"], "bad hour field '25'"),
        (["record", "--cron", "61 * * * *"], "bad minute field '61'"),
        (
            ["record", "--cron", "0 0 31 2 *"],
            "cron expression '0 0 31 2 *' never fires: February has no day 31",
        ),
        (
            ["record", "--cron", "@hourly", "--tz", "Mars/Olympus"],
            "unknown time zone 'Mars/Olympus'",
        ),
        (["nope", "--cron", "@hourly"], "unknown task 'nope'"),
        (["record", "--cron", "@hourly", "--payload", '{"m": 1}'], "payload does not fit"),
        (
            ["record", "--cron", "@hourly", "--payload", '{"n": true}'],
            "payload for task 'record' does not convert to argument 'n': payload['n'] is True, "
            "not an int",
        ),
    ],
)
def test_add_refuses_bad_input_with_exit_2_and_writes_nothing(
    database_url: str, db: psycopg.Connection[Any], args: list[str], message: str
) -> None:
    result = add(database_url, *args, "--key", "k")
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: ")
    assert message in line
    assert schedule_rows(db) == []


def test_add_list_pause_resume_remove(database_url: str, db: psycopg.Connection[Any]) -> None:
    out = ok(
        add(
            database_url,
            "record",
            "--cron",
            "0 8 * * MON",
            "--tz",
            "America/New_York",
            "--payload",
            '{"n": 12345}',
            "--key",
            "weekly:12345",
        )
    )
    assert "weekly:12345" in out
    assert "next run" in out
    assert "At 08:00, only on Monday (America/New_York), cron '0 8 * * MON'" in out
    assert schedule_rows(db) == [
        ("weekly:12345", "record", "0 8 * * MON", "America/New_York", False)
    ]

    table = ok(cronbase(database_url, "schedules", "list"))
    assert "weekly:12345" in table
    # Next run shown in the schedule's own zone: 08:00 on a Monday, New York time.
    assert "08:00 E" in table  # EST or EDT
    [listed] = json.loads(ok(cronbase(database_url, "schedules", "list", "--json")))
    assert listed["key"] == "weekly:12345"
    assert listed["payload"] == {"n": 12345}

    assert "paused" in ok(cronbase(database_url, "schedules", "pause", "weekly:12345"))
    assert schedule_rows(db)[0][4] is True
    assert "paused" in ok(cronbase(database_url, "schedules", "list"))
    assert "next run" in ok(cronbase(database_url, "schedules", "resume", "weekly:12345"))
    assert schedule_rows(db)[0][4] is False

    # Run now: one job of the schedule's task and payload, its slot time now; slots unchanged.
    before = db.execute("SELECT next_fire_at FROM cronbase.schedules").fetchone()
    job_id = int(ok(cronbase(database_url, "schedules", "run-now", "weekly:12345")))
    row = db.execute(
        "SELECT task, payload->'n', payload ? 'scheduled_at' FROM cronbase.jobs_all WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row == ("record", 12345, True)
    assert db.execute("SELECT next_fire_at FROM cronbase.schedules").fetchone() == before
    assert db.execute(
        "SELECT action, target FROM cronbase.audit_log WHERE action = 'schedule.run_now'"
    ).fetchall() == [("schedule.run_now", "schedule:weekly:12345")]
    unknown = cronbase(database_url, "schedules", "run-now", "weekly:nope")
    assert (unknown.returncode, unknown.stderr.strip()) == (
        2,
        "error: no schedule with key 'weekly:nope'",
    )
    # Overdue: its next run passed a while ago and nothing fired it.
    db.execute("UPDATE cronbase.schedules SET next_fire_at = now() - interval '10 minutes'")
    table = ok(cronbase(database_url, "schedules", "list"))
    assert "overdue: is a scheduler running?" in table
    assert "overdue: weekly:12345: their next run has passed" in table

    ok(cronbase(database_url, "schedules", "remove", "weekly:12345"))
    assert schedule_rows(db) == []
    missing = cronbase(database_url, "schedules", "remove", "weekly:12345")
    assert missing.returncode == 2
    assert "no schedule with key 'weekly:12345'" in missing.stderr


def test_concurrent_ticks_from_crontab_make_one_job_per_slot_and_run_it(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    record = tmp_path / "record.txt"
    # Schedules whose slots are only the missed ones (and, for "all", this hour's): no slot can
    # begin while the ticks run, whenever the test runs, so each count is exact. (With
    # "* * * * *" a minute that began while six ticks started was a new slot: 2 jobs, not 1.)
    row = db.execute(
        "SELECT date_trunc('minute', now() AT TIME ZONE 'UTC'), "
        "date_trunc('hour', now() AT TIME ZONE 'UTC')"
    ).fetchone()
    assert row is not None
    minute, hour = (t.replace(tzinfo=UTC) for t in row)
    missed_minutes = [minute - timedelta(minutes=n) for n in range(5, 0, -1)]  # down 5 minutes
    missed_hours = [hour - timedelta(hours=n) for n in range(3, 0, -1)]  # down 3 hours
    minutely = f"{','.join(str(t.minute) for t in missed_minutes)} * * * *"
    hourly = f"0 {','.join(str(t.hour) for t in missed_hours)} * * *"
    with_this_hour = f"0 {','.join(str(t.hour) for t in [*missed_hours, hour])} * * *"
    ok(add(database_url, "record", "--cron", minutely, "--payload", '{"n": 1}', "--key", "m"))
    ok(add(database_url, "record", "--cron", hourly, "--payload", '{"n": 2}', "--key", "h"))
    ok(
        add(
            database_url,
            *("record", "--cron", with_this_hour, "--payload", '{"n": 3}', "--key", "all"),
            *("--catch-up", "all"),
        )
    )
    # As if every host had been down since the first missed slot.
    db.execute(
        "UPDATE cronbase.schedules SET next_fire_at = CASE key WHEN 'm' THEN %s ELSE %s END",
        [missed_minutes[0], missed_hours[0]],
    )
    # Six hosts' crontabs fire at the same moment.
    ticks = [
        subprocess.Popen(
            [str(CRONBASE), "--app", APP, "tick", "--no-run"],
            env=cli_env(database_url, CLI_TEST_RECORD=str(record)),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    results = [(t.communicate(timeout=60), t.returncode) for t in ticks]
    assert all(code == 0 for _, code in results), results

    def slots(key: str) -> list[datetime]:
        return [datetime.fromisoformat(job.split("@")[1]) for job, _ in slot_jobs(db, key)]

    assert slots("m") == [missed_minutes[-1]]  # latest: the newest missed minute only
    assert slots("h") == [missed_hours[-1]]
    assert slots("all") == [*missed_hours, hour]  # all: every missed hour, and this one's
    assert not record.exists()  # --no-run left them to workers

    ok(cronbase(database_url, "--app", APP, "tick", CLI_TEST_RECORD=str(record)))
    assert sorted(record.read_text().split()) == ["1", "2", "3", "3", "3", "3"]
    statuses = {status for key in ("m", "h", "all") for _, status in slot_jobs(db, key)}
    assert statuses == {"succeeded"}


def _worker(database_url: str, record: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(CRONBASE), "--app", APP, "worker", "--poll-interval", "0.1", *args],
        env=cli_env(database_url, CLI_TEST_RECORD=str(record)),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(worker: subprocess.Popen[str]) -> str:
    worker.send_signal(signal.SIGTERM)
    try:
        _, stderr = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, stderr
    return stderr


def test_a_long_running_worker_fires_schedules_itself(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    record = tmp_path / "record.txt"
    # A seconds field: a slot every second, so the test needs no minute to pass.
    ok(add(database_url, "record", "--cron", "* * * * * *", "--payload", '{"n": 7}', "--key", "s"))
    worker = _worker(database_url, record)
    try:
        wait_for(
            lambda: record.exists() and len(record.read_text().split()) >= 3,
            timeout=30,
            what="three slots run by the worker's scheduler",
        )
    finally:
        _stop(worker)
    keys = [key for key, _ in slot_jobs(db, "s")]
    assert len(keys) == len(set(keys)) >= 3


def test_no_schedule_leaves_due_slots_alone(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    record = tmp_path / "record.txt"
    ok(add(database_url, "record", "--cron", "* * * * * *", "--payload", '{"n": 7}', "--key", "s"))
    worker = _worker(database_url, record, "--no-schedule")
    try:
        # A job the worker runs proves it has been looping; twice over, to span its first ticks.
        for n in (1, 2):
            ok(
                cronbase(
                    database_url, "--app", APP, "enqueue", "record", "--payload", f'{{"n": {n}}}'
                )
            )
            wait_for(
                lambda n=n: record.exists() and str(n) in record.read_text().split(),
                timeout=30,
                what=f"job {n} to run",
            )
    finally:
        _stop(worker)
    assert slot_jobs(db, "s") == []
