"""Gone workers' rows (killed, or their host down) pruned by retention and by ``cronbase workers
prune``, never an alive one nor one whose worker still holds a running job; and the counts of
jobs done and attempts failed that a worker's heartbeats write."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.errors import InvalidValueError
from cronbase.operations.fleet import prune_workers
from cronbase.operations.retention import Retention, lock_key
from tests.conftest import wait_for
from tests.integration.test_history import round_

# Rows as other SQL (an older release, a killed process) leaves them, by last heartbeat.
ROWS = """
INSERT INTO cronbase.workers (id, hostname, pid, concurrency, started_at, last_seen_at) VALUES
  ('alive', 'web-1', 1, 4, now() - interval '3 days', now()),
  ('quiet-30s', 'web-1', 2, 4, now() - interval '3 days', now() - interval '30 seconds'),
  ('gone-10m', 'web-2', 3, 4, now() - interval '3 days', now() - interval '10 minutes'),
  ('gone-2d', 'web-3', 4, 4, now() - interval '3 days', now() - interval '2 days'),
  ('gone-2d-holding', 'web-3', 5, 4, now() - interval '3 days', now() - interval '2 days')
"""


def ids(db: psycopg.Connection[Any]) -> list[str]:
    return [r[0] for r in db.execute("SELECT id FROM cronbase.workers ORDER BY id")]


def hold_job(app: cronbase.App, db: psycopg.Connection[Any], worker: str) -> int:
    """A running job whose lease ``worker`` holds (expired or not: the reaper has not run)."""

    @app.task
    def held() -> None: ...

    job_id = held.defer()
    db.execute(
        "UPDATE cronbase.jobs SET status = 'running', locked_by = %s, started_at = now(),"
        " locked_until = now() + interval '1 minute', lease_token = gen_random_uuid(),"
        " attempts = 1 WHERE id = %s",
        (worker, job_id),
    )
    return job_id


def test_retention_prunes_gone_workers_past_its_age_but_never_an_alive_or_busy_one(
    app: cronbase.App, db: psycopg.Connection[Any], database_url: str
) -> None:
    db.execute(ROWS)
    job_id = hold_job(app, db, "gone-2d-holding")
    everyone = ["alive", "gone-10m", "gone-2d", "gone-2d-holding", "quiet-30s"]

    round_(app, Retention(workers=None))  # kept until pruned by hand
    assert ids(db) == everyone
    with psycopg.connect(database_url, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [lock_key(app.schema)])
        assert round_(app, Retention()) is None  # another worker is pruning: nothing done
        other.execute("SELECT pg_advisory_unlock(%s)", [lock_key(app.schema)])
    assert ids(db) == everyone

    round_(app, Retention())  # the default: a day
    assert ids(db) == ["alive", "gone-10m", "gone-2d-holding", "quiet-30s"]

    # However short the age, a worker seen within a minute is alive, and one with a running
    # job keeps its row while the job is in its hands.
    round_(app, Retention(workers=0))
    assert ids(db) == ["alive", "gone-2d-holding", "quiet-30s"]
    db.execute(
        "UPDATE cronbase.jobs SET status = 'queued', locked_by = NULL, locked_until = NULL,"
        " lease_token = NULL WHERE id = %s",
        (job_id,),
    )
    round_(app, Retention(workers=0))
    assert ids(db) == ["alive", "quiet-30s"]


def test_the_operators_prune_is_audited_and_keeps_alive_and_busy_workers(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    db.execute(ROWS)
    hold_job(app, db, "gone-2d-holding")
    assert prune_workers(app.db, timedelta(hours=1), actor="cli:ops@host") == ["gone-2d"]
    assert prune_workers(app.db, timedelta(0), actor="cli:ops@host") == ["gone-10m"]
    assert ids(db) == ["alive", "gone-2d-holding", "quiet-30s"]
    audit = db.execute(
        "SELECT actor, action, target, detail FROM cronbase.audit_log ORDER BY id"
    ).fetchall()
    assert [(a, b, c) for a, b, c, _ in audit] == [("cli:ops@host", "workers.prune", "workers")] * 2
    detail = audit[0][3] if isinstance(audit[0][3], dict) else json.loads(audit[0][3])
    assert detail == {"older_than": "1:00:00", "removed": 1, "workers": ["gone-2d"]}
    with pytest.raises(InvalidValueError, match="must not be negative"):
        prune_workers(app.db, timedelta(seconds=-1))


def test_a_workers_heartbeats_write_its_jobs_done_and_attempts_failed(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def fine(n: int) -> None: ...

    @app.task(max_attempts=2, retry=cronbase.Backoff(base=timedelta(milliseconds=10), jitter=0))
    def broken(n: int) -> None:
        raise RuntimeError(f"broken {n}")

    for n in range(3):
        fine.defer(n=n)
    broken.defer(n=1)  # two attempts, both failed: then dead
    worker = app.worker(
        install_signal_handlers=False,
        retention=None,
        schedule=False,
        poll_interval=timedelta(milliseconds=100),
    )
    thread = threading.Thread(target=lambda: asyncio.run(worker.run()), daemon=True)
    thread.start()
    try:

        def counts() -> tuple[Any, ...] | None:
            return db.execute(
                "SELECT succeeded_jobs, failed_attempts FROM cronbase.workers WHERE id = %s",
                [worker.id],
            ).fetchone()

        # Registered at zero; the totals come with a heartbeat (every 10 s when idle).
        wait_for(lambda: counts() == (3, 2), timeout=40, what=f"counts (3, 2), not {counts()}")
        assert app.workers()[0].succeeded_jobs == 3
        assert app.workers()[0].failed_attempts == 2
    finally:
        worker.stop()
        thread.join(60)
    assert not thread.is_alive()


def test_a_running_worker_whose_row_was_deleted_is_registered_again_by_its_heartbeat(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    """A worker cut off for a day has its row pruned (Retention(workers=), `cronbase workers
    prune`) while it still runs; its next heartbeat finds no row to update and registers it
    again, with what it registered at start, so the Workers page shows it before it restarts."""
    release = threading.Event()

    # A held job with a short lease: beats every 0.2 s (a third of it), not every 10 s idle.
    @app.task(lease=timedelta(milliseconds=600))
    def held() -> None:
        release.wait(30)

    job_id = held.defer()
    worker = app.worker(
        install_signal_handlers=False,
        retention=None,
        schedule=False,
        queues=["default"],
        concurrency=3,
    )
    thread = threading.Thread(target=lambda: asyncio.run(worker.run()), daemon=True)
    thread.start()

    def registered() -> tuple[Any, ...] | None:
        return db.execute(
            "SELECT hostname, pid, queues, concurrency, tasks, supervisor, version,"
            " schema_version FROM cronbase.workers WHERE id = %s",
            [worker.id],
        ).fetchone()

    def running() -> bool:
        found = db.execute(
            "SELECT locked_by FROM cronbase.jobs WHERE id = %s AND status = 'running'", [job_id]
        ).fetchone()
        return found == (worker.id,)

    try:
        wait_for(running, timeout=30, what="the held job running")
        at_start = registered()
        assert at_start is not None
        db.execute("DELETE FROM cronbase.workers WHERE id = %s", [worker.id])
        assert registered() is None
        wait_for(registered, timeout=30, what="the worker's row back after a heartbeat")
        assert registered() == at_start
        assert [w.id for w in app.workers()] == [worker.id]
        assert running()  # the lease renewed all along: the job was never taken back
    finally:
        release.set()
        worker.stop()
        thread.join(60)
    assert not thread.is_alive()
