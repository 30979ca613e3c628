"""Workflow workloads (``--only workflow``): what dependencies cost.

- fan-out/fan-in: ``group([noop.s(n=i) for i in range(10_000)]).then(total.s())`` deferred in
  one statement (enqueue time), drained by four burst workers of concurrency 100 (drain time,
  jobs/s), and the fan-in latency: the callback's start minus the last child's finish. Beside
  it the same 10,000 no-op jobs with no workflow (defer_many, the same workers): the cost of
  counting each child off its callback.
- chain: 200 no-op jobs in one chain, one worker: the median hop (a link's start minus its
  parent's finish), which is the claim loop's wake-up after the release.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg

import cronbase

from . import harness
from .workloads import Measurement, Settings

CHILDREN = 10_000
PROCS = 4
CONCURRENCY = 100
CHAIN = 200


def make_app(url: str) -> cronbase.App:
    app = cronbase.App(database_url=url)

    @app.task(name="noop")
    async def noop(n: int) -> int:
        return n

    @app.task(name="total")
    async def total(previous: list[int]) -> int:
        return len(previous)

    @app.task(name="link")
    async def link(previous: int | None = None) -> int:
        return (previous or 0) + 1

    return app


def _reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE cronbase.jobs, cronbase.jobs_history, cronbase.job_keys, cronbase.job_attempts, cronbase.workers CASCADE"
        )


def _analyze(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE cronbase.jobs")
        conn.execute("VACUUM ANALYZE cronbase.job_deps")


def drain_child(signal_ready: Callable[[], None], url: str, concurrency: int) -> None:
    app = make_app(url)
    signal_ready()
    app.run_worker(burst=True, concurrency=concurrency, install_signal_handlers=False)


def _scalar(url: str, query: str, params: tuple[Any, ...] = ()) -> Any:
    with psycopg.connect(url) as conn:
        row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def fan_in(url: str, s: Settings) -> list[Measurement]:
    _reset(url)
    with make_app(url) as app:
        workflow = cronbase.group([app.tasks["noop"].s(n=i) for i in range(CHILDREN)])
        started = time.perf_counter()
        callback = workflow.then(app.tasks["total"].s()).defer()
        enqueue = time.perf_counter() - started
    _analyze(url)
    result = harness.run_children(drain_child, [(url, CONCURRENCY)] * PROCS, s.drain_cap * 4)
    latency = _scalar(
        url,
        "SELECT extract(epoch FROM c.started_at - (SELECT max(finished_at) FROM cronbase.jobs_all"
        " WHERE task = 'noop'))::float8 FROM cronbase.jobs_all c WHERE c.id = %s",
        (callback,),
    )
    fired = _scalar(url, "SELECT result FROM cronbase.jobs_all WHERE id = %s", (callback,))
    done = harness.count(url, "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'succeeded'")
    config = f"group of {CHILDREN:,} no-op children then a callback, {PROCS} procs x {CONCURRENCY}"
    extra = {"done": done, "callback_result": fired, "capped": not result.finished}
    return [
        Measurement("workflow", "cronbase", config, enqueue, "s to defer", extra),
        Measurement("workflow", "cronbase", config, done / result.elapsed, "jobs/s", extra),
        Measurement("workflow", "cronbase", config, (latency or 0.0) * 1000, "ms fan-in latency"),
    ]


def plain(url: str, s: Settings) -> list[Measurement]:
    _reset(url)
    with make_app(url) as app:
        started = time.perf_counter()
        app.tasks["noop"].defer_many([{"n": i} for i in range(CHILDREN + 1)])
        enqueue = time.perf_counter() - started
    _analyze(url)
    result = harness.run_children(drain_child, [(url, CONCURRENCY)] * PROCS, s.drain_cap * 4)
    done = harness.count(url, "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'succeeded'")
    config = f"{CHILDREN + 1:,} no-op jobs, no workflow, {PROCS} procs x {CONCURRENCY}"
    extra = {"done": done, "capped": not result.finished}
    return [
        Measurement("workflow", "cronbase", config, enqueue, "s to defer", extra),
        Measurement("workflow", "cronbase", config, done / result.elapsed, "jobs/s", extra),
    ]


def chain(url: str, s: Settings) -> list[Measurement]:
    _reset(url)
    with make_app(url) as app:
        cronbase.chain([app.tasks["link"].s() for _ in range(CHAIN)]).defer()
    result = harness.run_children(drain_child, [(url, 10)], s.drain_cap * 4)
    hop = _scalar(
        url,
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM"
        " c.started_at - p.finished_at)) FROM cronbase.job_deps d"
        " JOIN cronbase.jobs c ON c.id = d.child JOIN cronbase.jobs p ON p.id = d.parent",
    )
    last = _scalar(url, "SELECT max(result::text::int) FROM cronbase.jobs_all WHERE task = 'link'")
    config = f"chain of {CHAIN} no-op links, 1 proc x 10"
    extra = {"last_result": last, "capped": not result.finished}
    return [
        Measurement("workflow", "cronbase", config, (hop or 0.0) * 1000, "ms median hop", extra)
    ]
