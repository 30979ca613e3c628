"""The tasks of the restart tests: each records its run in the job's own transaction(), so a
record exists exactly when the job's success committed (a restart under it leaves none)."""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import cronbase
from tests.e2e import worker_app


def make_app(database_url: str | None = None) -> cronbase.App:
    app = cronbase.App(database_url=database_url)

    # A short lease: a claim whose reply a restart swallowed is reaped within seconds.
    @app.task(lease=timedelta(seconds=10))
    def record_in_transaction(n: int) -> None:
        job = cronbase.current_job()
        with job.transaction() as conn:
            conn.execute(
                "INSERT INTO test_executions (job_id, n, pid) VALUES (%s, %s, %s)",
                (job.id, n, os.getpid()),
            )

    return app


if __name__ == "__main__":
    worker_app.main(sys.argv[1:], make_app)
