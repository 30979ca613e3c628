"""The app the chaos tier's worker processes run: ``python -m tests.chaos.chaos_app --worker-id A``.

Every run of a handler leaves a row in ``chaos_runs`` (so re-runs are countable), and each job's
one side effect is a row in ``chaos_effects``, written inside ``app.effects.once(key)`` (or, for
``work_in_transaction``, in the job's own ``transaction()``). That table has no unique key: an
effect performed twice shows up twice. ``reconcile`` looks there, as
the example's mail log does, so an owner killed between its effect and ``finish_effect`` is not
taken for one that never acted. With ``CHAOS_SCHEDULE=1`` the app also declares a schedule that
fires every second with ``catch_up="all"``, so every slot of a window should become one job.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta
from typing import Any

import cronbase
from tests.e2e import worker_app

CHAOS_TABLES = """
CREATE TABLE IF NOT EXISTS chaos_runs (
    id bigserial PRIMARY KEY, job_id bigint NOT NULL, key text NOT NULL,
    attempt integer NOT NULL, pid integer NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS chaos_effects (
    id bigserial PRIMARY KEY, key text NOT NULL, job_id bigint NOT NULL,
    attempt integer NOT NULL, pid integer NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS chaos_effects_key_idx ON chaos_effects (key);
"""
# A killed worker's job comes back soon (short lease, quick retries), and no healthy job runs
# out of attempts while its effect waits to go stale.
LEASE = timedelta(seconds=3)
RETRY = cronbase.Backoff(base=timedelta(milliseconds=100), cap=timedelta(seconds=1), jitter=0)
MAX_ATTEMPTS = 200
# Longer than any pause a scenario causes (a SIGSTOP, a PostgreSQL restart): an owner that is
# alive but held up is never taken over, so a second effect would be a bug, not the documented
# limit of once(). An owner that died is taken over after it, asking reconcile first.
STALE_AFTER = timedelta(seconds=10)
SCHEDULE_KEY = "chaos-every-second"
# Of the healthy jobs, every TRANSACTION_EVERY-th is a work_in_transaction, the rest are work.
TRANSACTION_EVERY = 4
HEALTHY_TASKS = ["work", "work_in_transaction"]
# The worker options of every chaos worker (argv after them overrides).
WORKER_OPTIONS = [
    *("--concurrency", "8", "--poll-interval", "0.2", "--reap-interval", "0.2"),
    *("--shutdown-grace", "5"),
]


def job_key(n: int) -> str:
    return f"job:{n}"


def transaction_key(n: int) -> str:
    return f"tx:{n}"


def slot_key(slot: datetime) -> str:
    return f"slot:{slot.isoformat()}"


def make_app(
    database_url: str | None = None, *, schedule: bool = False, pooler: str | None = None
) -> cronbase.App:
    """The chaos tasks on an App (its database and pooler from the environment unless given)."""
    app = cronbase.App(database_url=database_url, pooler=pooler)

    def run_once(key: str) -> None:
        """Record this run, then perform the effect ``key`` once."""
        job = cronbase.current_job()
        with app.pool().connection() as conn:
            conn.execute(
                "INSERT INTO chaos_runs (job_id, key, attempt, pid) VALUES (%s, %s, %s, %s)",
                (job.id, key, job.attempt, os.getpid()),
            )
        with app.effects.once(key, stale_after=STALE_AFTER, reconcile=performed) as effect:
            if effect.done:
                return
            with app.pool().connection() as conn:
                row = conn.execute(
                    "INSERT INTO chaos_effects (key, job_id, attempt, pid) "
                    "VALUES (%s, %s, %s, %s) RETURNING id",
                    (key, job.id, job.attempt, os.getpid()),
                ).fetchone()
            assert row is not None
            effect.record(effect_id=row[0])

    def performed(key: str) -> dict[str, Any] | None:
        """Did the effect happen after all? The side table is the outside world's log."""
        with app.pool().connection() as conn:
            row = conn.execute(
                "SELECT id FROM chaos_effects WHERE key = %s ORDER BY id LIMIT 1", (key,)
            ).fetchone()
        return {"effect_id": row[0]} if row else None

    @app.task(lease=LEASE, retry=RETRY, max_attempts=MAX_ATTEMPTS)
    def work(n: int) -> None:
        """One healthy job: a run row, and its effect once."""
        run_once(job_key(n))

    @app.task(lease=LEASE, retry=RETRY, max_attempts=MAX_ATTEMPTS)
    def work_in_transaction(n: int) -> None:
        """A healthy job whose effect is a row written in the job's own transaction(), which
        commits it with the job's success: exactly once, or rolled back with a lost lease."""
        job = cronbase.current_job()
        key = transaction_key(n)
        with app.pool().connection() as conn:
            conn.execute(
                "INSERT INTO chaos_runs (job_id, key, attempt, pid) VALUES (%s, %s, %s, %s)",
                (job.id, key, job.attempt, os.getpid()),
            )
        with job.transaction() as conn:
            conn.execute(
                "INSERT INTO chaos_effects (key, job_id, attempt, pid) VALUES (%s, %s, %s, %s)",
                (key, job.id, job.attempt, os.getpid()),
            )

    @app.task(lease=LEASE, retry=RETRY, max_attempts=MAX_ATTEMPTS)
    def slot(scheduled_at: datetime) -> None:
        """One schedule slot's job: a run row, and the slot's effect once."""
        run_once(slot_key(scheduled_at))

    if schedule:
        app.periodic(cron="* * * * * *", key=SCHEDULE_KEY, catch_up="all")(slot)
    return app


def main(argv: list[str]) -> None:
    schedule = os.environ.get("CHAOS_SCHEDULE") == "1"
    worker_app.main([*WORKER_OPTIONS, *argv], make=lambda: make_app(schedule=schedule))


if __name__ == "__main__":
    main(sys.argv[1:])
