"""Each queue's minutes (migration 0022): the roll-up one worker a minute writes, on jobs whose
start and due times other SQL set, read back as points with their pickup wait percentiles."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.operations.queue_minutes import WAIT_BOUNDS
from cronbase.worker.rollup import roll_up
from tests.conftest import wait_for

# Waits (seconds) of the attempts started in the rolled-up minute, and the bucket each falls in.
WAITS = {0.01: 0, 0.3: 3, 2.0: 5, 20.0: 8, 7200.0: len(WAIT_BOUNDS)}


def rolled(app: cronbase.App, database_url: str) -> datetime | None:
    async def run() -> datetime | None:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            return await roll_up(app.db, conn)

    return asyncio.run(run())


def the_minute(db: psycopg.Connection[Any]) -> datetime:
    """The minute a roll-up now covers: the last whole one that ended ten seconds ago."""
    row = db.execute("SELECT date_trunc('minute', now() - interval '70 seconds')").fetchone()
    assert row is not None
    return row[0]


def load(app: cronbase.App, db: psycopg.Connection[Any], minute: datetime) -> None:
    """In queue "mail": five attempts started in ``minute`` (three finished in the history, two
    still running), three jobs due and one scheduled ahead; in queue "other", one due job."""

    @app.task(queue="mail")
    def send() -> None:
        pass

    @app.task(queue="other")
    def other() -> None:
        pass

    ids = [send.defer() for _ in range(len(WAITS))]
    for job, (wait, offset) in zip(ids, zip(WAITS, range(len(WAITS)), strict=True), strict=True):
        started = minute + timedelta(seconds=5 + offset)
        finished = offset < 3
        db.execute(
            "UPDATE cronbase.jobs SET status = 'running', started_at = %(s)s, "
            "run_at = %(s)s - make_interval(secs => %(w)s), attempts = 1, locked_by = 'w', "
            "locked_until = now() + interval '1 hour', lease_token = gen_random_uuid() "
            "WHERE id = %(id)s",
            {"s": started, "w": wait, "id": job},
        )
        if finished:
            db.execute(
                "UPDATE cronbase.jobs SET status = 'succeeded', finished_at = %(f)s, "
                "lease_token = NULL, locked_until = NULL WHERE id = %(id)s",
                {"f": minute + timedelta(seconds=40), "id": job},
            )
            db.execute(
                "WITH moved AS (DELETE FROM cronbase.jobs WHERE id = %(id)s RETURNING *) "
                "INSERT INTO cronbase.jobs_history SELECT * FROM moved",
                {"id": job},
            )
    for _ in range(3):
        send.defer()
    db.execute(
        "INSERT INTO cronbase.jobs (task, queue, status, run_at) "
        "VALUES (%s, 'mail', 'queued', now() + interval '1 hour')",
        [send.name],
    )
    other.defer()


def test_a_minute_is_rolled_up_once_with_depth_and_waits_by_bucket(
    app: cronbase.App, db: psycopg.Connection[Any], database_url: str
) -> None:
    minute = the_minute(db)
    load(app, db, minute)
    assert rolled(app, database_url) == minute
    assert rolled(app, database_url) is None  # marked: no second roll-up of the minute
    rows = {
        r[0]: r[1:]
        for r in db.execute(
            "SELECT queue, due, running, started, waits FROM cronbase.queue_minutes "
            "WHERE minute = %s",
            [minute],
        )
    }
    waits = [0] * (len(WAIT_BOUNDS) + 1)
    for bucket in WAITS.values():
        waits[bucket] += 1
    assert rows["mail"] == (3, 2, 5, waits)
    assert rows["other"] == (1, 0, 0, [])
    assert rows[""] == (0, 0, 0, [])  # the marker


def test_points_give_percentiles_and_the_page_span_sums_minutes(
    app: cronbase.App, db: psycopg.Connection[Any], database_url: str
) -> None:
    minute = the_minute(db)
    load(app, db, minute)
    rolled(app, database_url)
    (point,) = app.queues.minutes("mail")
    assert point.at == minute
    assert (point.due, point.running, point.started) == (3, 2, 5)
    # The third of five waits (2 s) lies in the bucket from 1 to 2.5 s; the 95th percentile in
    # the open bucket above an hour, answered by its lower bound.
    assert point.wait_p50 is not None
    assert 1.0 <= point.wait_p50 <= 2.5
    assert point.wait_p95 == WAIT_BOUNDS[-1]
    (day,) = app.queues.minutes("mail", window=timedelta(days=1), step=timedelta(minutes=15))
    assert day.started == 5
    assert day.at <= minute
    # A queue with nothing in the marked minute reads zero there, not absent.
    (quiet,) = app.queues.minutes("quiet")
    assert (quiet.at, quiet.due, quiet.started, quiet.wait_p50) == (minute, 0, 0, None)


def test_two_workers_at_once_roll_a_minute_up_once(
    app: cronbase.App, db: psycopg.Connection[Any], database_url: str
) -> None:
    minute = the_minute(db)
    load(app, db, minute)

    async def both() -> list[datetime | None]:
        conns = [
            await psycopg.AsyncConnection.connect(database_url, autocommit=True) for _ in range(2)
        ]
        try:
            return list(await asyncio.gather(*(roll_up(app.db, c) for c in conns)))
        finally:
            for c in conns:
                await c.close()

    results = asyncio.run(both())
    assert sorted(results, key=lambda r: r is None) == [minute, None]
    counted = db.execute(
        "SELECT count(*) FROM cronbase.queue_minutes WHERE minute = %s AND queue = 'mail'",
        [minute],
    ).fetchone()
    assert counted == (1,)


def test_minutes_older_than_eight_days_are_pruned_and_rows_of_other_code_are_read(
    app: cronbase.App, db: psycopg.Connection[Any], database_url: str
) -> None:
    db.execute(
        "INSERT INTO cronbase.queue_minutes (queue, minute, due, started, waits) VALUES "
        "('mail', date_trunc('minute', now()) - interval '9 days', 1, 1, '{1}'), "
        "('', date_trunc('minute', now()) - interval '30 minutes', 0, 0, '{}'), "
        "('mail', date_trunc('minute', now()) - interval '30 minutes', 4, 2, '{1,1}')"
    )
    rolled(app, database_url)
    old = db.execute(
        "SELECT count(*) FROM cronbase.queue_minutes WHERE minute < now() - interval '8 days'"
    ).fetchone()
    assert old == (0,)
    points = app.queues.minutes("mail")
    # Its waits were not bucketed by these bounds: its counts stand, its waits are unknown.
    odd = [p for p in points if p.due == 4]
    assert len(odd) == 1
    assert odd[0].started == 2
    assert odd[0].wait_p50 is None


@pytest.mark.parametrize(
    ("window", "step"),
    [
        (timedelta(seconds=30), timedelta(minutes=1)),
        (timedelta(days=9), timedelta(hours=1)),
        (timedelta(hours=1), timedelta(hours=2)),
    ],
)
def test_bad_spans_are_refused_naming_the_value(
    app: cronbase.App, window: timedelta, step: timedelta
) -> None:
    with pytest.raises(cronbase.ConfigurationError, match="must be from"):
        app.queues.minutes("mail", window=window, step=step)
    with pytest.raises(cronbase.InvalidNameError, match="NUL"):
        app.queues.minutes("bad\x00name")


def test_a_running_worker_rolls_up_the_minutes(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(queue="mail")
    def send() -> None:
        pass

    send.defer()
    worker = app.worker(
        install_signal_handlers=False, reap_interval=timedelta(seconds=0.2), schedule=False
    )

    async def run() -> None:
        task = asyncio.create_task(worker.run())

        def marked() -> bool:
            row = db.execute("SELECT count(*) FROM cronbase.queue_minutes WHERE queue = ''")
            found = row.fetchone()
            return found is not None and found[0] >= 1

        try:
            await asyncio.to_thread(wait_for, marked, timeout=60, what="a rolled-up minute")
        finally:
            worker.stop()
            await asyncio.wait_for(task, 60)

    asyncio.run(run())
