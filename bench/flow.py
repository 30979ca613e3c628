"""Flow-control workloads (``--only flow``): what a limit costs, and whether it held.

- keys: ``s.jobs`` jobs of 1 ms over 1,000 keys at ``key_concurrency=1``, four burst workers of
  concurrency 100; beside it the same jobs with no limit. Each key's jobs are enqueued together
  (key = n * 1000 // jobs), the hard order for a limited claim: the head of the queue is one
  full key after another. Each handler notes its start and end
  (``time.time()``, one clock for the machine's processes); the most handlers of one key that
  overlapped is reported (it must be 1).
- rate: 3,000 no-op jobs at ``rate_limit="100/second"``, four burst workers; starts per second
  over the run, and the most claims (``jobs.started_at``, what the start log records) in any
  one-second window (it must be at most 100).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import psycopg

import cronbase

from . import harness
from .workloads import Measurement, Settings

KEYS = 1_000
PROCS = 4
CONCURRENCY = 100
RATE_JOBS = 3_000

_spans: list[tuple[int, float, float]] = []


def make_app(url: str) -> cronbase.App:
    app = cronbase.App(database_url=url)

    @app.task(name="keyed", concurrency_key="{key}", key_concurrency=1)
    async def keyed(key: int, n: int) -> None:
        start = time.time()
        await asyncio.sleep(0.001)
        _spans.append((key, start, time.time()))

    @app.task(name="free")
    async def free(key: int, n: int) -> None:
        start = time.time()
        await asyncio.sleep(0.001)
        _spans.append((key, start, time.time()))

    @app.task(name="rated", rate_limit="100/second")
    async def rated(n: int) -> None:
        return None

    return app


def _reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE cronbase.jobs, cronbase.jobs_history, cronbase.job_keys, cronbase.job_attempts, cronbase.workers, cronbase.flow_limits CASCADE"
        )


def _preload(url: str, task: str, payloads: list[dict[str, Any]]) -> None:
    with make_app(url) as app:
        for first in range(0, len(payloads), 5000):
            app.tasks[task].defer_many(payloads[first : first + 5000])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE cronbase.jobs")


def drain_child(signal_ready: Callable[[], None], url: str) -> list[tuple[int, float, float]]:
    app = make_app(url)
    signal_ready()
    app.run_worker(burst=True, concurrency=CONCURRENCY, install_signal_handlers=False)
    return list(_spans)


def most_overlapping(spans: list[tuple[int, float, float]]) -> int:
    """The most spans of one key open at once (an end before a start on a tie)."""
    events = sorted(
        [(key, start, 1) for key, start, _ in spans] + [(key, end, -1) for key, _, end in spans]
    )
    most = running = 0
    current = None
    for key, _, step in events:
        if key != current:
            current, running = key, 0
        running += step
        most = max(most, running)
    return most


def keys(url: str, s: Settings, task: str) -> list[Measurement]:
    _reset(url)
    _preload(url, task, [{"key": n * KEYS // s.jobs, "n": n} for n in range(s.jobs)])
    result = harness.run_children(drain_child, [(url,)] * PROCS, s.drain_cap * 4)
    spans = [span for report in result.reports for span in report]
    done = harness.count(url, "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'succeeded'")
    label = "key_concurrency=1" if task == "keyed" else "no limit"
    config = f"{s.jobs:,} jobs of 1 ms over {KEYS:,} keys, {label}, {PROCS} procs x {CONCURRENCY}"
    extra = {"done": done, "capped": not result.finished}
    return [
        Measurement("flow", "cronbase", config, done / result.elapsed, "jobs/s", extra),
        Measurement("flow", "cronbase", config, most_overlapping(spans), "most running per key"),
    ]


def rate(url: str, s: Settings) -> list[Measurement]:
    _reset(url)
    _preload(url, "rated", [{"n": n} for n in range(RATE_JOBS)])
    result = harness.run_children(drain_child, [(url,)] * PROCS, RATE_JOBS / 100 + 30)
    with psycopg.connect(url) as conn:
        row = conn.execute(
            """
            SELECT count(*), extract(epoch FROM max(started_at) - min(started_at))::float8,
                   (SELECT max(n) FROM (
                       SELECT count(*) OVER (ORDER BY started_at RANGE BETWEEN CURRENT ROW
                                             AND interval '1 second' - interval '1 microsecond'
                                             FOLLOWING) AS n
                       FROM cronbase.jobs_all WHERE task = 'rated') w)
            FROM cronbase.jobs_all WHERE task = 'rated' AND status = 'succeeded'
            """
        ).fetchone()
    assert row is not None
    done, span, most = row
    config = f"{RATE_JOBS:,} jobs at rate_limit=100/second, {PROCS} procs x {CONCURRENCY}"
    # Starts per second over the whole run: the first window's starts come at once, so the
    # run lasts span + up to one period.
    return [
        Measurement(
            "flow",
            "cronbase",
            config,
            done / (span + 1.0) if span is not None else 0.0,
            "starts/s",
            {"done": done, "capped": not result.finished},
        ),
        Measurement("flow", "cronbase", config, float(most or 0), "most starts in any 1 s"),
    ]
