"""The limited tasks the flow tests run in worker processes: ``python -m tests.e2e.flow_app
--worker-id A [options]`` (options as tests/e2e/worker_app.py's).

Every execution writes a row of ``flow_executions`` when its handler starts and stamps its end,
both with the database's clock_timestamp(): the interval lies inside the job's slot (claimed
before, finished after), so overlapping intervals beyond a limit prove an overrun.
"""

from __future__ import annotations

import os
import sys
import time

import cronbase
from tests.e2e.worker_app import main

FLOW_TABLE = """
CREATE TABLE IF NOT EXISTS flow_executions (
    id serial PRIMARY KEY, job_id bigint NOT NULL, task text NOT NULL, queue text NOT NULL,
    key text, pid integer NOT NULL,
    start_at timestamptz NOT NULL DEFAULT clock_timestamp(), end_at timestamptz);
TRUNCATE flow_executions;
"""


def make_flow_app(database_url: str | None = None) -> cronbase.App:
    app = cronbase.App(database_url=database_url)

    def run(key: object, ms: int) -> None:
        job = cronbase.current_job()
        with app.pool().connection() as conn:
            row = conn.execute(
                "INSERT INTO flow_executions (job_id, task, queue, key, pid) "
                "VALUES (%s, %s, %s, %s, %s) RETURNING id",
                (job.id, job.task, job.queue, None if key is None else str(key), os.getpid()),
            ).fetchone()
        time.sleep(ms / 1000)
        with app.pool().connection() as conn:
            conn.execute(
                "UPDATE flow_executions SET end_at = clock_timestamp() WHERE id = %s",
                (row[0] if row else None,),
            )

    @app.task(concurrency_key="tenant:{tenant}", key_concurrency=2)
    def per_tenant(tenant: int, ms: int) -> None:
        run(tenant, ms)

    @app.task(concurrency_key="{key}", key_concurrency=1)
    def one_per_key(key: str, ms: int) -> None:
        run(key, ms)

    @app.task(global_concurrency=3)
    def three_at_a_time(n: int, ms: int) -> None:
        run(None, ms)

    @app.task(queue="narrow")
    def in_narrow_queue(n: int, ms: int) -> None:
        run(None, ms)

    @app.task(queue="paced")
    def in_paced_queue(n: int, ms: int) -> None:
        run(None, ms)

    @app.task(rate_limit="20/second")
    def rated(n: int, ms: int) -> None:
        run(None, ms)

    @app.task(concurrency_key="{key}", rate_limit="5/second")
    def rated_per_key(key: str, ms: int) -> None:
        run(key, ms)

    @app.task
    def unlimited(n: int, ms: int) -> None:
        run(None, ms)

    return app


if __name__ == "__main__":
    main(sys.argv[1:], make_flow_app)
