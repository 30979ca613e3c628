"""The Python worker of test_sql_worker's cross-language test, beside examples/node/worker.mjs:
``python -m tests.integration.sql_worker_app WORKER_ID`` (database: CRONBASE_DATABASE_URL).

Its handler writes its effect in the transaction that completes the job (``transaction()``), and
a job deferred with ``block`` marks that it holds the job, then waits for the test's flag: the
test kills the process while it holds it, knowing so from the database, not from the clock.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from datetime import timedelta

import cronbase

# How often a blocked handler looks for the flag (a row the test inserts).
FLAG_POLL_SECONDS = 0.05

SETUP = """
CREATE TABLE IF NOT EXISTS sql_worker_effects (
    job_id bigint NOT NULL, attempt integer NOT NULL, lang text NOT NULL, worker text NOT NULL);
CREATE TABLE IF NOT EXISTS sql_worker_holds (
    job_id bigint NOT NULL, attempt integer NOT NULL, worker text NOT NULL);
CREATE TABLE IF NOT EXISTS sql_worker_flags (name text PRIMARY KEY);
TRUNCATE sql_worker_effects, sql_worker_holds, sql_worker_flags;
"""


def make_app(database_url: str | None = None) -> cronbase.App:
    app = cronbase.App(database_url=database_url)

    def is_flag_set() -> bool:
        with app.pool().connection() as conn:
            found = conn.execute("SELECT FROM sql_worker_flags WHERE name = 'go'").fetchone()
        return found is not None

    @app.task(name="py_work", queue="mixed")
    def py_work(n: int, block: bool = False) -> None:
        job = cronbase.current_job()
        worker = sys.argv[1]
        if block:
            with app.pool().connection() as conn:
                conn.execute(
                    "INSERT INTO sql_worker_holds VALUES (%s, %s, %s)",
                    (job.id, job.attempt, worker),
                )
            while not is_flag_set():
                threading.Event().wait(FLAG_POLL_SECONDS)
        # The effect and the success in one transaction: an attempt that lost its lease writes
        # neither (the fence), one killed before COMMIT neither.
        with job.transaction() as conn:
            conn.execute(
                "INSERT INTO sql_worker_effects VALUES (%s, %s, 'python', %s)",
                (job.id, job.attempt, worker),
            )

    return app


def main(worker_id: str) -> None:
    app = make_app()
    worker = app.worker(
        worker_id=worker_id,
        queues=["mixed"],
        concurrency=4,
        poll_interval=timedelta(seconds=0.2),
        # Expired leases (the killed workers', Node's included) taken back at once.
        reap_interval=timedelta(seconds=0.2),
        schedule=False,
        retention=None,
    )
    asyncio.run(worker.run())
    app.close()


if __name__ == "__main__":
    main(sys.argv[1])
