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
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from psycopg import sql

from ..db import pool
from ..durations import duration
from ..errors import JobNotFoundError
from ..job import Job

if TYPE_CHECKING:
    from ..db.database import Database, Row

POLL_FIRST = 0.05
POLL_MAX = 1.0


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


def wait_job(db: Database, job_id: int, timeout: float | timedelta | None = None) -> Job:
    """The job once final; TimeoutError after ``timeout``."""
    limit = _seconds(timeout)
    deadline = None if limit is None else time.monotonic() + limit
    url = db.listen_url
    listener = None if url is None else pool.connect(url, application_name="cronbase-wait")
    try:
        if listener is not None:
            listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(db.queries.done_channel)))
        # Nothing: the job moved to the history while the statement ran (its UPDATE found the
        # row gone, its read of the history had an older snapshot); a fresh read finds it.
        params = {"id": job_id}
        row = db.fetch_one(db.queries.watch_job, params) or db.fetch_one(db.queries.get_job, params)
        job = _job(job_id, row)
        delay = POLL_FIRST
        while not job.status.is_final:
            left = POLL_MAX if deadline is None else deadline - time.monotonic()
            if left <= 0:
                assert limit is not None
                raise _timed_out(job, limit)
            if listener is not None:
                for note in listener.notifies(timeout=min(POLL_MAX, left)):
                    if _announced(note.payload, job_id):
                        break
            else:
                time.sleep(min(delay, left))
                delay = min(delay * 2, POLL_MAX)
            job = _job(job_id, db.fetch_one(db.queries.get_job, {"id": job_id}))
        return job
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
    try:
        if listener is not None:
            channel = sql.Identifier(db.queries.done_channel)
            await listener.execute(sql.SQL("LISTEN {}").format(channel))
        params = {"id": job_id}
        row = await db.fetch_one_async(db.queries.watch_job, params)
        row = row or await db.fetch_one_async(db.queries.get_job, params)  # as in wait_job
        job = _job(job_id, row)
        delay = POLL_FIRST
        while not job.status.is_final:
            left = POLL_MAX if deadline is None else deadline - loop.time()
            if left <= 0:
                assert limit is not None
                raise _timed_out(job, limit)
            if listener is not None:
                async for note in listener.notifies(timeout=min(POLL_MAX, left)):
                    if _announced(note.payload, job_id):
                        break
            else:
                await asyncio.sleep(min(delay, left))
                delay = min(delay * 2, POLL_MAX)
            job = _job(job_id, await db.fetch_one_async(db.queries.get_job, {"id": job_id}))
        return job
    finally:
        if listener is not None:
            await listener.close()
