"""LISTEN/NOTIFY: an idle worker wakes when a job is deferred, also after its listener was killed."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from tests.e2e.harness import eventually, running_worker, wait_event

# Neither a poll nor a reap can wake the worker within a test: whatever runs a job, runs it
# because a notification (or the listener's reconnect) woke the worker.
POLL = timedelta(seconds=600)
# Far below POLL: a correctness bound, not a speed benchmark.
PROMPTLY = 20.0


def listener_pids(db: psycopg.Connection[Any]) -> list[int]:
    rows = db.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name LIKE 'cronbase-listener%'"
    ).fetchall()
    return [pid for (pid,) in rows]


def status(db: psycopg.Connection[Any], job_id: int) -> str:
    row = db.execute("SELECT status FROM cronbase.jobs_all WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.anyio
async def test_an_idle_worker_wakes_on_notify_and_again_after_its_listener_is_killed(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    ran: dict[int, asyncio.Event] = {n: asyncio.Event() for n in range(3)}

    @app.task
    async def ping(n: int) -> None:
        ran[n].set()

    async with running_worker(app, poll_interval=POLL, reap_interval=POLL) as worker:
        assert worker.notifier is not None
        await wait_event(worker.notifier.listening, what="the worker to listen")

        first = await ping.defer_async(n=0)
        await wait_event(ran[0], within=PROMPTLY, what="the first job")
        await eventually(lambda: status(db, first) == "succeeded", what="its outcome")

        # The worker is idle now, waiting for the next notification.
        second = await ping.defer_async(n=1)
        await wait_event(ran[1], within=PROMPTLY, what="the job deferred to an idle worker")
        await eventually(lambda: status(db, second) == "succeeded", what="its outcome")

        (killed,) = listener_pids(db)
        db.execute("SELECT pg_terminate_backend(%s)", (killed,))
        await eventually(
            lambda: (pids := listener_pids(db)) and killed not in pids,
            within=PROMPTLY,
            what="a new listener connection",
        )
        await wait_event(worker.notifier.listening, what="the worker to listen again")
        assert worker.notifier.connections_made == 2

        await ping.defer_async(n=2)
        await wait_event(ran[2], within=PROMPTLY, what="a job deferred after the reconnect")


def notifications(database_url: str, act: Any) -> list[tuple[str, str]]:
    """(channel, payload) of every notification ``act()`` caused, as a listener receives them."""
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN cronbase_jobs")
        act()
        # A round trip after the commit: the notifications, if any, arrived before its answer.
        listener.execute("SELECT 1")
        return [(n.channel, n.payload) for n in listener.notifies(timeout=0.2)]


def test_each_enqueue_statement_notifies_once_per_queue_when_the_job_is_due(
    app: cronbase.App, database_url: str
) -> None:
    @app.task(queue="mail")
    def send(n: int) -> None: ...

    due = [("cronbase_jobs", "mail")]
    assert notifications(database_url, lambda: send.defer(n=1)) == due
    many = [{"n": n} for n in range(1000)]
    assert notifications(database_url, lambda: send.defer_many(many)) == due
    later = send.configure(delay=timedelta(hours=1))
    assert notifications(database_url, lambda: later.defer(n=2)) == []
    assert notifications(database_url, lambda: later.defer_many(many)) == []
    keyed = send.configure(idempotency_key="mail:1")
    assert notifications(database_url, lambda: keyed.defer(n=3)) == due
    assert notifications(database_url, lambda: keyed.defer(n=3)) == []  # the same job: no news
    debounced = send.configure(
        dedupe_key="digest", on_duplicate="replace", delay=timedelta(hours=1)
    )
    assert notifications(database_url, lambda: debounced.defer(n=4)) == []
    now = send.configure(dedupe_key="digest", on_duplicate="replace")
    assert notifications(database_url, lambda: now.defer(n=5)) == due  # replaced: due now
