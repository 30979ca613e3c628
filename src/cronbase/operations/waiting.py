"""``app.jobs.wait(id)``: block until a job is final (succeeded, dead or cancelled) and return it.

Woken by NOTIFY: the waiter LISTENs on the schema's done channel, then marks the job
(``watch_job`` sets ``wait_notify``, so only waited-for jobs are announced: a drain nobody waits
on sends no NOTIFY) and reads it. Listening before the read means a final state committed after
the read is announced to us. Each wake-up, and at the latest every second, re-reads the job: a
final state written by other SQL, or a notification lost with a dropped connection, is found by
that poll. Through a transaction pooler (no listen URL) it only polls, backing off from 50 ms to
1 s. ``timeout`` (seconds or a timedelta; None: no limit) ends the wait with TimeoutError.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from psycopg import sql

from ..db import pool
from ..db.steps import drive, drive_async
from ..durations import duration
from ..errors import JobNotFoundError
from ..job import Job

if TYPE_CHECKING:
    from ..db.database import Database, Row

POLL_FIRST = 0.05
POLL_MAX = 1.0
Clock = Callable[[], float]


def _seconds(timeout: float | timedelta | None) -> float | None:
    if timeout is None:
        return None
    return duration("timeout", timeout).total_seconds()


def _job(job_id: int, row: Row | None) -> Job:
    if row is None:
        raise JobNotFoundError(job_id)
    return Job.from_row(row)


def _timed_out(job: Job, timeout: float) -> TimeoutError:
    return TimeoutError(
        f"job {job.id} ({job.task}) is still {job.status.value} after {timeout:g}s of waiting"
    )


def _announced(payload: str, job_id: int) -> bool:
    return str(job_id) in payload.split(",")


# A step of waiting: a statement that reads the job (its row is sent back), or a pause of so
# many seconds (a notification about the job may end it early).
Step = tuple[bytes, dict[str, Any]] | float


def _watching(
    db: Database,
    job_id: int,
    limit: float | None,
    deadline: float | None,
    clock: Clock,
    listening: bool,
) -> Generator[Step, Any, Job]:
    """The wait as steps (the shells answer them): the job once final; TimeoutError once
    ``clock()`` passes ``deadline``. Each pause is a listener's (up to a second) or, without
    one, a poll's, backing off."""
    # Nothing: the job moved to the history while watch_job ran (its UPDATE found the row gone,
    # its read of the history had an older snapshot); a fresh read finds it.
    row = yield (db.queries.watch_job, {"id": job_id})
    job = _job(job_id, row or (yield (db.queries.get_job, {"id": job_id})))
    delay = POLL_FIRST
    while not job.status.is_final:
        left = POLL_MAX if deadline is None else deadline - clock()
        if left <= 0:
            assert limit is not None
            raise _timed_out(job, limit)
        if listening:
            yield min(POLL_MAX, left)
        else:
            yield min(delay, left)
            delay = min(delay * 2, POLL_MAX)
        job = _job(job_id, (yield (db.queries.get_job, {"id": job_id})))
    return job


def _listen(db: Database) -> sql.Composed:
    return sql.SQL("LISTEN {}").format(sql.Identifier(db.queries.done_channel))


def wait_job(db: Database, job_id: int, timeout: float | timedelta | None = None) -> Job:
    """The job once final; TimeoutError after ``timeout``."""
    limit = _seconds(timeout)
    deadline = None if limit is None else time.monotonic() + limit
    url = db.listen_url
    listener = None if url is None else pool.connect(url, application_name="cronbase-wait")

    def run(step: Step) -> Any:
        if not isinstance(step, float):
            return db.fetch_one(*step)
        if listener is None:
            time.sleep(step)
            return None
        for note in listener.notifies(timeout=step):
            if _announced(note.payload, job_id):
                break
        return None

    try:
        if listener is not None:
            listener.execute(_listen(db))
        steps = _watching(db, job_id, limit, deadline, time.monotonic, listener is not None)
        return drive(steps, run)
    finally:
        if listener is not None:
            listener.close()


async def wait_job_async(
    db: Database,
    job_id: int,
    timeout: float | timedelta | None = None,  # noqa: ASYNC109  # as wait_job's
) -> Job:
    """Async twin of :func:`wait_job`."""
    limit = _seconds(timeout)
    loop = asyncio.get_running_loop()
    deadline = None if limit is None else loop.time() + limit
    listener: Any = None
    if db.listen_url is not None:
        listener = await db.connect_listener("cronbase-wait")

    async def run(step: Step) -> Any:
        if not isinstance(step, float):
            return await db.fetch_one_async(*step)
        if listener is None:
            await asyncio.sleep(step)
            return None
        async for note in listener.notifies(timeout=step):
            if _announced(note.payload, job_id):
                break
        return None

    try:
        if listener is not None:
            await listener.execute(_listen(db))
        steps = _watching(db, job_id, limit, deadline, loop.time, listener is not None)
        return await drive_async(steps, run)
    finally:
        if listener is not None:
            await listener.close()
