"""Handlers that meet their timeout, run by worker processes: ``python -m tests.e2e.timeout_app
--worker-id A [options]`` (tests/e2e/test_timeouts.py).

Tasks are module-level (``isolation="process"`` children import them by name), on an App whose
database is ``CRONBASE_DATABASE_URL``. Handlers write what they do to ``test_events``; the id of
each row orders them across attempts, processes and clocks.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from datetime import date, timedelta

import cronbase
from cronbase.worker import isolation
from tests.e2e import worker_app

# A child of an isolated task that starts slowly (a loaded host, heavy imports), as long as the
# tests ask: a spawned child imports the worker's main module, this one, as __mp_main__.
CHILD_START = os.environ.get("TIMEOUT_APP_CHILD_START_SECONDS")
if CHILD_START and __name__ == "__mp_main__":
    time.sleep(float(CHILD_START))
# The worker's limit on a child's start, shorter than its default for a test of what happens past it.
STARTUP_LIMIT = os.environ.get("TIMEOUT_APP_STARTUP_LIMIT_SECONDS")
if STARTUP_LIMIT:
    isolation.STARTUP_LIMIT = float(STARTUP_LIMIT)

app = cronbase.App()

TIMEOUT = timedelta(seconds=1)
# An isolated handler's timeout covers the child's own pool for record() (opened in the handler):
# over 1 s on a loaded machine, so the child was killed before it recorded.
ISOLATED_TIMEOUT = timedelta(seconds=3)
# Retries come soon: what these tests watch is whether the next attempt waits for the last one.
SOON = cronbase.Backoff(base=timedelta(milliseconds=100), jitter=0)


def record(event: str) -> None:
    job = cronbase.current_job()
    with app.pool().connection() as conn:
        conn.execute(
            "INSERT INTO test_events (job_id, attempt, event, pid) VALUES (%s, %s, %s, %s)",
            (job.id, job.attempt, event, os.getpid()),
        )


def commit_effect() -> None:
    """The handler's effect, committed with its job's success by transaction(), or refused."""
    try:
        with cronbase.current_job().transaction() as conn:
            conn.execute(
                "INSERT INTO test_executions (job_id, n, pid) VALUES (%s, 1, %s)",
                (cronbase.current_job().id, os.getpid()),
            )
    except cronbase.AttemptCancelledError as exc:
        record(f"refused: {type(exc).__name__}")


@app.task(timeout=TIMEOUT, max_attempts=2, lease=timedelta(seconds=2), retry=SOON)
def stubborn(seconds: float) -> None:
    """Ignores its timeout: sleeps on, then tries to commit its effect."""
    record("started")
    time.sleep(seconds)
    record(f"ended cancelled={cronbase.current_job().is_cancelled()}")
    commit_effect()


@app.task(timeout=TIMEOUT, max_attempts=1)
def cooperative(seconds: float) -> None:
    """Polls is_cancelled() between steps and stops when told."""
    record("started")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cronbase.current_job().is_cancelled():
            record("noticed")
            return
        time.sleep(0.02)
    record("ran to its end")


@app.task(timeout=TIMEOUT, max_attempts=2, retry=SOON)
async def stubborn_async(seconds: float) -> None:
    """Swallows the cancellation of its timeout and carries on."""
    await asyncio.to_thread(record, "started")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        await asyncio.to_thread(record, "swallowed the cancellation")
        await asyncio.sleep(seconds)
    await asyncio.to_thread(record, "ended")


@app.task(timeout=ISOLATED_TIMEOUT, max_attempts=2, isolation="process", retry=SOON)
def isolated_sleeper(seconds: float) -> None:
    """Runs in a child process, which the worker kills at the timeout."""
    record("started")
    time.sleep(seconds)
    record("ended")


@app.task(isolation="process", max_attempts=1)
def isolated_waiter(flag: str) -> None:
    """Runs in a child process until ``flag`` is set (a row of test_flags)."""
    record("started")
    while not is_flag_set(flag):
        time.sleep(0.05)
    record("ended")


def is_flag_set(name: str) -> bool:
    with app.pool().connection() as conn:
        return (
            conn.execute("SELECT 1 FROM test_flags WHERE name = %s", (name,)).fetchone() is not None
        )


@app.task(isolation="process")
def isolated_value(day: date, label: str) -> dict[str, object]:
    """Converts its payload and returns a result across the process boundary."""
    cronbase.current_job().set_progress(50, stage="halfway")
    return {"weekday": day.isoweekday(), "label": label.upper(), "pid": os.getpid()}


@app.task(timeout=TIMEOUT, isolation="process", max_attempts=1)
def isolated_quick(label: str) -> dict[str, str]:
    """Returns at once: within its timeout, whatever its child's start took."""
    return {"label": label}


@app.task(isolation="process", max_attempts=1)
def isolated_crash(status: int) -> None:
    """Its process exits under it."""
    record("started")
    os._exit(status)


if __name__ == "__main__":
    worker_app.main(sys.argv[1:], make=lambda: app)
