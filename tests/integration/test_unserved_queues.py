"""Jobs in a queue no live worker serves: the overview says so (not "no worker knows the task"),
and a worker that fires a schedule into such a queue says so in its log, once per schedule."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import psycopg
import pytest

import cronbase
from cronbase.dashboard import create_app
from tests.browser.conftest import serving
from tests.e2e.harness import eventually, running_worker


def slot_jobs(db: psycopg.Connection[Any], key: str) -> int:
    row = db.execute(
        "SELECT count(*) FROM cronbase.jobs_all WHERE idempotency_key LIKE %s",
        [f"schedule:{key}@%"],
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.anyio
async def test_unserved_jobs_say_whether_the_task_or_the_queue_has_no_live_worker(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(queue="default")
    def report(n: int) -> None: ...

    await report.configure(queue="reports").defer_async(n=1)
    db.execute(
        "INSERT INTO cronbase.jobs (task, queue, payload) VALUES ('renamed', 'default', '{}')"
    )
    async with running_worker(app, queues=["default", "emails"], schedule=False):
        unserved = await asyncio.to_thread(app.unserved_jobs)
    assert [(u.task, u.queue, u.reason) for u in unserved] == [
        ("renamed", "default", "no live worker registers that task"),
        (
            "report",
            "reports",
            "no live worker serves queue 'reports' (the live workers that know the task serve: "
            "default, emails)",
        ),
    ]


def test_the_overview_names_the_queue_no_live_worker_serves(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    # A live worker on another host knows the task, and serves other queues.
    db.execute(
        "INSERT INTO cronbase.workers (id, hostname, pid, queues, concurrency, tasks) "
        "VALUES ('w1', 'host-a', 1, '{default,emails}', 4, '{report}')"
    )
    db.execute(
        "INSERT INTO cronbase.jobs (task, queue, payload) VALUES ('report', 'reports', '{}')"
    )
    with serving(create_app(app), app) as url:
        page = httpx.get(f"{url}/", timeout=30).text
    assert (
        "in queue <code>reports</code>: no live worker serves queue &#39;reports&#39; (the live "
        "workers that know the task serve: default, emails)"
    ) in page
    assert "registers that task" not in page


@pytest.mark.anyio
async def test_a_worker_firing_a_schedule_into_a_queue_it_does_not_serve_warns_once(
    app: cronbase.App, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    @app.task
    def tick_task() -> None: ...

    # Every second: the worker fires slot after slot into a queue it does not serve.
    await app.schedules.add_async("tick_task", cron="* * * * * *", key="elsewhere", queue="other")
    await app.schedules.add_async("tick_task", cron="* * * * * *", key="here")
    with caplog.at_level(logging.WARNING, logger="cronbase"):
        async with running_worker(app, queues=["default"]):
            await eventually(lambda: slot_jobs(db, "elsewhere") >= 3, what="three slots fired")
            await eventually(lambda: slot_jobs(db, "here") >= 3, what="three slots fired")
    said = [r.getMessage() for r in caplog.records if "does not serve" in r.getMessage()]
    assert said == [
        "schedule 'elsewhere' fires its jobs into queue 'other', which this worker does not "
        "serve (it serves: default): they wait for a worker that does; add the queue to a "
        "worker's --queue, or give the schedule a queue that is served"
    ]
