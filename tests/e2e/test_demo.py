"""``cronbase demo`` end to end: exit 0, and the database holds what the demo says it did."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

import cronbase
from cronbase.cli import demo

CRONBASE = Path(sys.executable).with_name("cronbase")


def run_demo(database_url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(CRONBASE_DATABASE_URL=database_url, COLUMNS="200")
    return subprocess.run(
        [str(CRONBASE), "demo"],
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )


def demo_jobs(database_url: str) -> list[dict[str, Any]]:
    with (
        psycopg.connect(database_url) as conn,
        conn.cursor(row_factory=psycopg.rows.dict_row) as cur,
    ):
        cur.execute(
            f"SELECT id, task, status, attempts, payload, idempotency_key, last_error "
            f"FROM {demo.SCHEMA}.jobs_all ORDER BY id"
        )
        return cur.fetchall()


def test_demo_runs_every_job_to_a_final_state(database_url: str) -> None:
    result = run_demo(database_url)
    assert result.returncode == 0, result.stdout + result.stderr

    jobs = demo_jobs(database_url)
    by_invoice = {j["payload"].get("invoice_id"): j for j in jobs if "invoice_id" in j["payload"]}

    dead = [j for j in jobs if j["status"] == "dead"]
    assert [j["payload"]["invoice_id"] for j in dead] == [demo.BOUNCING_INVOICE]
    assert dead[0]["attempts"] == 3
    assert "does not exist" in dead[0]["last_error"]

    flaky = by_invoice[demo.FLAKY_INVOICE]
    assert (flaky["status"], flaky["attempts"]) == ("succeeded", 3)
    with cronbase.App(database_url=database_url, schema=demo.SCHEMA) as app:
        outcomes = [(a.attempt, a.outcome) for a in app.jobs.attempts(flaky["id"])]
    assert outcomes == [(1, "failed"), (2, "failed"), (3, "succeeded")]

    # The duplicate idempotency key was deferred twice and stored once.
    keyed = [j for j in jobs if j["idempotency_key"] == demo.DUPLICATE_KEY]
    assert len(keyed) == 1
    assert f"job {keyed[0]['id']}, the same job: nothing inserted" in result.stdout

    others = [j for j in jobs if j not in dead]
    assert {j["status"] for j in others} == {"succeeded"}
    assert {j["task"] for j in jobs} == {
        "send_invoice_reminder",
        "refresh_cache",
        "weekly_report",
        "cleanup",
    }
    report = next(j for j in jobs if j["task"] == "weekly_report")
    assert report["status"] == "succeeded"

    # The final tables, one per status, name what the database holds.
    assert f"succeeded: {len(others)} jobs" in result.stdout
    assert "dead: 1 job" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_demo_is_repeatable(database_url: str) -> None:
    """Each run empties its schema first, so a second run ends the same way."""
    first = run_demo(database_url)
    assert first.returncode == 0, first.stdout + first.stderr
    second = run_demo(database_url)
    assert second.returncode == 0, second.stdout + second.stderr
    statuses = [j["status"] for j in demo_jobs(database_url)]
    assert statuses.count("dead") == 1
    assert statuses.count("succeeded") == len(statuses) - 1
