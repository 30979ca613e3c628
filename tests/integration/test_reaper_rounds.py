"""A reaper's rounds between its full ones (worker/reaper.py) walk the leases from where the last
left off, so a lease is never passed over: not one whose row a frozen attempt's transaction held
locked when it ran out (SKIP LOCKED passes it), however long after the lock goes. Found by the
chaos tier (test_sigstop_past_the_lease_is_fenced): a window of the last three rounds lost such
a lease until the next full round, 60 rounds later."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

import cronbase
from cronbase.worker.reaper import Reaper
from tests.conftest import claim_rows


def status(db: psycopg.Connection[Any], job_id: int) -> str:
    row = db.execute("SELECT status FROM cronbase.jobs_all WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    return str(row[0])


def test_a_lease_that_ran_out_while_its_row_was_locked_is_reaped_once_it_is_free(
    app: cronbase.App, db: psycopg.Connection[Any], database_url: str
) -> None:
    @app.task
    def work() -> None: ...

    job_id = work.defer()
    (job,), _ = claim_rows(app, db, 1, "frozen")
    assert job.id == job_id
    # Its lease ran out ten minutes ago, and its worker is frozen inside transaction(): the row
    # stays locked until the server ends that session.
    db.execute(
        "UPDATE cronbase.jobs SET locked_until = now() - interval '10 minutes' WHERE id = %s",
        [job_id],
    )
    with psycopg.connect(database_url) as frozen:
        frozen.execute("SELECT FROM cronbase.jobs WHERE id = %s FOR UPDATE", [job_id])

        async def rounds(reaper: Reaper, n: int) -> None:
            for _ in range(n):
                await reaper.reap_once()

        async def scenario() -> None:
            pool = await app.async_pool()
            reaper = Reaper(pool, app.db, interval=0.05)
            await rounds(reaper, 5)  # a full round, then recent ones: all pass the locked row
            assert status(db, job_id) == "running"
            frozen.rollback()  # the session ended (idle_in_transaction_session_timeout)
            await rounds(reaper, 1)  # a recent round, long after: reaped all the same

        asyncio.run(scenario())
    assert status(db, job_id) == "failed"
