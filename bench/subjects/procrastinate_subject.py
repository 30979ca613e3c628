"""procrastinate (PyPI), as its docs drive it: ``App(connector=PsycopgConnector(...))``,
``task.defer()`` / ``task.batch_defer()``, ``app.run_worker_async(concurrency=..., wait=False)``.
Async no-op tasks (its docs: concurrency is for async tasks). Drain configuration: concurrency.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import procrastinate
import psycopg

from .. import harness

NAME = "procrastinate"

_latencies: list[float] = []
_expected = [0]
_all_ran: asyncio.Event | None = None


def make_app(url: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop")
    async def noop(n: int) -> None:
        return None

    @app.task(name="ping")
    async def ping(t: float) -> None:
        _latencies.append(time.time() - t)
        if len(_latencies) >= _expected[0] and _all_ran is not None:
            _all_ran.set()

    return app


def setup(url: str) -> None:
    app = make_app(url)
    with app.open():
        app.schema_manager.apply_schema()


def reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_workers CASCADE"
        )


def enqueue_single(url: str, n: int) -> float:
    """``task.defer()`` per job from the sync API, one transaction each."""
    app = make_app(url)
    with app.open():
        noop = app.tasks["noop"]
        noop.defer(n=-1)  # the first call connects
        start = time.perf_counter()
        for i in range(n):
            noop.defer(n=i)
        return time.perf_counter() - start


def enqueue_bulk(url: str, n: int, chunk: int) -> float:
    """``task.batch_defer()``, ``chunk`` jobs per call."""
    app = make_app(url)
    with app.open():
        noop = app.tasks["noop"]
        noop.defer(n=-1)
        start = time.perf_counter()
        for first in range(0, n, chunk):
            noop.batch_defer(*({"n": i} for i in range(first, min(n, first + chunk))))
        return time.perf_counter() - start


def preload(url: str, n: int) -> None:
    app = make_app(url)
    with app.open():
        noop = app.tasks["noop"]
        for first in range(0, n, 5000):
            noop.batch_defer(*({"n": i} for i in range(first, min(n, first + 5000))))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE procrastinate_jobs")


def count_done(url: str) -> int:
    return harness.count(url, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")


def drain_child(signal_ready: Callable[[], None], url: str, concurrency: int) -> int:
    app = make_app(url)

    async def go() -> None:
        async with app.open_async():
            await asyncio.to_thread(signal_ready)
            await app.run_worker_async(
                concurrency=concurrency, wait=False, install_signal_handlers=False
            )

    asyncio.run(go())
    return 0


def latency_child(
    signal_ready: Callable[[], None], url: str, expected: int, timeout: float
) -> list[float]:
    app = make_app(url)
    _expected[0] = expected

    async def go() -> None:
        global _all_ran
        all_ran = _all_ran = asyncio.Event()
        async with app.open_async():
            running = asyncio.create_task(app.run_worker_async(install_signal_handlers=False))
            await asyncio.sleep(1.0)  # no readiness signal: let it LISTEN and settle
            await asyncio.to_thread(signal_ready)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_ran.wait(), timeout)
            running.cancel()  # procrastinate's documented graceful stop for an embedded worker
            with contextlib.suppress(asyncio.CancelledError):
                await running

    asyncio.run(go())
    return list(_latencies)


def latency_produce(url: str, n: int, rate: float) -> None:
    from ..harness import paced

    app = make_app(url)
    with app.open():
        ping = app.tasks["ping"]
        app.tasks["noop"].defer(n=-1)  # the first call connects
        paced(n, rate, lambda t: ping.defer(t=t))
