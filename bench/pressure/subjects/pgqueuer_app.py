"""pgqueuer, as bench/subjects/pgqueuer_subject.py drives it ("defaults": one ``PgQueuer`` per
process on its own asyncpg connection, ``run()`` with its default batch of 10), long-running.
Retries by its own ``DatabaseRetryEntrypointExecutor`` (re-queued with ``execute_after`` =
1 s x 2^attempts: 1 s after the first failure); scheduled jobs by ``execute_after``.

The probe times pgqueuer's dequeue statement as its workers build it: the installed package's
``QueryQueueBuilder.build_dequeue_query`` (pgqueuer/adapters/persistence/qb.py, reached through
``Queries.qbq``) with a worker's arguments, run in a transaction rolled back.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from datetime import timedelta
from typing import Any

import asyncpg
from pgqueuer import AsyncpgDriver, PgQueuer, Queries
from pgqueuer.core.executors import DatabaseRetryEntrypointExecutor, EntrypointExecutorParameters

from ..mix import PRELOAD_PRODUCER, FlakyJobError
from ..reporter import HANDLER
from . import PythonSubject

ENTRYPOINT = "pressure"
BATCH = 10  # PgQueuer.run()'s default batch_size


def _retrying(parameters: EntrypointExecutorParameters) -> DatabaseRetryEntrypointExecutor:
    return DatabaseRetryEntrypointExecutor(
        parameters=parameters, max_attempts=5, initial_delay=timedelta(seconds=1)
    )


def worker_main(out: Any, name: str, url: str) -> None:
    async def main() -> None:
        conn = await asyncpg.connect(dsn=url)
        pgq = PgQueuer(AsyncpgDriver(conn))

        @pgq.entrypoint(ENTRYPOINT, executor_factory=_retrying)
        async def pressure(job: Any) -> None:
            payload = json.loads(job.payload)
            if HANDLER.attempt(payload, job.attempts == 0):
                raise FlakyJobError(f"job {payload['p']}/{payload['n']} fails its first attempt")

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, pgq.shutdown.set)
        # No readiness signal of its own: it LISTENs and dequeues as run() starts.
        out.put(("ready", name))
        await pgq.run(batch_size=BATCH)
        await conn.close()

    HANDLER.start(out)
    try:
        asyncio.run(main())
    finally:
        HANDLER.close()


class Enqueuer:
    """A producer's handle (``subjects.Enqueuer``)."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.conn = self.loop.run_until_complete(asyncpg.connect(dsn=url))
        self.queries = Queries(AsyncpgDriver(self.conn))

    def enqueue(self, payloads: list[dict[str, Any]], delay: float) -> None:
        k = len(payloads)
        after = [timedelta(seconds=delay)] * k if delay else None
        self.loop.run_until_complete(
            self.queries.enqueue(
                [ENTRYPOINT] * k, [json.dumps(p).encode() for p in payloads], [0] * k, after
            )
        )

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()


class _Prober:
    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.conn = self.loop.run_until_complete(asyncpg.connect(dsn=url))
        query = Queries(AsyncpgDriver(self.conn)).qbq.build_dequeue_query(
            batch_size=BATCH,
            entrypoints=[ENTRYPOINT],
            concurrency_limits=[0],
            queue_manager_id=uuid.uuid4(),
            global_concurrency_limit=None,
            heartbeat_timeout=timedelta(seconds=30),  # PgQueuer.run()'s default
        )
        self.sql, self.args = query.sql, query.args

    async def _claim(self) -> float:
        transaction = self.conn.transaction()
        await transaction.start()
        try:
            begin = time.perf_counter()
            await self.conn.fetch(self.sql, *self.args)
            return time.perf_counter() - begin
        finally:
            await transaction.rollback()

    def claim(self) -> float:
        return float(self.loop.run_until_complete(self._claim()))

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()


class PgqueuerSubject(PythonSubject):
    worker_main = staticmethod(worker_main)
    prober_type = _Prober
    key = "pgqueuer"
    name = "pgqueuer"
    schemas = ("public",)
    hot_tables = ("pgqueuer", "pgqueuer_log", "pgqueuer_statistics")
    setup_note = (
        f"one PgQueuer per process, run(batch_size={BATCH}) (its defaults, LISTEN/NOTIFY); "
        "DatabaseRetryEntrypointExecutor(initial_delay=1 s); producers: enqueue(lists)"
    )

    def setup(self, url: str) -> None:
        async def go() -> None:
            conn = await asyncpg.connect(dsn=url)
            try:
                await Queries(AsyncpgDriver(conn)).install()
            finally:
                await conn.close()

        asyncio.run(go())

    def preload(self, url: str, n: int) -> None:
        async def go() -> None:
            conn = await asyncpg.connect(dsn=url)
            try:
                t = time.time()
                payloads = [
                    json.dumps({"p": PRELOAD_PRODUCER, "n": i, "t": t, "f": 0}).encode()
                    for i in range(n)
                ]
                await Queries(AsyncpgDriver(conn)).enqueue([ENTRYPOINT] * n, payloads, [0] * n)
            finally:
                await conn.close()

        asyncio.run(go())


SUBJECT = PgqueuerSubject()
