"""The command and stored JSON past MAX_JSON_DEPTH: ``jobs list/show/retry/cancel`` and ``prune``
show and act on a row other SQL wrote 10,000 levels deep, and ``--payload`` past the limit, or
with a key given twice, is one error line (exit 2). A succeeded job shows no earlier error."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

import cronbase
from tests.e2e.test_cli import APP, job_rows, ok
from tests.e2e.test_cli import cronbase as run
from tests.integration.test_undecodable import DEEP, TOO_DEEP, run_burst
from tests.integration.test_worker_resilience import insert_by_sql


def test_jobs_commands_show_and_act_on_a_row_too_deep_to_decode(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    poison = insert_by_sql(db, "record", DEEP, result=f"({DEEP})::jsonb")
    marked = f"undecodable JSON, {TOO_DEEP}: "

    assert f"{poison} " in ok(run(database_url, "jobs", "list"))
    [listed] = json.loads(ok(run(database_url, "jobs", "list", "--json")))
    assert listed["payload"] == {
        "undecodable": TOO_DEEP,
        "start": '{"x": ' + "[" * 194,
        "length": 20_007,
    }
    shown = ok(run(database_url, "jobs", "show", str(poison)))
    assert shown.count(marked) == 2, shown  # the payload and the result
    assert "[" * 1000 not in shown
    detail = json.loads(ok(run(database_url, "jobs", "show", str(poison), "--json")))
    assert detail["job"]["result"]["undecodable"] == TOO_DEEP

    assert ok(run(database_url, "--app", APP, "jobs", "cancel", str(poison))).strip() == (
        f"job {poison} is cancelled"
    )
    assert ok(run(database_url, "--app", APP, "jobs", "retry", str(poison))).startswith(
        f"job {poison} is queued again"
    )
    ok(run(database_url, "--app", APP, "jobs", "cancel", str(poison)))
    pruned = ok(run(database_url, "prune", "--older-than", "0s", "--status", "cancelled"))
    assert pruned.startswith("pruned 1 jobs")
    assert job_rows(db) == []


@pytest.mark.parametrize("levels", [2000, 900, 100])
def test_a_payload_deeper_than_the_limit_is_one_error_line(
    database_url: str, db: psycopg.Connection[Any], levels: int
) -> None:
    # The payload object is level 1: {"n": 100 lists} is 101 levels deep.
    payload = '{"n": ' + "[" * levels + "]" * levels + "}"
    result = run(database_url, "--app", APP, "enqueue", "record", "--payload", payload)
    assert result.returncode == 2, result
    [line] = result.stderr.strip().splitlines()
    assert line.endswith(
        "is nested deeper than 100 levels (at character 105), the most cronbase stores; "
        "flatten it, or store the data elsewhere and pass its key"
    ), line
    assert job_rows(db) == []


def test_a_key_given_twice_in_a_payload_is_one_error_line(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    payload = '{"n": 1, "more": {"k": 1, "k": 2}}'
    result = run(database_url, "--app", APP, "enqueue", "record", "--payload", payload)
    assert (result.returncode, result.stderr.strip()) == (
        2,
        f"error: Invalid value for '--payload': '{payload}' has the key 'k' twice in one "
        "object; JSON would keep only the last: give each key once",
    )
    assert job_rows(db) == []


def test_a_succeeded_job_shows_no_error_of_an_earlier_attempt(
    database_url: str, app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    calls: list[int] = []

    @app.task
    def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first attempt failed")

    job_id = flaky.defer()
    run_burst(app)
    db.execute("UPDATE cronbase.jobs SET run_at = now() WHERE id = %s", [job_id])  # the retry
    run_burst(app)
    assert app.jobs.get(job_id).status is cronbase.JobStatus.SUCCEEDED

    assert "first attempt failed" not in ok(run(database_url, "jobs", "list"))
    shown = ok(run(database_url, "jobs", "show", str(job_id)))
    assert "last error" not in shown
    # The attempt keeps its error.
    assert "attempt 1: failed" in shown
    assert "\n  RuntimeError: first attempt failed" in shown
