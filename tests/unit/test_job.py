"""JobStatus and the state rules: TRANSITIONS, can_transition, outcome_status, Job rows."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from importlib import resources
from itertools import product

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronbase import Job, JobAttempt, JobStatus
from cronbase.job import TRANSITIONS, can_transition, outcome_status

S = JobStatus
ALL = list(JobStatus)


def test_status_values_are_the_ones_the_database_allows() -> None:
    # The newest migration that redefines the check (0012 added 'pending').
    folder = resources.files("cronbase.db") / "migrations"
    migration = (folder / "0012_dependencies.sql").read_text()
    check = re.search(r"CHECK \(status IN \(([^)]*)\)\)", migration)
    assert check is not None
    assert set(re.findall(r"'(\w+)'", check.group(1))) == {s.value for s in JobStatus}


def test_the_lifecycle_edges_are_allowed() -> None:
    for old, new in [
        (S.QUEUED, S.RUNNING),
        (S.RUNNING, S.SUCCEEDED),
        (S.RUNNING, S.FAILED),
        (S.FAILED, S.RUNNING),
        (S.RUNNING, S.DEAD),
        (S.QUEUED, S.CANCELLED),
        (S.FAILED, S.CANCELLED),
        (S.DEAD, S.QUEUED),
        (S.CANCELLED, S.QUEUED),
        (S.FAILED, S.QUEUED),
    ]:
        assert can_transition(old, new), (old, new)


def test_every_edge_has_a_reason_and_no_other_edge_is_allowed() -> None:
    for old, new in product(ALL, ALL):
        assert can_transition(old, new) == ((old, new) in TRANSITIONS)
    assert all(reason.strip() for reason in TRANSITIONS.values())


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (S.SUCCEEDED, S.RUNNING),  # a finished job runs again only after an operator's retry
        (S.DEAD, S.RUNNING),
        (S.CANCELLED, S.RUNNING),
        (S.RUNNING, S.RUNNING),  # a running job is never claimed twice
        (S.QUEUED, S.SUCCEEDED),  # outcomes come from running only
        (S.QUEUED, S.FAILED),
        (S.QUEUED, S.DEAD),
        (S.SUCCEEDED, S.CANCELLED),  # nothing left to cancel
        (S.DEAD, S.CANCELLED),
        (S.CANCELLED, S.CANCELLED),
    ],
)
def test_forbidden_edges(old: JobStatus, new: JobStatus) -> None:
    assert not can_transition(old, new)


def test_only_waiting_jobs_are_claimed_and_final_jobs_only_go_back_to_queued() -> None:
    assert {old for old in ALL if can_transition(old, S.RUNNING)} == {
        s for s in ALL if s.is_waiting
    }
    for final in (s for s in ALL if s.is_final):
        # A cancelled job goes back to pending too: when the parent whose failure cancelled
        # it is retried.
        back = {S.QUEUED, S.PENDING} if final is S.CANCELLED else {S.QUEUED}
        assert {new for new in ALL if can_transition(final, new)} == back
    assert {s for s in ALL if not s.is_waiting and not s.is_final} == {S.RUNNING, S.PENDING}
    # A pending job only waits: released to queued, or cancelled.
    assert {new for new in ALL if can_transition(S.PENDING, new)} == {S.QUEUED, S.CANCELLED}


def test_outcome_status_table() -> None:
    assert outcome_status(succeeded=True, give_up=False, attempts=5, max_attempts=5) == S.SUCCEEDED
    assert outcome_status(succeeded=False, give_up=False, attempts=1, max_attempts=3) == S.FAILED
    assert outcome_status(succeeded=False, give_up=False, attempts=3, max_attempts=3) == S.DEAD
    assert outcome_status(succeeded=False, give_up=True, attempts=1, max_attempts=3) == S.DEAD
    # Attempts past max_attempts (a retry after max_attempts was lowered) are dead too.
    assert outcome_status(succeeded=False, give_up=False, attempts=9, max_attempts=3) == S.DEAD


@given(st.booleans(), st.booleans(), st.integers(1, 1000), st.integers(1, 1000))
def test_outcome_status_is_always_a_legal_edge_from_running(
    succeeded: bool, give_up: bool, attempts: int, max_attempts: int
) -> None:
    status = outcome_status(
        succeeded=succeeded, give_up=give_up, attempts=attempts, max_attempts=max_attempts
    )
    assert can_transition(S.RUNNING, status)
    assert (status is S.SUCCEEDED) == succeeded
    assert (status is S.FAILED) == (not succeeded and not give_up and attempts < max_attempts)


def job_row(**changes: object) -> dict[str, object]:
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    row: dict[str, object] = {
        "id": 7,
        "task": "send_invoice",
        "queue": "emails",
        "payload": {"invoice_id": 812},
        "status": "failed",
        "priority": 10,
        "run_at": at,
        "attempts": 1,
        "max_attempts": 3,
        "lease": timedelta(seconds=90),
        "locked_by": None,
        "locked_until": None,
        "lease_token": None,  # columns Job does not keep are ignored
        "idempotency_key": None,
        "dedupe_key": "k",
        "progress": None,
        "stage": None,
        "last_error": "ValueError: no",
        "error_type": "ValueError",
        "started_at": at,
        "created_at": at,
        "updated_at": at,
        "finished_at": None,
        "metadata": None,
        "result": {"total": 3},
        "snoozes": 2,
        "parents_left": 0,
        "workflow_id": None,
        "waiting_for": None,
        "task_version": 2,
        "base_priority": 120,
    }
    row.update(changes)
    return row


def test_job_from_a_row_and_to_json() -> None:
    job = Job.from_row(job_row())
    assert job.status is S.FAILED
    assert job.status.is_waiting
    out = job.to_json()
    assert out["status"] == "failed"
    assert out["run_at"] == "2030-01-02T03:04:05+00:00"
    assert out["lease"] == 90.0
    assert out["payload"] == {"invoice_id": 812}
    assert (out["result"], out["snoozes"], out["task_version"]) == ({"total": 3}, 2, 2)
    assert (out["priority"], out["base_priority"]) == (job.priority, 120)
    assert job.priority_label == f"{job.priority} (aged from 120)"
    assert "lease_token" not in out


def test_a_row_with_an_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="'paused'"):
        Job.from_row(job_row(status="paused"))


def test_attempt_from_a_row_and_to_json() -> None:
    at = datetime(2030, 1, 2, tzinfo=UTC)
    attempt = JobAttempt.from_row(
        {
            "id": 1,
            "job_id": 7,
            "attempt": 2,
            "worker": "w",
            "started_at": None,
            "finished_at": at,
            "outcome": "dead",
            "error": "E",
            "error_type": "ValueError",
            "traceback": "Traceback ...",
        }
    )
    assert attempt.to_json()["finished_at"] == "2030-01-02T00:00:00+00:00"
    assert attempt.to_json()["started_at"] is None
    assert (attempt.attempt, attempt.outcome) == (2, "dead")
