"""cronbase driven as a user drives it: ``App(database_url=...)``, ``@app.task``, ``defer`` /
``defer_many``, ``app.run_worker(burst=True, concurrency=...)`` and ``app.worker()``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import psycopg

import cronbase

from .. import harness

NAME = "cronbase"

_latencies: list[float] = []
_expected = 0
_worker: cronbase.Worker | None = None


def make_app(
    url: str | None,
) -> tuple[cronbase.App, cronbase.Task[..., Any], cronbase.Task[..., Any]]:
    app = cronbase.App(database_url=url)

    @app.task(name="noop")
    async def noop(n: int) -> None:
        return None

    @app.task(name="ping")
    async def ping(t: float) -> None:
        _latencies.append(time.time() - t)
        if len(_latencies) >= _expected and _worker is not None:
            _worker.stop()

    return app, noop, ping


def setup(url: str) -> None:
    cronbase.App(database_url=url).migrate()


def reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE cronbase.jobs, cronbase.jobs_history, cronbase.job_keys, cronbase.job_attempts, cronbase.workers CASCADE"
        )


def enqueue_single(url: str, n: int) -> float:
    """``task.defer()`` per job: one transaction each, from the sync API."""
    with make_app(url)[0] as app:
        noop = app.tasks["noop"]
        app.pool()  # opened outside the clock, as in a running application
        start = time.perf_counter()
        for i in range(n):
            noop.defer(n=i)
        return time.perf_counter() - start


def enqueue_bulk(url: str, n: int, chunk: int) -> float:
    """``task.defer_many()`` with ``chunk`` payloads per call."""
    with make_app(url)[0] as app:
        noop = app.tasks["noop"]
        app.pool()
        start = time.perf_counter()
        for first in range(0, n, chunk):
            noop.defer_many([{"n": i} for i in range(first, min(n, first + chunk))])
        return time.perf_counter() - start


def preload(url: str, n: int) -> None:
    with make_app(url)[0] as app:
        noop = app.tasks["noop"]
        for first in range(0, n, 5000):
            noop.defer_many([{"n": i} for i in range(first, min(n, first + 5000))])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE cronbase.jobs")


def count_done(url: str) -> int:
    return harness.count(
        url, "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'succeeded' AND task = 'noop'"
    )


def drain_child(signal_ready: Callable[[], None], url: str, concurrency: int) -> int:
    """A burst worker: runs what is due, returns when nothing is left.

    Started before the clock, as the peers connect before it: the worker checks the schema,
    opens its pool, registers and reaps, then waits for "go" before its first claim. Its stop
    (the last outcomes, unregistering, closing the pool) is timed, as the peers' is.
    """
    worker = make_app(url)[0].worker(
        burst=True, concurrency=concurrency, install_signal_handlers=False
    )
    claim_loop = worker._loop

    async def gated_loop() -> None:
        # In a thread, so the pool's background connections open while the worker waits.
        await asyncio.to_thread(signal_ready)
        await claim_loop()

    worker._loop = gated_loop  # type: ignore[method-assign]
    asyncio.run(worker.run())
    return 0


def latency_child(
    signal_ready: Callable[[], None], url: str, expected: int, timeout: float
) -> list[float]:
    """A long-running worker, idle and listening, stopped once ``expected`` jobs ran."""
    global _expected, _worker
    app = make_app(url)[0]
    _expected = expected
    worker = _worker = app.worker(install_signal_handlers=False, schedule=False, retention=None)

    async def main() -> None:
        running = asyncio.create_task(worker.run())
        await worker.started.wait()
        assert worker.notifier is not None
        await worker.notifier.listening.wait()
        await asyncio.to_thread(signal_ready)
        try:
            await asyncio.wait_for(asyncio.shield(running), timeout)
        except TimeoutError:
            worker.stop()
            await running

    asyncio.run(main())
    return list(_latencies)


def latency_produce(url: str, n: int, rate: float) -> None:
    from ..harness import paced

    with make_app(url)[0] as app:
        ping = app.tasks["ping"]
        app.pool()
        paced(n, rate, lambda t: ping.defer(t=t))
