"""The outcome table (cronbase.job.OUTCOMES, next_state) is the SQL's: every outcome, from every
state of the counters, written by the statement that writes it, leaves the row where the table
says. Inline testing mode applies the table; the worker writes the SQL."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.job import OUTCOMES, JobStatus, next_state

# (attempts so far, counted as a claim counts them; max_attempts; snoozes; snooze cap)
GRID = [
    (attempts, most, snoozes, cap)
    for attempts, most in itertools.product((1, 2, 3), (1, 2, 3))
    if attempts <= most
    for snoozes, cap in itertools.product((0, 1, 2), (-1, 0, 1, 2))
]


def running(db: psycopg.Connection[Any], attempts: int, most: int, snoozes: int) -> tuple[int, Any]:
    """A job in the middle of attempt ``attempts``, as a claim leaves it: its id and token."""
    token = uuid.uuid4()
    row = db.execute(
        "INSERT INTO cronbase.jobs (task, payload, status, attempts, max_attempts, snoozes,"
        " locked_by, locked_until, lease_token, started_at)"
        " VALUES ('t', '{}', 'running', %s, %s, %s, 'w', now() + interval '1 minute', %s, now())"
        " RETURNING id",
        (attempts, most, snoozes, token),
    ).fetchone()
    assert row is not None
    return row[0], token


def write(app: cronbase.App, db: psycopg.Connection[Any], outcome: str, job_id: int, token: Any,
          cap: int) -> None:  # fmt: skip
    """Write ``outcome`` as the worker does: the statement that writes it."""
    q = app.queries
    one = {"ids": [job_id], "tokens": [token], "worker": "w"}
    if outcome == "succeeded":
        done = {"done_ids": [job_id], "done_tokens": [token], "done_results": None}
        assert db.execute(q.complete_jobs, done).fetchone() == ([job_id],)
    elif outcome == "released":
        params = {**one, "channel": app.channel, "reason": "test"}
        assert db.execute(q.release_jobs, params).fetchall() == [(job_id,)]
    elif outcome == "suspended":
        params = {**one, "wake_in": [60.0], "waiting_for": [None], "locked": [True],
                  "channel": app.channel}  # fmt: skip
        assert len(db.execute(q.suspend_jobs, params).fetchall()) == 1
    else:
        params = {**one, "outcomes": [outcome], "retry_in": [0.0], "errors": ["E"],
                  "error_types": ["E"], "tracebacks": [None], "snooze_caps": [cap]}  # fmt: skip
        assert len(db.execute(q.finish_jobs, params).fetchall()) == 1


@pytest.mark.parametrize("outcome", sorted(OUTCOMES))
def test_each_outcome_leads_where_the_sql_leads(
    app: cronbase.App, db: psycopg.Connection[Any], outcome: str
) -> None:
    seen: set[tuple[str, int, int]] = set()
    for attempts, most, snoozes, cap in GRID:
        if outcome != "snoozed" and cap != 0:
            continue  # only a snooze reads the cap
        job_id, token = running(db, attempts, most, snoozes)
        write(app, db, outcome, job_id, token, cap)
        row = db.execute(
            "SELECT status, attempts, snoozes FROM cronbase.jobs_all WHERE id = %s", (job_id,)
        ).fetchone()
        status, after, snoozed = next_state(
            outcome, attempts=attempts, max_attempts=most, snoozes=snoozes, snooze_cap=cap
        )
        assert row == (status.value, after, snoozed), (outcome, attempts, most, snoozes, cap)
        seen.add(row)
    # The grid reaches every state the rule names.
    rule = OUTCOMES[outcome]
    reached = {JobStatus(status) for status, _, _ in seen}
    assert reached == {rule.status} | ({rule.exhausted} if rule.exhausted else set())
