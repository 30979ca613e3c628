"""pgqueuer (PyPI), as its README and its own benchmark tool drive it: asyncpg connections,
``Queries.enqueue`` (scalar for one job, lists for a batch), ``PgQueuer.run(batch_size=...,
mode=drain)``. Default durability (every table logged), async no-op entrypoints.

Drain configurations: ``(managers, batch_size)`` = PgQueuer instances per process (each on its
own connection, as pgqueuer's ``tools/benchmark.py --dequeue N`` does) and the dequeue batch.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable
from typing import Any

import asyncpg
from pgqueuer import AsyncpgDriver, PgQueuer, Queries
from pgqueuer.domain.types import QueueExecutionMode

NAME = "pgqueuer"
TABLES = "pgqueuer, pgqueuer_log, pgqueuer_statistics"


async def _connect(url: str) -> asyncpg.Connection:
    return await asyncpg.connect(dsn=url)


def _sync(coro_fn: Callable[[], Any]) -> Any:
    return asyncio.run(coro_fn())


def setup(url: str) -> None:
    async def go() -> None:
        conn = await _connect(url)
        try:
            await Queries(AsyncpgDriver(conn)).install()
        finally:
            await conn.close()

    _sync(go)


def reset(url: str) -> None:
    async def go() -> None:
        conn = await _connect(url)
        try:
            await conn.execute(f"TRUNCATE {TABLES}")
        finally:
            await conn.close()

    _sync(go)


def _payload(i: int) -> bytes:
    return str(i).encode()


def enqueue_single(url: str, n: int) -> float:
    """``await queries.enqueue(entrypoint, payload)`` per job, one transaction each."""

    async def go() -> float:
        conn = await _connect(url)
        try:
            queries = Queries(AsyncpgDriver(conn))
            start = time.perf_counter()
            for i in range(n):
                await queries.enqueue("noop", _payload(i), 0)
            return time.perf_counter() - start
        finally:
            await conn.close()

    return float(_sync(go))


def enqueue_bulk(url: str, n: int, chunk: int) -> float:
    """``await queries.enqueue([...], [...], [...])``, ``chunk`` jobs per call."""

    async def go() -> float:
        conn = await _connect(url)
        try:
            queries = Queries(AsyncpgDriver(conn))
            start = time.perf_counter()
            for first in range(0, n, chunk):
                k = min(n, first + chunk) - first
                await queries.enqueue(
                    ["noop"] * k, [_payload(i) for i in range(first, first + k)], [0] * k
                )
            return time.perf_counter() - start
        finally:
            await conn.close()

    return float(_sync(go))


def preload(url: str, n: int) -> None:
    async def go() -> None:
        conn = await _connect(url)
        try:
            queries = Queries(AsyncpgDriver(conn))
            for first in range(0, n, 5000):
                k = min(n, first + 5000) - first
                await queries.enqueue(
                    ["noop"] * k, [_payload(i) for i in range(first, first + k)], [0] * k
                )
            await conn.execute("VACUUM ANALYZE pgqueuer")
        finally:
            await conn.close()

    _sync(go)


def count_done(url: str) -> int:
    """Finished jobs leave the queue table (and are logged): done = successes logged."""

    async def go() -> int:
        conn = await _connect(url)
        try:
            return int(
                await conn.fetchval("SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'")
            )
        finally:
            await conn.close()

    return int(_sync(go))


def drain_child(signal_ready: Callable[[], None], url: str, config: tuple[int, int]) -> int:
    managers, batch_size = config

    async def go() -> None:
        conns = [await _connect(url) for _ in range(managers)]
        pgqs = [PgQueuer(AsyncpgDriver(conn)) for conn in conns]
        for pgq in pgqs:

            @pgq.entrypoint("noop")
            async def noop(job: Any) -> None:
                return None

        await asyncio.to_thread(signal_ready)
        await asyncio.gather(
            *(pgq.run(batch_size=batch_size, mode=QueueExecutionMode.drain) for pgq in pgqs)
        )
        for conn in conns:
            await conn.close()

    _sync(go)
    return 0


def latency_child(
    signal_ready: Callable[[], None], url: str, expected: int, timeout: float
) -> list[float]:
    latencies: list[float] = []

    async def go() -> None:
        conn = await _connect(url)
        pgq = PgQueuer(AsyncpgDriver(conn))

        @pgq.entrypoint("ping")
        async def ping(job: Any) -> None:
            (sent,) = struct.unpack("d", job.payload)
            latencies.append(time.time() - sent)
            if len(latencies) >= expected:
                pgq.shutdown.set()

        running = asyncio.create_task(pgq.run())
        # No readiness signal: give the manager time to LISTEN and settle into its wait.
        await asyncio.sleep(1.0)
        await asyncio.to_thread(signal_ready)
        try:
            await asyncio.wait_for(asyncio.shield(running), timeout)
        except TimeoutError:
            pgq.shutdown.set()
            await running
        await conn.close()

    _sync(go)
    return latencies


def latency_produce(url: str, n: int, rate: float) -> None:
    from ..harness import paced_async

    async def go() -> None:
        conn = await _connect(url)
        queries = Queries(AsyncpgDriver(conn))

        async def enqueue(t: float) -> None:
            await queries.enqueue("ping", struct.pack("d", t), 0)

        await paced_async(n, rate, enqueue)
        await conn.close()

    _sync(go)
