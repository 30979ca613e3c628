"""The app both releases run in the mixed-version test (test_two_versions.py): one task, written
with only the API the previous release has too, that records each run in a table of its own.

``VERSIONS_SCHEMA`` is the cronbase schema; ``VERSIONS_RUNS`` the table of runs (job id, payload,
which code ran it: ``VERSIONS_CODE``, "previous" or "current").
"""

from __future__ import annotations

import os
import time

import psycopg

import cronbase

SCHEMA = os.environ.get("VERSIONS_SCHEMA", "cronbase_versions")
RUNS = os.environ.get("VERSIONS_RUNS", "version_runs")
CODE = os.environ.get("VERSIONS_CODE", "current")

app = cronbase.App(schema=SCHEMA)


@app.task
def count(n: int) -> None:
    # Its own connection, committed at once: a second run of one job would leave a second row.
    with psycopg.connect(os.environ["CRONBASE_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {RUNS} (job_id, n, code, pid) VALUES (%s, %s, %s, %s)",
            [cronbase.current_job().id, n, CODE, os.getpid()],
        )
    # The first jobs (n < 1000, the ones waiting when a deploy starts) are slow enough that
    # their drain spans `cronbase migrate`; the others quick.
    time.sleep(0.04 if n < 1000 else 0.005)


def produce(start: int, count_of_jobs: int, batch: int) -> None:
    """Defer ``count_of_jobs`` jobs numbered from ``start``, one by one and in batches."""
    n = start
    while n < start + count_of_jobs:
        size = min(batch, start + count_of_jobs - n)
        if size == 1 or n % 2:
            count.defer(n=n)
            n += 1
        else:
            count.defer_many([{"n": i} for i in range(n, n + size)])
            n += size


if __name__ == "__main__":  # a producer: python -m tests.e2e.versions_app START COUNT BATCH
    import sys

    produce(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
    app.close()
