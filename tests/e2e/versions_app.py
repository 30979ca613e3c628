"""The app both releases run in the mixed-version test (test_two_versions.py): one task, written
with only the API the previous releases have too, that records each run in a table of its own.

``VERSIONS_SCHEMA`` is the cronbase schema; ``VERSIONS_RUNS`` the table of runs (job id, payload,
which code ran it: ``VERSIONS_CODE``, "previous" or "current").
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

import psycopg

import cronbase

SCHEMA = os.environ.get("VERSIONS_SCHEMA", "cronbase_versions")
RUNS = os.environ.get("VERSIONS_RUNS", "version_runs")
CODE = os.environ.get("VERSIONS_CODE", "current")
# Jobs numbered here wait, once their run is recorded, until the test lets them go: they are
# running under a worker for as long as the test needs (a deploy's migration, say). The test
# holds the advisory lock named by the runs table; a held job takes it shared, so all go at once.
HELD = range(900, 1000)

app = cronbase.App(schema=SCHEMA)


@app.task
def count(n: int) -> None:
    # Its own connection, committed at once: a second run of one job would leave a second row.
    with psycopg.connect(os.environ["CRONBASE_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {RUNS} (job_id, n, code, pid) VALUES (%s, %s, %s, %s)",
            [cronbase.current_job().id, n, CODE, os.getpid()],
        )
        if n in HELD:
            # Bounded: a test that never lets go fails this attempt (a second one shows).
            conn.execute("SET statement_timeout = '90s'")
            conn.execute("SELECT pg_advisory_xact_lock_shared(hashtext(%s))", [RUNS])
    # The first jobs (n < 1000, the ones waiting when a deploy starts) are slow enough that
    # their drain spans `cronbase migrate`; the others quick.
    time.sleep(0.04 if n < 1000 else 0.005)


def produce(
    start: int, count_of_jobs: int, batch: int, queue: str | None = None, delay: float = 0
) -> None:
    """Defer ``count_of_jobs`` jobs numbered from ``start``, one by one and in batches, to
    ``queue`` (None: the task's) and due ``delay`` seconds from now."""
    task: Any = count
    if queue is not None or delay:
        task = count.configure(queue=queue, delay=timedelta(seconds=delay) if delay else None)
    n = start
    while n < start + count_of_jobs:
        size = min(batch, start + count_of_jobs - n)
        if size == 1 or n % 2:
            task.defer(n=n)
            n += 1
        else:
            task.defer_many([{"n": i} for i in range(n, n + size)])
            n += size


if __name__ == "__main__":
    # A producer: python -m tests.e2e.versions_app SPEC..., each START:COUNT[:QUEUE[:DELAY]]
    # (DELAY in seconds), in batches of 20.
    import sys

    for spec in sys.argv[1:]:
        start, count_of_jobs, queue, delay = [*spec.split(":"), "", ""][:4]
        produce(int(start), int(count_of_jobs), 20, queue or None, float(delay or 0))
    app.close()
