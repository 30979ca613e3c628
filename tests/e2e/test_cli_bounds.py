"""What the worker commands take before they start: processes, jobs at once and connections
weighed against the machine and the server (refused with the arithmetic, or run with --force),
and retention from the command line (``--keep``), which ``cronbase tick`` applies too."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cronbase.worker.capacity import ConnectionRoom, refusals
from tests.e2e.test_cli import APP, CRONBASE, REPO, cli_env, cronbase, ok

pytestmark = pytest.mark.slow


def one_line_refusal(result: Any) -> str:
    assert result.returncode == 2, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert lines[0].endswith("(or pass --force)"), lines[0]
    return lines[0]


def workers_registered(db: psycopg.Connection[Any]) -> int:
    return int(db.execute("SELECT count(*) FROM cronbase.workers").fetchone()[0])


# -- the arithmetic ----------------------------------------------------------------------------


def test_the_refusals_name_the_values_and_show_the_arithmetic() -> None:
    room = ConnectionRoom(max_connections=100, reserved=3, in_use=7)
    assert room.free == 90
    found = refusals(
        processes=20, supervised=True, concurrency=20_000, cores=2, pool_size=4, room=room
    )
    assert found == [
        "--processes 20: each worker process runs on one core, and this process may use 2; "
        "more than 4 (2 per core) only add connections and memory. For more jobs at once raise "
        "--concurrency",
        "--concurrency 20,000: a claim leases up to that many jobs at once and each lease "
        "renewal rewrites them all; above 10,000 per process run more processes",
        "20 worker processes need up to 20 x (4 pool + 2) + 1 (supervisor) = 121 connections; "
        "the server has 90 free (max_connections 100 - 3 reserved - 7 in use). Lower "
        "--processes or the App's pool_size, raise max_connections, or put a pooler in between",
    ]
    # Within every bound, and behind a transaction pooler (no room known): nothing to say.
    assert (
        refusals(processes=4, supervised=True, concurrency=10_000, cores=2, pool_size=4, room=room)
        == []
    )
    assert (
        refusals(processes=4, supervised=True, concurrency=10, cores=2, pool_size=4, room=None)
        == []
    )
    # A plain worker is one process, whatever the cores.
    assert (
        refusals(processes=1, supervised=False, concurrency=10, cores=1, pool_size=4, room=room)
        == []
    )


# -- the commands --------------------------------------------------------------------------------


def test_absurd_processes_are_refused_before_anything_starts(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    """issue 34: --processes 100000 on two cores started spawning at once."""
    result = cronbase(database_url, "--app", APP, "worker", "--processes", "100000")
    line = one_line_refusal(result)
    assert "--processes 100,000: each worker process runs on one core" in line
    assert "100,000 worker processes need up to 100,000 x (4 pool + 2) + 1 (supervisor)" in line
    assert workers_registered(db) == 0


def test_more_processes_than_two_per_core_are_refused(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    if not shutil.which("taskset"):
        pytest.skip("needs taskset (util-linux)")
    # One core for the command, whatever the machine has: 3 processes are one too many.
    result = subprocess.run(
        ["taskset", "-c", "0", str(CRONBASE), "--app", APP, "worker", "--processes", "3"],
        env=cli_env(database_url),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    line = one_line_refusal(result)
    assert "--processes 3: each worker process runs on one core, and this process may use 1" in line
    assert workers_registered(db) == 0


def test_absurd_concurrency_is_refused_and_force_runs_it(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    result = cronbase(database_url, "--app", APP, "worker", "--burst", "--concurrency", "50000")
    assert "--concurrency 50,000: a claim leases up to that many jobs" in one_line_refusal(result)
    forced = cronbase(
        database_url, "--app", APP, "worker", "--burst", "--concurrency", "50000", "--force"
    )
    ok(forced)
    assert "--force: starting although --concurrency 50,000" in forced.stderr


def test_more_connections_than_the_server_has_free_are_refused(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    limit = int(db.execute("SHOW max_connections").fetchone()[0])
    processes = limit // 6 + 1  # 6 connections each (pool of 4, listener, one more)
    result = cronbase(
        database_url, "--app", APP, "worker", "--processes", str(processes), "--burst"
    )
    line = one_line_refusal(result)
    needed = processes * 6 + 1
    assert f"= {needed:,} connections; the server has " in line
    assert f"(max_connections {limit:,} - " in line
    assert workers_registered(db) == 0


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("succeeded", "write STATUS=AGE"),
        ("done=7d", "write STATUS=AGE"),
        ("dead=soon", "'soon'"),
        ("dead=-3d", "'-3d'"),
    ],
)
def test_a_bad_keep_is_one_line_and_exit_2(
    database_url: str, db: psycopg.Connection[Any], value: str, says: str
) -> None:
    result = cronbase(database_url, "--app", APP, "worker", "--burst", "--keep", value)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: Invalid value for '--keep': "), lines[0]
    assert says in lines[0]


# -- retention from cron ---------------------------------------------------------------------------


def recorder(database_url: str, tmp_path: Path) -> Callable[..., str]:
    """``cronbase --app APP ARGS...`` as cli_app's ``record`` task needs it; its stdout."""

    def run(*args: str) -> str:
        return ok(cronbase(database_url, "--app", APP, *args, CLI_TEST_RECORD=str(tmp_path / "r")))

    return run


def finished_days_ago(db: psycopg.Connection[Any], job_id: int, days: int) -> None:
    """Move a finished job's end ``days`` back (its day's partition made, as a worker's
    maintenance would have)."""
    day = (datetime.now(UTC) - timedelta(days=days)).date()
    db.execute("SELECT cronbase.create_history_days(%s, %s)", [day, day])
    db.execute(
        "UPDATE cronbase.jobs_history SET finished_at = now() - make_interval(days => %s) "
        "WHERE id = %s",
        [days, job_id],
    )


def statuses(db: psycopg.Connection[Any]) -> dict[int, str]:
    return dict(db.execute("SELECT id, status FROM cronbase.jobs_all").fetchall())


@pytest.mark.parametrize("command", [("tick",), ("tick", "--no-run"), ("worker", "--burst")])
def test_tick_and_a_burst_worker_keep_the_history_bounded(
    database_url: str, db: psycopg.Connection[Any], command: tuple[str, ...], tmp_path: Path
) -> None:
    """issue 34: the crontab line of docs/guides/schedules.md (cronbase tick) ran a burst worker, which never
    pruned: a crontab-only deployment kept its history forever."""
    run = recorder(database_url, tmp_path)
    old, recent = (int(run("enqueue", "record", "--payload", f'{{"n": {n}}}')) for n in (1, 2))
    run("worker", "--burst")  # without --keep a burst worker prunes nothing
    finished_days_ago(db, old, 3)
    assert statuses(db) == {old: "succeeded", recent: "succeeded"}

    run(*command, "--keep", "succeeded=2d")
    assert statuses(db) == {recent: "succeeded"}


def test_tick_prunes_by_the_default_retention(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    run = recorder(database_url, tmp_path)
    old, recent = (int(run("enqueue", "record", "--payload", f'{{"n": {n}}}')) for n in (1, 2))
    run("worker", "--burst")
    finished_days_ago(db, old, 8)
    finished_days_ago(db, recent, 6)
    run("tick")  # succeeded jobs are kept 7 days
    assert statuses(db) == {recent: "succeeded"}
