"""Fair-share workloads (``--only fairness``): what a fair_key buys a small tenant, and what it
costs the drain.

- starvation: tenant a defers ``s.fair_jobs`` no-op jobs (100,000 by default), then tenant b
  defers 100; burst workers of concurrency 4 (1 and 2 processes) drain everything. Reported:
  seconds from the start of the drain until b's last handler returned, with
  ``@app.task(fair_key="{tenant}")`` and with a plain task (FIFO: b waits for a's backlog), and
  each drain's jobs/s; their ratio is what the fair claim costs against the plain one.
- keys: ``s.jobs`` no-op jobs over 1,000 keys (each key's jobs enqueued together), one burst
  worker of the default concurrency (10): jobs/s fair beside plain. The fair claim's skip scan
  visits every key with waiting jobs once per claim, so this is its expensive case.

Handlers note ``time.monotonic()`` as they return (system-wide on Linux, as the harness's clock).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg

import cronbase

from . import harness
from .workloads import Measurement, Settings

B_JOBS = 100
CONCURRENCY = 4
KEYS = 1_000
KEYS_CONCURRENCY = 10

_b_ends: list[float] = []


def make_app(url: str) -> cronbase.App:
    app = cronbase.App(database_url=url)

    @app.task(name="fair", fair_key="{tenant}")
    async def fair(tenant: str, n: int) -> None:
        if tenant == "b":
            _b_ends.append(time.monotonic())

    @app.task(name="fifo")
    async def fifo(tenant: str, n: int) -> None:
        if tenant == "b":
            _b_ends.append(time.monotonic())

    return app


def _reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE cronbase.jobs, cronbase.jobs_history, cronbase.job_keys, cronbase.job_attempts,"
            " cronbase.workers, cronbase.fair_keys CASCADE"
        )


def _preload(url: str, task: str, payloads: list[dict[str, Any]]) -> None:
    with make_app(url) as app:
        for first in range(0, len(payloads), 5000):
            app.tasks[task].defer_many(payloads[first : first + 5000])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE cronbase.jobs")


def drain_child(signal_ready: Callable[[], None], url: str, concurrency: int) -> list[float]:
    app = make_app(url)
    signal_ready()
    app.run_worker(burst=True, concurrency=concurrency, install_signal_handlers=False)
    return list(_b_ends)


def starvation(url: str, s: Settings, task: str, procs: int) -> list[Measurement]:
    _reset(url)
    payloads = [{"tenant": "a", "n": n} for n in range(s.fair_jobs)]
    _preload(url, task, payloads + [{"tenant": "b", "n": n} for n in range(B_JOBS)])
    cap = s.drain_cap * 20
    with harness.Children(drain_child, [(url, CONCURRENCY)] * procs) as children:
        children.wait_ready()
        children.go()
        result = children.collect(cap)
    b_ends = [end for report in result.reports for end in report]
    done = harness.count(url, "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'succeeded'")
    label = "fair_key" if task == "fair" else "plain FIFO"
    config = (
        f"a: {s.fair_jobs:,} jobs then b: {B_JOBS}, {label}, {procs} proc x concurrency "
        f"{CONCURRENCY}"
    )
    b_last = max(b_ends) - children.start if len(b_ends) == B_JOBS else cap
    extra = {"done": done, "capped": not result.finished, "b_done": len(b_ends)}
    return [
        Measurement("fairness", "cronbase", config, b_last, "s until b's last job", extra),
        Measurement("fairness", "cronbase", config, done / result.elapsed, "jobs/s", extra),
    ]


def keys(url: str, s: Settings, task: str) -> list[Measurement]:
    _reset(url)
    _preload(url, task, [{"tenant": str(n * KEYS // s.jobs), "n": n} for n in range(s.jobs)])
    result = harness.run_children(drain_child, [(url, KEYS_CONCURRENCY)], s.drain_cap * 4)
    done = harness.count(url, "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'succeeded'")
    label = "fair_key" if task == "fair" else "plain"
    config = f"{s.jobs:,} jobs over {KEYS:,} keys, {label}, 1 proc x concurrency {KEYS_CONCURRENCY}"
    extra = {"done": done, "capped": not result.finished}
    return [Measurement("fairness", "cronbase", config, done / result.elapsed, "jobs/s", extra)]
