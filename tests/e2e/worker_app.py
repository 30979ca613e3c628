"""The app worker-process tests run: ``python -m tests.e2e.worker_app --worker-id A [options]``.

Handlers write what they do to ``test_events`` and wait on rows of ``test_flags`` that a test
inserts, so the test waits on the database, never on the clock. The database is
``CRONBASE_DATABASE_URL``; a test builds the same app on its own URL with :func:`make_app`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import cronbase

FLAG_POLL_SECONDS = 0.05
# How long idle pool threads may take to see the pool shut down before the process leaves
# without them.
THREAD_JOIN_SECONDS = 1.0


def make_app(database_url: str | None = None) -> cronbase.App:
    """The test tasks on an App (its database from the environment unless given)."""
    app = cronbase.App(database_url=database_url)

    def record(event: str) -> None:
        job = cronbase.current_job()
        with app.pool().connection() as conn:
            conn.execute(
                "INSERT INTO test_events (job_id, attempt, event, pid) VALUES (%s, %s, %s, %s)",
                (job.id, job.attempt, event, os.getpid()),
            )

    def is_flag_set(name: str) -> bool:
        with app.pool().connection() as conn:
            return (
                conn.execute("SELECT FROM test_flags WHERE name = %s", (name,)).fetchone()
                is not None
            )

    @app.task
    def blocking(flag: str) -> None:
        """Records 'started', waits until ``flag`` is set, then records its one 'effect'."""
        record("started")
        while not is_flag_set(flag):
            threading.Event().wait(FLAG_POLL_SECONDS)
        record("effect")

    @app.task
    async def blocking_async(flag: str) -> None:
        """As ``blocking``, on the event loop (so a worker can cancel it)."""
        await asyncio.to_thread(record, "started")
        # Polls: the flag is a row another process inserts, there is no event to await here.
        while not await asyncio.to_thread(is_flag_set, flag):  # noqa: ASYNC110
            await asyncio.sleep(FLAG_POLL_SECONDS)
        await asyncio.to_thread(record, "effect")

    @app.task
    def execute_once(n: int) -> None:
        """One row in test_executions per run: a job run twice shows up twice."""
        job = cronbase.current_job()
        with app.pool().connection() as conn:
            conn.execute(
                "INSERT INTO test_executions (job_id, n, pid) VALUES (%s, %s, %s)",
                (job.id, n, os.getpid()),
            )

    return app


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.worker_app")
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--queue", action="append", dest="queues")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--burst", action="store_true")
    parser.add_argument("--poll-interval", type=float, default=0.5, metavar="SECONDS")
    parser.add_argument("--reap-interval", type=float, default=0.5, metavar="SECONDS")
    parser.add_argument("--shutdown-grace", type=float, default=25.0, metavar="SECONDS")
    parser.add_argument("--metrics-port", type=int, metavar="PORT")
    return parser.parse_args(argv)


def main(argv: list[str], make: Callable[[], cronbase.App] = make_app) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    app = make()
    worker = app.worker(
        worker_id=args.worker_id,
        queues=args.queues,
        concurrency=args.concurrency,
        burst=args.burst,
        poll_interval=timedelta(seconds=args.poll_interval),
        reap_interval=timedelta(seconds=args.reap_interval),
        shutdown_grace=timedelta(seconds=args.shutdown_grace),
        metrics_port=args.metrics_port,
    )
    asyncio.run(worker.run())
    app.close()
    exit_without_stuck_handlers()


def exit_without_stuck_handlers() -> None:
    """Leave now if a sync handler still runs: Python would wait for its thread at exit.

    Its job was handed back by the worker (queued again, attempt not counted).
    """
    handlers = [t for t in threading.enumerate() if t.name.startswith("cronbase-job")]
    deadline = time.monotonic() + THREAD_JOIN_SECONDS
    for thread in handlers:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in handlers if t.is_alive()]
    if stuck:
        logging.getLogger("cronbase").warning("exiting without stuck handlers: %s", stuck)
        logging.shutdown()
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
