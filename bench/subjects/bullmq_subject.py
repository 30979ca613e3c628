"""BullMQ for Python (PyPI ``bullmq`` 3.4) on its PostgreSQL backend, as its docs drive it:
``Queue(name, {"backend": "postgres", "connection": url})``, ``queue.add()`` / ``queue.addBulk()``,
``Worker(name, processor, {"backend": "postgres", "connection": url, "concurrency": N})``.

The backend keeps its tables in the ``bullmq`` schema (``job``, ``event``, ...) and runs each
operation as a PL/pgSQL function over one psycopg connection per Queue or Worker, serialized by
a lock (``backends/postgres_connection.py``); a worker's LISTEN waits use a second connection.
A worker claims one job per ``move_to_active`` call, with up to ``concurrency`` calls and jobs
in flight, so its "batch" is 1. It has no burst mode: a drain process closes its worker once no
job of the queue is waiting or active, which it checks every 20 ms on a connection of its own
with an ``EXISTS`` over BullMQ's partial indexes (``queue.getJobCounts()`` counts every row of
the queue, a scan of 20,000 rows each time, on the connection the Queue shares with nothing but
still a cost to the server). It closes with ``force=True``: nothing is left to run, and a
graceful close can wait out a claim call that went idle on LISTEN for ``drainDelay`` (5 s)
after the close began. Finished jobs stay in ``job`` as ``completed`` (``removeOnComplete``
defaults to off), as cronbase keeps its succeeded rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import psycopg
from bullmq import Queue, Worker

from .. import harness

NAME = "BullMQ (PostgreSQL)"
QUEUE = "bench"
SCHEMA = "bullmq"
DRAIN_POLL = 0.02  # seconds between a drain process's "anything left?" checks
# Anything of the queue still to run (BullMQ's partial indexes on waiting and active jobs).
LEFT = "SELECT EXISTS (SELECT FROM bullmq.job WHERE queue = %s AND state IN ('waiting', 'active'))"


def _opts(url: str, **more: Any) -> dict[str, Any]:
    return {"backend": "postgres", "connection": url, **more}


def _sync(coro_fn: Callable[[], Any]) -> Any:
    return asyncio.run(coro_fn())


def setup(url: str) -> None:
    """BullMQ migrates its schema when a Queue first connects."""

    async def go() -> None:
        queue = Queue(QUEUE, _opts(url))
        await queue.backend.waitUntilReady()
        await queue.close()

    _sync(go)


def reset(url: str) -> None:
    """Empty every table of the schema but the migration ledger (and the queue's meta)."""
    with psycopg.connect(url, autocommit=True) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s"
                " AND tablename NOT IN ('migration', 'meta')",
                (SCHEMA,),
            )
        ]
        conn.execute("TRUNCATE " + ", ".join(f'{SCHEMA}."{n}"' for n in names) + " CASCADE")


def enqueue_single(url: str, n: int) -> float:
    """``await queue.add(name, data)`` per job, one transaction each."""

    async def go() -> float:
        queue = Queue(QUEUE, _opts(url))
        await queue.add("noop", {"n": -1})  # connects and migrates outside the clock
        start = time.perf_counter()
        for i in range(n):
            await queue.add("noop", {"n": i})
        seconds = time.perf_counter() - start
        await queue.close()
        return seconds

    return float(_sync(go))


def _bulk(first: int, k: int) -> list[dict[str, Any]]:
    return [{"name": "noop", "data": {"n": i}} for i in range(first, first + k)]


def enqueue_bulk(url: str, n: int, chunk: int) -> float:
    """``await queue.addBulk([...])``, ``chunk`` jobs per call."""

    async def go() -> float:
        queue = Queue(QUEUE, _opts(url))
        await queue.backend.waitUntilReady()
        start = time.perf_counter()
        for first in range(0, n, chunk):
            await queue.addBulk(_bulk(first, min(n, first + chunk) - first))
        seconds = time.perf_counter() - start
        await queue.close()
        return seconds

    return float(_sync(go))


def preload(url: str, n: int) -> None:
    async def go() -> None:
        queue = Queue(QUEUE, _opts(url))
        for first in range(0, n, 5000):
            await queue.addBulk(_bulk(first, min(n, first + 5000) - first))
        await queue.close()

    _sync(go)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {SCHEMA}.job")


def count_done(url: str) -> int:
    return harness.count(
        url,
        f"SELECT count(*) FROM {SCHEMA}.job WHERE state = 'completed' AND name = 'noop'",  # noqa: S608
    )


async def _noop(job: Any, token: str) -> None:
    return None


def drain_child(signal_ready: Callable[[], None], url: str, concurrency: int) -> int:
    """A worker with ``concurrency`` jobs in flight, closed once nothing is waiting or active."""

    async def go() -> None:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await asyncio.to_thread(signal_ready)
            worker = Worker(QUEUE, _noop, _opts(url, concurrency=concurrency))
            while True:
                await asyncio.sleep(DRAIN_POLL)
                row = await (await conn.execute(LEFT, (QUEUE,))).fetchone()
                if row is not None and not row[0]:
                    break
            await worker.close(force=True)

    _sync(go)
    return 0


def latency_child(
    signal_ready: Callable[[], None], url: str, expected: int, timeout: float
) -> list[float]:
    """A worker (concurrency 1, BullMQ's default), idle and listening, closed once ``expected``
    jobs ran."""
    latencies: list[float] = []

    async def go() -> None:
        all_ran = asyncio.Event()

        async def ping(job: Any, token: str) -> None:
            latencies.append(time.time() - job.data["t"])
            if len(latencies) >= expected:
                all_ran.set()

        worker = Worker(QUEUE, ping, _opts(url))
        # No readiness signal: give it time to connect, LISTEN and settle into its wait.
        await asyncio.sleep(1.0)
        await asyncio.to_thread(signal_ready)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_ran.wait(), timeout)
        await worker.close()

    _sync(go)
    return latencies


def latency_produce(url: str, n: int, rate: float) -> None:
    from ..harness import paced_async

    async def go() -> None:
        queue = Queue(QUEUE, _opts(url))
        await queue.backend.waitUntilReady()

        async def enqueue(t: float) -> None:
            await queue.add("ping", {"t": t})

        await paced_async(n, rate, enqueue)
        await queue.close()

    _sync(go)
