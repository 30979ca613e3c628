"""The app the hosts tier's workers run: ``python -m tests.hosts.hosts_app --worker-id w1``.

Each handler leaves rows in ``hosts_runs`` (who ran what, when: the database's clock in ``at``,
the host's own in ``host_time``, so a test sees the skew it gave a host), and performs its
effects where a duplicate shows: ``hosts_effects`` has no unique key, a second effect is a second
row. ``work`` has two: one through ``app.effects.once(key)`` (on a connection of its own, as a
call to another system would be), one in the job's own ``transaction()`` (committed with the
job's success). An attempt refused because its lease is gone records ``refused`` when it can.

The database is ``CRONBASE_DATABASE_URL``; ``HOSTS_HOST`` names the host (namespace) the process
runs on; with ``HOSTS_SCHEDULE=1`` the app declares a schedule firing every second.
"""

from __future__ import annotations

import os
import sys
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import cronbase
from tests.e2e import worker_app

TABLES = """
CREATE TABLE IF NOT EXISTS hosts_runs (
    id bigserial PRIMARY KEY, job_id bigint NOT NULL, task text NOT NULL, attempt integer NOT NULL,
    host text NOT NULL, phase text NOT NULL, host_time timestamptz NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS hosts_effects (
    id bigserial PRIMARY KEY, key text NOT NULL, job_id bigint NOT NULL, attempt integer NOT NULL,
    host text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE INDEX IF NOT EXISTS hosts_effects_key_idx ON hosts_effects (key);
"""
# Quick retries: an attempt that met the network down, or an effect in progress elsewhere, runs
# again soon; never out of attempts within a test.
RETRY = cronbase.Backoff(base=timedelta(milliseconds=100), cap=timedelta(seconds=1), jitter=0)
MAX_ATTEMPTS = 200
# The tasks' lease (a test may give a job its own with configure(lease=...)).
LEASE = timedelta(seconds=3)
# Longer than any cut a test makes: an owner that is alive but cut off is never taken over while
# it may still perform its effect (once()'s documented bound; see README "Side effects, once").
STALE_AFTER = timedelta(seconds=120)
SCHEDULE_KEY = "hosts-every-second"
WORKER_OPTIONS = [
    *("--concurrency", "4", "--poll-interval", "0.2", "--reap-interval", "0.2"),
    *("--shutdown-grace", "5"),
]


def effect_key(n: int) -> str:
    return f"once:{n}"


def transaction_key(n: int) -> str:
    return f"tx:{n}"


def slot_key(slot: datetime) -> str:
    return f"slot:{slot.isoformat()}"


def make_app(database_url: str | None = None, *, schedule: bool = False) -> cronbase.App:
    """The tier's tasks on an App (its database from the environment unless given)."""
    app = cronbase.App(database_url=database_url)
    host = os.environ.get("HOSTS_HOST", "test")

    def record(phase: str) -> None:
        job = cronbase.current_job()
        with app.pool().connection() as conn:
            conn.execute(
                "INSERT INTO hosts_runs (job_id, task, attempt, host, phase, host_time) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (job.id, job.task, job.attempt, host, phase, datetime.now(UTC)),
            )

    def effect(key: str) -> int:
        job = cronbase.current_job()
        with app.pool().connection() as conn:
            row = conn.execute(
                "INSERT INTO hosts_effects (key, job_id, attempt, host) VALUES (%s, %s, %s, %s) "
                "RETURNING id",
                (key, job.id, job.attempt, host),
            ).fetchone()
        assert row is not None
        return int(row[0])

    def performed(key: str) -> dict[str, Any] | None:
        """reconcile: did the effect happen after all? The table is the outside world's log."""
        with app.pool().connection() as conn:
            row = conn.execute(
                "SELECT id FROM hosts_effects WHERE key = %s ORDER BY id LIMIT 1", (key,)
            ).fetchone()
        return {"effect_id": row[0]} if row else None

    @app.task(lease=LEASE, retry=RETRY, max_attempts=MAX_ATTEMPTS)
    def work(n: int, hold: float) -> None:
        """Work for ``hold`` seconds, then an effect through once() and one in transaction()."""
        record("started")
        # The handler's own work (a call that takes this long). Not time.sleep: under
        # libfaketime 0.9.10 with the monotonic clock left true (test_clock_skew.py), Python's
        # time.sleep (clock_nanosleep, TIMER_ABSTIME) fails with EINVAL; a timed wait works.
        threading.Event().wait(hold)
        job = cronbase.current_job()
        try:
            with app.effects.once(
                effect_key(n), stale_after=STALE_AFTER, reconcile=performed
            ) as once:
                if not once.done:
                    once.record(effect_id=effect(effect_key(n)))
            with job.transaction() as conn:
                conn.execute(
                    "INSERT INTO hosts_effects (key, job_id, attempt, host) VALUES (%s, %s, %s, %s)",
                    (transaction_key(n), job.id, job.attempt, host),
                )
        except cronbase.LeaseLostError:
            record("refused")
            raise

    @app.task(lease=LEASE, retry=RETRY, max_attempts=MAX_ATTEMPTS)
    def due(n: int) -> None:
        """A job deferred to run later: when it starts, by both clocks."""
        record("started")

    @app.task(lease=LEASE, retry=RETRY, max_attempts=MAX_ATTEMPTS)
    def spawn(n: int, delay: float) -> None:
        """Defer ``due(n)`` with a delay, from whichever host runs this (its clock may be off)."""
        record("started")
        due.configure(delay=timedelta(seconds=delay), idempotency_key=f"due:{n}").defer(n=n)

    @app.task(lease=LEASE, retry=RETRY, max_attempts=MAX_ATTEMPTS)
    def nap(n: int, seconds: float) -> None:
        """A durable sleep: suspended, then resumed on any host."""
        record("started")
        cronbase.current_job().sleep(timedelta(seconds=seconds))
        record("woke")

    @app.task(lease=LEASE, retry=RETRY, max_attempts=MAX_ATTEMPTS)
    def slot(scheduled_at: datetime) -> None:
        """One schedule slot's job: its effect once."""
        record("started")
        key = slot_key(scheduled_at)
        with app.effects.once(key, stale_after=STALE_AFTER, reconcile=performed) as once:
            if not once.done:
                once.record(effect_id=effect(key))

    if schedule:
        app.periodic(cron="* * * * * *", key=SCHEDULE_KEY, catch_up="all")(slot)
    return app


def main(argv: list[str]) -> None:
    schedule = os.environ.get("HOSTS_SCHEDULE") == "1"
    worker_app.main([*WORKER_OPTIONS, *argv], make=lambda: make_app(schedule=schedule))


if __name__ == "__main__":
    main(sys.argv[1:])
