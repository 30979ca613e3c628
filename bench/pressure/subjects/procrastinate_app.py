"""procrastinate, as bench/subjects/procrastinate_subject.py drives it: ``App`` over a
``PsycopgConnector``, ``run_worker_async(concurrency=10)`` per process (long-running, its own
signal handlers: SIGTERM is a graceful stop), ``batch_defer`` (``configure(schedule_in=...)``
for scheduled jobs), retries by ``RetryStrategy(wait=1)``.

The probe times the statement its workers send to fetch a job: ``fetch_job`` from the installed
package's ``procrastinate/sql/queries.sql`` (``procrastinate.sql.queries``), which calls
``procrastinate_fetch_job_v2`` (``procrastinate/sql/schema.sql``), with a worker id registered
in the same transaction, rolled back.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import procrastinate
import psycopg
from procrastinate.sql import queries as procrastinate_queries

from ..mix import PRELOAD_PRODUCER, FlakyJobError
from ..reporter import HANDLER
from . import PythonSubject

TASK = "pressure"
CONCURRENCY = 10


def make_app(url: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(
        name=TASK, pass_context=True, retry=procrastinate.RetryStrategy(max_attempts=5, wait=1)
    )
    async def pressure(context: procrastinate.JobContext, p: int, n: int, t: float, f: int) -> None:
        payload = {"p": p, "n": n, "t": t, "f": f}
        if HANDLER.attempt(payload, context.job.attempts == 0):
            raise FlakyJobError(f"job {p}/{n} fails its first attempt")

    return app


def worker_main(out: Any, name: str, url: str) -> None:
    app = make_app(url)

    async def main() -> None:
        async with app.open_async():
            out.put(("ready", name))
            await app.run_worker_async(concurrency=CONCURRENCY)

    HANDLER.start(out)
    try:
        asyncio.run(main())
    finally:
        HANDLER.close()


class Enqueuer:
    """A producer's handle (``subjects.Enqueuer``)."""

    def __init__(self, url: str) -> None:
        self.app = make_app(url)
        self.app.open()
        self.task = self.app.tasks[TASK]

    def enqueue(self, payloads: list[dict[str, Any]], delay: float) -> None:
        if delay:
            self.task.configure(schedule_in={"seconds": delay}).batch_defer(*payloads)
        else:
            self.task.batch_defer(*payloads)

    def close(self) -> None:
        self.app.close()


class _Prober:
    def __init__(self, url: str) -> None:
        self.statement = procrastinate_queries["fetch_job"]
        self.conn = psycopg.connect(url, autocommit=True)

    def claim(self) -> float:
        with self.conn.transaction(force_rollback=True):
            row = self.conn.execute("SELECT * FROM procrastinate_register_worker_v1()").fetchone()
            assert row is not None
            begin = time.perf_counter()
            self.conn.execute(self.statement, {"queues": None, "worker_id": row[0]}).fetchall()
            return time.perf_counter() - begin

    def close(self) -> None:
        self.conn.close()


class ProcrastinateSubject(PythonSubject):
    worker_main = staticmethod(worker_main)
    prober_type = _Prober
    key = "procrastinate"
    name = "procrastinate"
    schemas = ("public",)
    hot_tables = ("procrastinate_jobs", "procrastinate_events")
    setup_note = (
        f"run_worker_async(concurrency={CONCURRENCY}) (LISTEN/NOTIFY, one job per fetch), "
        "RetryStrategy(wait=1); producers: batch_defer"
    )

    def setup(self, url: str) -> None:
        app = make_app(url)
        with app.open():
            app.schema_manager.apply_schema()

    def preload(self, url: str, n: int) -> None:
        app, t = make_app(url), time.time()
        with app.open():
            app.tasks[TASK].batch_defer(
                *({"p": PRELOAD_PRODUCER, "n": i, "t": t, "f": 0} for i in range(n))
            )


SUBJECT = ProcrastinateSubject()
