"""Every numeric and duration option of every command refuses what is no number for it (NaN,
infinity, a duration past what a timedelta holds, a count past the database's column) with one
line naming the option, exit 2, before anything starts or is written."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.e2e.test_cli import APP, cronbase, job_rows

HUGE = "99999999999999999999"  # past a bigint
CASES = [
    # worker (and tick) options
    (["worker", "--poll-interval", "nan"], "--poll-interval", "'nan' is not a finite number"),
    (["worker", "--poll-interval", "inf"], "--poll-interval", "'inf' is not a finite number"),
    (["worker", "--poll-interval", "0"], "--poll-interval", "'0': give more than 0 seconds"),
    (["worker", "--shutdown-grace", "inf"], "--shutdown-grace", "is not a finite number"),
    (["worker", "--shutdown-grace", "nan"], "--shutdown-grace", "is not a finite number"),
    (["worker", "--shutdown-grace", "-1"], "--shutdown-grace", "give 0 or more seconds"),
    (["worker", "--shutdown-grace", "1e20"], "--shutdown-grace", "longer than a duration can be"),
    (["worker", "--concurrency", HUGE], "--concurrency", "is not in the range 1<=x<=2147483647"),
    (["worker", "--queue", f"emails={HUGE}"], "--queue", "a queue's concurrency is from 1 to"),
    (["worker", "--metrics-port", "70000"], "--metrics-port", "is not in the range"),
    (["tick", "--concurrency", HUGE], "--concurrency", "is not in the range"),
    # enqueue
    (["enqueue", "record", "--delay", "nan"], "--delay", "'nan' is not a finite number of seconds"),
    (["enqueue", "record", "--delay", "inf"], "--delay", "'inf' is not a finite number of seconds"),
    (["enqueue", "record", "--delay", "-inf"], "--delay", "is not a finite number of seconds"),
    (["enqueue", "record", "--delay", "1e300"], "--delay", "longer than a duration can be"),
    (["enqueue", "record", "--delay", "soon"], "--delay", "'soon' is not a number of seconds"),
    (["enqueue", "record", "--priority", "99999"], "--priority", "is not in the range"),
    (["enqueue", "record", "--max-attempts", HUGE], "--max-attempts", "is not in the range"),
    # the rest
    (["dashboard", "--long-running-after", "nan"], "--long-running-after", "not a finite number"),
    (["dashboard", "--long-running-after", "inf"], "--long-running-after", "not a finite number"),
    (["dashboard", "--port", "0"], "--port", "is not in the range"),
    (["jobs", "list", "--limit", HUGE], "--limit", "is not in the range"),
    (["effects", "list", "--limit", HUGE], "--limit", "is not in the range"),
    (["audit", "--limit", HUGE], "--limit", "is not in the range"),
    (["prune", "--older-than", "99999999999d"], "--older-than", "longer than a duration can be"),
    (["prune", "--older-than", "nan"], "--older-than", "'nan' is not a duration"),
    (["check", "--max-wait", "99999999999w"], "--max-wait", "longer than a duration can be"),
    (["check", "--max-dead", "-1"], "--max-dead", "is not in the range"),
    (
        ["schedules", "add", "record", "--cron", "@hourly", "--max-catch-up", HUGE],
        "--max-catch-up",
        "is not in the range",
    ),
    # issue 34: accepted, and a tick after an outage would have enqueued that many jobs
    (
        ["schedules", "add", "record", "--cron", "@hourly", "--max-catch-up", "100000000"],
        "--max-catch-up",
        "100000000 is not in the range 1<=x<=10000",
    ),
    (["worker", "--concurrency", HUGE], "--concurrency", "is not in the range"),
    (["worker", "--keep", "dead=never"], "--keep", "'dead=never'"),
    (["--width", "5", "jobs", "list"], "--width", "is not in the range"),
]


@pytest.mark.parametrize(("args", "option", "said"), CASES, ids=[" ".join(a) for a, _, _ in CASES])
def test_a_number_that_is_none_for_its_option_is_refused_naming_it(
    database_url: str, db: psycopg.Connection[Any], args: list[str], option: str, said: str
) -> None:
    result = cronbase(database_url, "--app", APP, *args)
    assert result.returncode == 2, result
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: Invalid value for '{option}'"), line
    assert said in line, line
    assert "unexpected" not in line
    assert job_rows(db) == []
    assert db.execute("SELECT count(*) FROM cronbase.schedules").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM cronbase.workers").fetchone() == (0,)


def test_a_job_id_past_a_bigint_is_not_found(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    for command in ("show", "retry", "cancel"):
        result = cronbase(database_url, "jobs", command, "99999999999999999999")
        assert (result.returncode, result.stderr.strip()) == (
            2,
            "error: no job with id 99999999999999999999",
        )


def test_a_queue_rate_period_past_a_duration_is_refused_naming_it(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    rate = "1/99999999999999999999 days"
    result = cronbase(database_url, "queues", "rate", "emails", rate, "--force")
    assert (result.returncode, result.stderr.strip()) == (
        2,
        f"error: queue 'emails' rate '{rate}': the period is out of range; it must be from 1 second to 366 days",
    )
    assert db.execute("SELECT count(*) FROM cronbase.queues").fetchone() == (0,)
