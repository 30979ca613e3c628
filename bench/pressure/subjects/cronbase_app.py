"""cronbase through its public API only: ``App``, ``@app.task(retry=Backoff(...))``,
``defer_many`` (``configure(delay=...)`` for scheduled jobs) and ``app.worker()``, long-running
with its default retention, so whatever storage the library under test has is measured.

The claim probe is the one exception: it times the workers' claim statement through
``cronbase.worker.claim`` (``claim_jobs_sync`` with ``claim_params``), as bench/soak does. That
API is internal: when it changes, the probe reports "n/a" with the reason instead of failing
the run.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import psycopg

import cronbase

from ..mix import PRELOAD_PRODUCER, FlakyJobError
from ..reporter import HANDLER
from . import PythonSubject

TASK = "pressure_job"
CONCURRENCY = 10  # per worker process: cronbase's default


def make_app(url: str) -> cronbase.App:
    app = cronbase.App(database_url=url)

    @app.task(name=TASK, retry=cronbase.Backoff(base=timedelta(seconds=1), jitter=0))
    async def pressure_job(p: int, n: int, t: float, f: int) -> None:
        payload = {"p": p, "n": n, "t": t, "f": f}
        if HANDLER.attempt(payload, cronbase.current_job().attempt == 1):
            raise FlakyJobError(f"job {p}/{n} fails its first attempt")

    return app


def worker_main(out: Any, name: str, url: str) -> None:
    """A long-running worker until SIGTERM (its own handler: a graceful stop)."""
    worker = make_app(url).worker(concurrency=CONCURRENCY)
    HANDLER.start(out)

    async def main() -> None:
        running = asyncio.create_task(worker.run())
        started = asyncio.create_task(worker.started.wait())
        await asyncio.wait({running, started}, return_when=asyncio.FIRST_COMPLETED)
        if started.done():
            out.put(("ready", name))
        await running

    try:
        asyncio.run(main())
    finally:
        HANDLER.close()


class Enqueuer:
    """A producer's handle (``subjects.Enqueuer``)."""

    def __init__(self, url: str) -> None:
        self.app = make_app(url)
        self.task = self.app.tasks[TASK]
        self.app.pool()  # opened before the clock, as in a running application

    def enqueue(self, payloads: list[dict[str, Any]], delay: float) -> None:
        if delay:
            self.task.configure(delay=timedelta(seconds=delay)).defer_many(payloads)
        else:
            self.task.defer_many(payloads)

    def close(self) -> None:
        self.app.close()


class _Prober:
    def __init__(self, url: str) -> None:
        from cronbase.worker.claim import claim_jobs_sync, claim_params  # internal: see above

        self.claim_jobs = claim_jobs_sync
        self.queries = cronbase.App(database_url=url).queries
        self.params = claim_params(limit=CONCURRENCY, worker="pressure-claim-probe", tasks=[TASK])
        self.conn = psycopg.connect(url, autocommit=True)

    def claim(self) -> float:
        with self.conn.transaction(force_rollback=True):
            begin = time.perf_counter()
            self.claim_jobs(self.conn, self.queries, self.params)
            return time.perf_counter() - begin

    def close(self) -> None:
        self.conn.close()


class CronbaseSubject(PythonSubject):
    worker_main = staticmethod(worker_main)
    prober_type = _Prober
    key = "cronbase"
    name = "cronbase"
    schemas = ("cronbase",)
    hot_tables = None  # every table of the schema: the storage is the library's to choose
    setup_note = (
        f"app.worker(concurrency={CONCURRENCY}) (default retention, LISTEN/NOTIFY), "
        "retry=Backoff(base=1 s, jitter=0); producers: defer_many"
    )

    def setup(self, url: str) -> None:
        cronbase.App(database_url=url).migrate()

    def preload(self, url: str, n: int) -> None:
        with make_app(url) as app:
            t = time.time()
            app.tasks[TASK].defer_many(
                [{"p": PRELOAD_PRODUCER, "n": i, "t": t, "f": 0} for i in range(n)]
            )


SUBJECT = CronbaseSubject()
