"""The fair task the fair-share tests run in worker processes: ``python -m tests.e2e.fair_app
--worker-id A [options]`` (options as tests/e2e/worker_app.py's).

Every execution writes a row of ``fair_executions`` with the database's clock_timestamp() when
its handler starts: the order of starts across all processes is the order the fleet served the
keys in.
"""

from __future__ import annotations

import os
import sys
import time

import cronbase
from tests.e2e.worker_app import main

FAIR_TABLE = """
CREATE TABLE IF NOT EXISTS fair_executions (
    id serial PRIMARY KEY, job_id bigint NOT NULL, tenant text NOT NULL, pid integer NOT NULL,
    start_at timestamptz NOT NULL DEFAULT clock_timestamp());
TRUNCATE fair_executions;
"""


def make_fair_app(database_url: str | None = None) -> cronbase.App:
    app = cronbase.App(database_url=database_url)

    @app.task(fair_key="{tenant}")
    def import_row(tenant: str, n: int, ms: int) -> None:
        job = cronbase.current_job()
        with app.pool().connection() as conn:
            conn.execute(
                "INSERT INTO fair_executions (job_id, tenant, pid) VALUES (%s, %s, %s)",
                (job.id, tenant, os.getpid()),
            )
        time.sleep(ms / 1000)

    return app


if __name__ == "__main__":
    main(sys.argv[1:], make_fair_app)
