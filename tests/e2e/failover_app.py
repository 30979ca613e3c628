"""The app the failover test's worker processes run: ``python -m tests.e2e.failover_app --worker-id A``.

One task, ``deliver(n)``, in three steps:

1. it records each run in ``failover_runs`` (a job run twice shows up twice);
2. it performs its effect through ``app.effects.once("failover:<n>")``: a line appended to
   ``deliveries.log`` in ``FAILOVER_TEST_DIR``, the stand-in for an external system (an email
   sent). Outside the database on purpose: the file keeps every delivery whatever happens to the
   primary, and a delivery cannot be half-known (a write to the failing database can commit on
   the replica yet raise in the handler; such an effect belongs in step 3). ``reconcile`` reads
   the file, as a real app asks its mail provider's log;
3. it writes one row to ``failover_commits`` in ``current_job().transaction()``, which commits
   the row and the job's success together: exactly once, on this database.

The database is ``CRONBASE_DATABASE_URL``; the test builds the same app with :func:`make_app`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import cronbase
from tests.e2e import worker_app

# The pools' give-up (db/pool.py) is a debug line of its own logger: the failover test waits
# for it in these processes' logs.
logging.getLogger("cronbase.pool").setLevel(logging.DEBUG)

TABLES = """
CREATE TABLE IF NOT EXISTS failover_runs (
    id serial PRIMARY KEY, job_id bigint NOT NULL, attempt integer NOT NULL, n integer NOT NULL,
    pid integer NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS failover_commits (
    id serial PRIMARY KEY, job_id bigint NOT NULL, attempt integer NOT NULL, n integer NOT NULL);
TRUNCATE failover_runs, failover_commits;
"""
# A retry comes within a second: an attempt that met the database down, or another owner's
# effect in progress, tries again soon (and many times: EffectInProgress lasts STALE_AFTER).
RETRY = cronbase.Backoff(base=timedelta(milliseconds=100), cap=timedelta(seconds=1), jitter=0)
MAX_ATTEMPTS = 200
# Renewed every ~3 s, so a failover of a few seconds keeps its leases; a claim whose answer was
# lost with the old primary (running on the new one, held by nobody) is reaped within seconds.
LEASE = timedelta(seconds=10)
# An owner delivers right after entering once() (no database call in between), so no one takes
# over an effect whose owner is about to deliver; an effect left 'processing' by the failover
# (the final write failed, or the entry committed but its answer was lost) is reconciled or
# taken over within the test.
STALE_AFTER = timedelta(seconds=10)


def effect_key(n: int) -> str:
    return f"failover:{n}"


DELIVERIES = "deliveries.log"


def deliveries_file() -> Path:
    return Path(os.environ["FAILOVER_TEST_DIR"]) / DELIVERIES


def deliveries(path: Path) -> list[tuple[str, int, int, int]]:
    """(key, job id, attempt, pid) of every delivery, in order."""
    if not path.exists():
        return []
    rows = []
    # Whole lines only: a reader may see another process's line half written.
    for line in path.read_text().split("\n")[:-1]:
        key, job_id, attempt, pid = line.split()
        rows.append((key, int(job_id), int(attempt), int(pid)))
    return rows


def delivery_counts(path: Path) -> Counter[str]:
    return Counter(key for key, *_ in deliveries(path))


def make_app(database_url: str | None = None) -> cronbase.App:
    """The test task on an App (its database from the environment unless given)."""
    app = cronbase.App(database_url=database_url)

    def delivered(key: str) -> dict[str, Any] | None:
        """reconcile: the delivery's record, if the 'external system' has one."""
        for found, job_id, attempt, _ in deliveries(deliveries_file()):
            if found == key:
                return {"job_id": job_id, "attempt": attempt}
        return None

    def deliver_effect(key: str, job: cronbase.JobContext) -> None:
        line = f"{key} {job.id} {job.attempt} {os.getpid()}\n".encode()
        # One write on an O_APPEND descriptor: lines of concurrent writers never interleave.
        fd = os.open(deliveries_file(), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    @app.task(retry=RETRY, max_attempts=MAX_ATTEMPTS, lease=LEASE)
    def deliver(n: int) -> None:
        job = cronbase.current_job()
        with app.pool().connection() as conn:
            conn.execute(
                "INSERT INTO failover_runs (job_id, attempt, n, pid) VALUES (%s, %s, %s, %s)",
                (job.id, job.attempt, n, os.getpid()),
            )
        key = effect_key(n)
        with app.effects.once(key, stale_after=STALE_AFTER, reconcile=delivered) as effect:
            if not effect.done:
                deliver_effect(key, job)
                effect.record(job_id=job.id, attempt=job.attempt)
        with job.transaction() as conn:
            conn.execute(
                "INSERT INTO failover_commits (job_id, attempt, n) VALUES (%s, %s, %s)",
                (job.id, job.attempt, n),
            )

    return app


def main(argv: list[str]) -> None:
    # worker_app's worker, on this app, quick to notice work and expired leases.
    quick = ["--concurrency", "4", "--poll-interval", "0.2", "--reap-interval", "0.5"]
    worker_app.main([*quick, *argv], make=make_app)


if __name__ == "__main__":
    main(sys.argv[1:])
