"""Workload 4: cronbase's claim on a table that has lived a while.

1,000,000 finished rows (in the history, where finished jobs live since migration 0015) and
100,000 future-dated rows sit beside the due jobs. The claim must
stay an index walk over ``jobs_due_idx`` (waiting rows only) that stops after ``limit`` rows, so
its latency should not move; the drain rate neither. Both are measured on the empty table first.
"""

from __future__ import annotations

import time

import psycopg

import cronbase

from . import harness
from .subjects import cronbase_sql, cronbase_subject
from .workloads import Measurement, Settings, drain

FILLER = """
INSERT INTO cronbase.jobs_history (id, task, queue, payload, status, attempts, run_at,
                                   started_at, finished_at, created_at, updated_at, progress)
SELECT nextval('cronbase.jobs_id_seq'), 'old', 'default', jsonb_build_object('n', i), 'succeeded', 1,
       now() - interval '2 days', now() - interval '2 days', now() - interval '2 days',
       now() - interval '2 days', now() - interval '2 days', 100
FROM generate_series(1, %(finished)s) AS i
"""
FUTURE = """
INSERT INTO cronbase.jobs (task, queue, payload, run_at)
SELECT 'noop', 'default', jsonb_build_object('n', i), now() + interval '1 day' + i * interval '1 s'
FROM generate_series(1, %(future)s) AS i
"""


def fill(url: str, s: Settings) -> float:
    """Add the finished and future rows; returns seconds taken (not part of any figure)."""
    start = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(FILLER, {"finished": s.big_finished})
        conn.execute(FUTURE, {"future": s.big_future})
        conn.execute("VACUUM ANALYZE cronbase.jobs")
    return time.perf_counter() - start


def clear_due(url: str) -> None:
    """Remove what a measurement left (due and drained jobs), keep the filler."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM cronbase.jobs WHERE task = 'noop' AND run_at < now() + '1 hour'")
        conn.execute("TRUNCATE cronbase.job_attempts, cronbase.workers")
        conn.execute("DELETE FROM cronbase.jobs_history WHERE task = 'noop'")
        conn.execute("VACUUM ANALYZE cronbase.jobs")


def claim_latency(url: str, s: Settings, batch: int) -> dict[str, float]:
    """Time ``claim_jobs`` (the worker's statement and parameters) alone, each its own commit.

    Claimed jobs are then written succeeded (``claim_jobs`` with limit 0 carrying them, the
    worker's fallback), so the index keeps its shape; only the claim is timed.
    """
    app = cronbase.App(database_url=url)
    q = app.queries
    cronbase_subject.preload(url, s.claim_samples * batch + batch)
    times: list[float] = []
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(s.claim_samples):
            start = time.perf_counter()
            rows = cronbase_sql.claim(conn, q, batch, "bench", [])[0]
            times.append(time.perf_counter() - start)
            cronbase_sql.succeed(conn, q, rows, "bench")
    return {p: harness.percentile(times, q_) * 1000 for p, q_ in (("p50", 50), ("p95", 95))}


def measure(url: str, s: Settings, table: str) -> list[Measurement]:
    out = []
    for batch in (1, 100):
        clear_due(url)
        lat = claim_latency(url, s, batch)
        for p, value in lat.items():
            out.append(
                Measurement(
                    "big table", "cronbase", f"claim {p}, limit {batch}, {table}", value, "ms"
                )
            )
    clear_due(url)
    m = drain(
        cronbase_subject, url, s, 100, 1, f"drain, concurrency 100, {table}", batch=100, reset=False
    )
    m.workload = "big table"
    out.append(m)
    return out
