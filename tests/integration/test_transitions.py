"""Job states against PostgreSQL: every edge of TRANSITIONS, retries with backoff, dead jobs."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.job import TRANSITIONS, JobStatus
from cronbase.worker.outcomes import ERROR_LIMIT, TRACEBACK_LIMIT
from tests.conftest import claim_rows
from tests.e2e.harness import history, job_row

S = JobStatus
MICROSECOND = timedelta(microseconds=1)


def run_burst(app: cronbase.App) -> None:
    app.run_worker(burst=True, install_signal_handlers=False)


def make_due(db: psycopg.Connection[Any], job_id: int) -> None:
    """What waiting out the backoff would do: the failed job's run_at comes."""
    db.execute("UPDATE cronbase.jobs SET run_at = now() WHERE id = %s", (job_id,))


def attempt_rows(db: psycopg.Connection[Any], job_id: int) -> list[dict[str, Any]]:
    with db.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return cur.execute(
            "SELECT * FROM cronbase.job_attempts_all WHERE job_id = %s ORDER BY id", (job_id,)
        ).fetchall()


# -- the worker drives a job through its states ----------------------------------------------------


def test_queued_running_succeeded(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    seen: list[tuple[JobStatus, int]] = []

    @app.task
    def observe() -> None:
        job = app.jobs.get(cronbase.current_job().id)
        seen.append((job.status, job.attempts))

    job_id = observe.defer()
    assert app.jobs.get(job_id).status is S.QUEUED
    run_burst(app)
    assert seen == [(S.RUNNING, 1)]
    row = job_row(db, job_id)
    assert (row["status"], row["attempts"], row["progress"]) == ("succeeded", 1, 100.0)
    # The lease is gone; locked_by stays: the worker that ran the attempt.
    assert (row["locked_until"], row["lease_token"]) == (None, None)
    assert row["locked_by"] is not None
    assert row["locked_by"].startswith(socket.gethostname())
    # A success writes no history row: the job row records its final attempt, and the attempt
    # list shows it.
    assert attempt_rows(db, job_id) == []
    [attempt] = app.jobs.attempts(job_id)
    assert (attempt.attempt, attempt.outcome, attempt.error) == (1, "succeeded", None)
    assert attempt.worker == row["locked_by"]
    assert row["started_at"] == attempt.started_at <= attempt.finished_at
    assert row["finished_at"] == attempt.finished_at


class PaymentDeclined(Exception):
    pass


def test_running_failed_then_retried_running_succeeded(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    seen: list[tuple[JobStatus, int]] = []

    @app.task(max_attempts=3, retry=cronbase.Backoff(base=timedelta(hours=1), jitter=0))
    def charge(invoice_id: int) -> None:
        job = app.jobs.get(cronbase.current_job().id)
        seen.append((job.status, cronbase.current_job().attempt))
        if cronbase.current_job().attempt == 1:
            raise PaymentDeclined(f"invoice {invoice_id}: card declined")

    job_id = charge.defer(invoice_id=812)
    run_burst(app)
    row = job_row(db, job_id)
    assert (row["status"], row["attempts"], row["finished_at"]) == ("failed", 1, None)
    assert row["last_error"] == "PaymentDeclined: invoice 812: card declined"
    assert row["error_type"] == f"{__name__}.PaymentDeclined"
    [failed] = attempt_rows(db, job_id)
    # The retry is due one backoff after the failure, in database time.
    assert row["run_at"] - failed["finished_at"] == timedelta(hours=1)

    run_burst(app)  # not due yet: nothing runs
    assert seen == [(S.RUNNING, 1)]
    make_due(db, job_id)
    run_burst(app)
    assert seen == [(S.RUNNING, 1), (S.RUNNING, 2)]
    row = job_row(db, job_id)
    assert (row["status"], row["attempts"]) == ("succeeded", 2)
    assert [(a, outcome) for a, outcome, _ in history(db, job_id)] == [
        (1, "failed"),
        (2, "succeeded"),
    ]


def test_failed_until_max_attempts_then_dead_with_the_whole_history(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(max_attempts=3, retry=cronbase.Backoff(base=timedelta(hours=1), jitter=0))
    def hopeless(n: int) -> None:
        raise ValueError(f"attempt {cronbase.current_job().attempt}: " + "x" * 9000 + " END")

    job_id = hopeless.defer(n=1)
    for attempt in (1, 2, 3):
        run_burst(app)
        assert job_row(db, job_id)["attempts"] == attempt
        make_due(db, job_id)
    run_burst(app)  # dead jobs are never claimed, however due
    row = job_row(db, job_id)
    assert (row["status"], row["attempts"], row["error_type"]) == ("dead", 3, "ValueError")
    # The message is cut at its end, the traceback at its start (the innermost frames matter).
    assert row["last_error"].startswith("ValueError: attempt 3: xxx")
    assert len(row["last_error"]) == ERROR_LIMIT + 1
    assert row["last_error"].endswith("…")
    attempts = attempt_rows(db, job_id)
    assert [(a["attempt"], a["outcome"], a["error_type"]) for a in attempts] == [
        (1, "failed", "ValueError"),
        (2, "failed", "ValueError"),
        (3, "dead", "ValueError"),
    ]
    for a in attempts:
        assert a["traceback"].startswith("…")
        assert len(a["traceback"]) == TRACEBACK_LIMIT + 1
        assert a["traceback"].endswith(" END\n")
        assert a["started_at"] <= a["finished_at"]
    assert row["finished_at"] == attempts[-1]["finished_at"]
    assert app.jobs.get(job_id).status is S.DEAD


def test_a_short_traceback_is_kept_whole_and_names_the_handler(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(max_attempts=1)
    def broken_handler() -> None:
        int("not a number")

    job_id = broken_handler.defer()
    run_burst(app)
    [attempt] = app.jobs.attempts(job_id)
    assert (attempt.outcome, attempt.error, attempt.error_type) == (
        "dead",
        "ValueError: invalid literal for int() with base 10: 'not a number'",
        "ValueError",
    )
    assert attempt.traceback is not None
    assert attempt.traceback.startswith("Traceback (most recent call last)")
    assert "in broken_handler" in attempt.traceback


def test_a_payload_that_no_longer_fits_is_dead_at_once(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(max_attempts=5)
    def renamed(invoice_id: int) -> None: ...

    # Written by an older deploy whose handler took another argument.
    db.execute(
        "INSERT INTO cronbase.jobs (task, payload, max_attempts) VALUES ('renamed', %s, 5)",
        ('{"invoice": 1}',),
    )
    run_burst(app)
    [(job_id, status, attempts, error_type)] = db.execute(
        "SELECT id, status, attempts, error_type FROM cronbase.jobs_all"
    ).fetchall()
    assert (status, attempts, error_type) == ("dead", 1, "cronbase.errors.PayloadError")
    assert "invoice" in (job_row(db, job_id)["last_error"] or "")


# -- backoff timing, measured in database time -----------------------------------------------------


def test_each_retry_waits_within_the_backoff_bounds_up_to_the_cap(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    backoff = cronbase.Backoff(
        base=timedelta(minutes=10), cap=timedelta(minutes=30), factor=2, jitter=0.2
    )

    @app.task(max_attempts=6, retry=backoff)
    def flaky(n: int) -> None:
        raise RuntimeError("still down")

    ids = flaky.defer_many([{"n": n} for n in range(8)])
    delays: dict[int, list[timedelta]] = {}
    for attempt in range(1, 6):
        run_burst(app)
        for job_id in ids:
            row = job_row(db, job_id)
            assert (row["status"], row["attempts"]) == ("failed", attempt)
            failed_at = attempt_rows(db, job_id)[-1]["finished_at"]
            delays.setdefault(attempt, []).append(row["run_at"] - failed_at)
            make_due(db, job_id)
    for attempt, waited in delays.items():
        low, high = backoff.bounds(attempt)
        assert all(low - MICROSECOND <= d <= high + MICROSECOND for d in waited), (attempt, waited)
        assert max(waited) <= backoff.cap
        # Jitter: eight jobs failing together do not come back together.
        assert len(set(waited)) > 1, waited
    # Attempts 3 to 5 are past the cap: the cap bounds them from above.
    assert backoff.bounds(3) == backoff.bounds(5) == (timedelta(minutes=24), timedelta(minutes=30))


# -- every edge of TRANSITIONS, as the statements make it ------------------------------------------


class Driver:
    """Puts a job in a given state with the real statements, then applies one action to it."""

    def __init__(self, app: cronbase.App, db: psycopg.Connection[Any]) -> None:
        self.app, self.db, self.q = app, db, app.queries
        self.tokens: dict[int, uuid.UUID] = {}
        self.parents: dict[int, int] = {}

        @app.task(name="t", max_attempts=3)
        def t() -> None: ...

        self.task = t

    def new_job(self) -> int:
        # A queue of its own, so claims take this job and no other.
        queue = f"q{uuid.uuid4().hex[:8]}"
        row = self.db.execute(
            self.q.insert_job,
            {
                "task": "t",
                "queue": queue,
                "payload": "{}",
                "priority": 100,
                "run_at": None,
                "delay": timedelta(0),
                "max_attempts": 3,
                "lease": timedelta(minutes=5),
                "metadata": None,
                "flow_key": None,
                "task_version": None,
                "channel": self.app.channel,
            },
        ).fetchone()
        assert row is not None
        return int(row[0])

    def status(self, job_id: int) -> JobStatus:
        return JobStatus(job_row(self.db, job_id)["status"])

    def claim(self, job_id: int) -> bool:
        queue = job_row(self.db, job_id)["queue"]
        rows = claim_rows(self.app, self.db, 10, queues=[queue])[0]
        for job in rows:
            self.tokens[job.id] = job.lease_token
        return bool(rows)

    def finish(self, job_id: int, outcome: str) -> bool:
        token = self.tokens.get(job_id, uuid.uuid4())
        if outcome == "succeeded":  # the complete_jobs fragment, as claim_jobs carries it
            done = {"done_ids": [job_id], "done_tokens": [token], "done_results": None}
            return bool(self.db.execute(self.q.complete_jobs, done).fetchone()[0])
        params = {
            "ids": [job_id],
            "tokens": [self.tokens.get(job_id, uuid.uuid4())],
            "outcomes": [outcome],
            "retry_in": [0.0],
            "errors": [None if outcome == "succeeded" else "E"],
            "error_types": [None if outcome == "succeeded" else "E"],
            "tracebacks": [None],
            "snooze_caps": [100],
            "worker": "w",
        }
        return bool(self.db.execute(self.q.finish_jobs, params).fetchall())

    def release(self, job_id: int) -> bool:
        params = {
            "ids": [job_id],
            "tokens": [self.tokens.get(job_id, uuid.uuid4())],
            "worker": "w",
            "channel": self.app.channel,
            "reason": "test",
        }
        return bool(self.db.execute(self.q.release_jobs, params).fetchall())

    def admin(self, job_id: int, action: str) -> bool:
        try:
            getattr(self.app.jobs, action)(job_id)
        except cronbase.JobStateError:
            return False
        return True

    def new_child(self) -> int:
        """A job waiting for a parent of its own, each in a queue of its own."""
        parent = self.new_job()
        queue = f"q{uuid.uuid4().hex[:8]}"
        child = self.task.configure(queue=queue, after=[parent]).defer()
        self.parents[child] = parent
        return child

    def parent_ends(self, job_id: int, outcome: str) -> bool:
        """Whether the parent's end moved the job (what the trigger did to it)."""
        parent = self.parents.get(job_id)
        before = self.status(job_id)
        if parent is None or not (self.claim(parent) and self.finish(parent, outcome)):
            return False
        return self.status(job_id) is not before

    def parent_retried(self, job_id: int) -> bool:
        parent = self.parents.get(job_id)
        before = self.status(job_id)
        return (
            parent is not None and self.admin(parent, "retry") and self.status(job_id) is not before
        )

    def job_in(self, status: JobStatus) -> int:
        if status in (S.PENDING, S.CANCELLED):
            # Cancelled: by its parent's death, which a retry of the parent undoes.
            job_id = self.new_child()
            if status is S.CANCELLED:
                assert self.parent_ends(job_id, "dead")
            assert self.status(job_id) is status
            return job_id
        job_id = self.new_job()
        if status is not S.QUEUED:
            assert self.claim(job_id)
            if status is not S.RUNNING:
                assert self.finish(job_id, status.value)
        assert self.status(job_id) is status
        return job_id


ACTIONS: dict[str, Callable[[Driver, int], bool]] = {
    "claim": Driver.claim,
    "finish succeeded": lambda d, j: d.finish(j, "succeeded"),
    "finish failed": lambda d, j: d.finish(j, "failed"),
    "finish dead": lambda d, j: d.finish(j, "dead"),
    "finish snoozed": lambda d, j: d.finish(j, "snoozed"),
    "finish cancelled": lambda d, j: d.finish(j, "cancelled"),
    "release": Driver.release,
    "cancel": lambda d, j: d.admin(j, "cancel"),
    "retry": lambda d, j: d.admin(j, "retry"),
    "parent succeeds": lambda d, j: d.parent_ends(j, "succeeded"),
    "parent dies": lambda d, j: d.parent_ends(j, "dead"),
    "parent retried": Driver.parent_retried,
}


def test_every_state_change_the_statements_make_is_an_edge_and_every_edge_is_made(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    driver = Driver(app, db)
    made: set[tuple[JobStatus, JobStatus, str]] = set()
    for old in JobStatus:
        for name, action in ACTIONS.items():
            job_id = driver.job_in(old)
            changed = action(driver, job_id)
            new = driver.status(job_id)
            if changed:
                assert (old, new) in TRANSITIONS, f"{name} moved a {old} job to {new}"
                made.add((old, new, name))
            else:
                assert new is old, f"{name} on a {old} job said nothing but moved it to {new}"
    assert {(old, new) for old, new, _ in made} == set(TRANSITIONS)
    # The operator's rules: a running job can be cancelled but not retried; only a worker
    # shutting down, or a handler's Snooze, hands it back to the queue.
    assert (S.RUNNING, S.CANCELLED, "cancel") in made
    assert (S.RUNNING, S.QUEUED, "finish snoozed") in made
    assert (S.RUNNING, S.CANCELLED, "finish cancelled") in made
    assert {name for old, _, name in made if old is S.RUNNING and name != "claim"} == {
        "finish succeeded",
        "finish failed",
        "finish dead",
        "finish snoozed",
        "finish cancelled",
        "release",
        "cancel",
    }


# -- which due job is claimed first --------------------------------------------------------------


def test_claims_take_lower_priority_first_then_earlier_run_at_then_lower_id(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def t(n: int) -> None: ...

    now: datetime = db.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    earlier, later = now - timedelta(minutes=2), now - timedelta(minutes=1)
    plan = [  # (n, priority, run_at)
        (0, 100, earlier),
        (1, 5, later),
        (2, 5, earlier),
        (3, -1, later),
        (4, 100, earlier),  # same priority and run_at as n=0: the lower id first
        (5, 5, earlier),
    ]
    ids = {n: t.configure(priority=p, run_at=at).defer(n=n) for n, p, at in plan}
    t.configure(priority=-100, delay=timedelta(hours=1)).defer(n=99)  # not due: never claimed
    cancelled = t.configure(priority=-100).defer(n=98)
    app.jobs.cancel(cancelled)

    order: list[list[int]] = []
    while rows := claim_rows(app, db, 2)[0]:
        assert len(rows) <= 2
        order.append(sorted(job.id for job in rows))
    by_id = {job_id: n for n, job_id in ids.items()}
    assert [[by_id[i] for i in batch] for batch in order] == [[2, 3], [1, 5], [0, 4]]


@pytest.mark.parametrize("limit", [1, 3])
def test_a_claim_takes_no_more_than_its_limit(
    app: cronbase.App, db: psycopg.Connection[Any], limit: int
) -> None:
    @app.task
    def t(n: int) -> None: ...

    t.defer_many([{"n": n} for n in range(5)])
    assert len(claim_rows(app, db, limit)[0]) == limit
    counts = dict(
        db.execute("SELECT status, count(*) FROM cronbase.jobs_all GROUP BY 1").fetchall()
    )
    assert counts == {"running": limit, "queued": 5 - limit}
