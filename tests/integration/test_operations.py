"""The operator's side on real PostgreSQL: queue pauses, stats, bulk requeue, search, prune."""

from __future__ import annotations

import asyncio
import logging
import socket
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.job import JobStatus
from cronbase.operations import search as admin
from cronbase.operations.retention import Retention, lock_key, prune, prune_once
from tests.conftest import wait_for
from tests.integration.metrics_worker import serving_metrics

NEVER_SOON = cronbase.Backoff(base=timedelta(hours=1), jitter=0)


def run_burst(app: cronbase.App, **options: Any) -> None:
    app.run_worker(burst=True, install_signal_handlers=False, **options)


def status_of(app: cronbase.App, job_id: int) -> JobStatus:
    return app.jobs.get(job_id).status


def test_a_paused_queue_is_not_claimed_until_resumed(app: cronbase.App) -> None:
    @app.task
    def work(n: int) -> None:
        pass

    held = work.configure(queue="reports").defer(n=1)
    free = work.configure(queue="emails").defer(n=2)
    state = app.queues.pause("reports", actor="ops@example")
    assert (state.name, state.is_paused, state.paused_by) == ("reports", True, "ops@example")
    run_burst(app)
    assert status_of(app, held) == JobStatus.QUEUED
    assert status_of(app, free) == JobStatus.SUCCEEDED
    assert {q.name: q.is_paused for q in app.queues.list()} == {"emails": False, "reports": True}
    # A worker that only serves the paused queue takes nothing either.
    run_burst(app, queues=["reports"])
    assert status_of(app, held) == JobStatus.QUEUED

    assert not app.queues.resume("reports").is_paused
    run_burst(app, queues=["reports"])
    assert status_of(app, held) == JobStatus.SUCCEEDED


def test_stats_count_a_known_workload(app: cronbase.App) -> None:
    @app.task(queue="emails")
    def ok() -> None:
        pass

    @app.task(queue="emails", max_attempts=1)
    def broken() -> None:
        raise RuntimeError("smtp down")

    for _ in range(3):
        ok.defer()
    broken.defer()
    ok.configure(queue="later", delay=timedelta(hours=1)).defer()
    run_burst(app)
    ok.defer()  # due now, waiting

    overview = app.stats()
    by_queue = {q.queue: q for q in overview.queues}
    assert set(by_queue) == {"emails", "later"}
    emails = by_queue["emails"]
    assert emails.counts[JobStatus.SUCCEEDED] == 3
    assert emails.counts[JobStatus.DEAD] == 1
    assert emails.counts[JobStatus.QUEUED] == 1
    assert emails.oldest_wait is not None
    assert emails.oldest_wait >= 0
    assert emails.wait_p50 is not None
    assert emails.wait_p95 is not None
    assert emails.wait_p50 <= emails.wait_p95
    assert by_queue["later"].oldest_wait is None  # not due: not waiting yet
    assert len(overview.minutes) == 60
    assert sum(m.succeeded for m in overview.minutes) == 3
    assert sum(m.failed for m in overview.minutes) == 1
    assert overview.totals()[JobStatus.SUCCEEDED] == 3
    assert asyncio.run(app.stats_async()).totals() == overview.totals()


def test_requeue_dead_of_one_task(app: cronbase.App) -> None:
    @app.task(max_attempts=1)
    def flaky(n: int) -> None:
        raise RuntimeError(f"no {n}")

    @app.task(max_attempts=1)
    def other() -> None:
        raise RuntimeError("no")

    ids = [flaky.defer(n=n) for n in range(3)]
    other_id = other.defer()
    run_burst(app)
    assert {status_of(app, i) for i in [*ids, other_id]} == {JobStatus.DEAD}

    assert sorted(app.jobs.requeue_dead(task="flaky")) == sorted(ids)
    assert {status_of(app, i) for i in ids} == {JobStatus.QUEUED}
    assert status_of(app, other_id) == JobStatus.DEAD
    job = app.jobs.get(ids[0])
    assert job.max_attempts == 2  # room for one more attempt
    assert app.jobs.requeue_dead(task="flaky") == []


def test_requeue_dead_leaves_a_job_whose_dedupe_key_is_taken(app: cronbase.App) -> None:
    @app.task(max_attempts=1)
    def sync_account(account: int) -> None:
        raise RuntimeError("down")

    dead = sync_account.configure(dedupe_key="account:1").defer(account=1)
    run_burst(app)
    waiting = sync_account.configure(dedupe_key="account:1", delay=timedelta(hours=1)).defer(
        account=1
    )
    assert waiting != dead
    assert app.jobs.requeue_dead() == []
    assert status_of(app, dead) == JobStatus.DEAD


def test_search_by_id_key_and_prefix_with_pages(app: cronbase.App) -> None:
    @app.task
    def charge(invoice: int) -> None:
        pass

    keyed = [
        charge.configure(idempotency_key=f"invoice_charge:{n}").defer(invoice=n) for n in range(5)
    ]
    plain = charge.defer(invoice=99)
    assert [j.id for j in admin.search_jobs(app.db, search=str(plain))] == [plain]
    assert [j.id for j in admin.search_jobs(app.db, search="invoice_charge:3")] == [keyed[3]]
    found = admin.search_jobs(app.db, search="invoice_charge:", limit=2)
    assert [j.id for j in found] == keyed[::-1][:2]
    page_two = admin.search_jobs(app.db, search="invoice_charge:", limit=2, offset=2)
    assert [j.id for j in page_two] == keyed[::-1][2:4]
    assert admin.search_jobs(app.db, search="invoice%") == []  # LIKE wildcards are literal
    assert len(admin.search_jobs(app.db, status="queued", task="charge")) == 6


def test_long_running_lists_old_running_jobs(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def slow() -> None:
        pass

    old = slow.defer()
    new = slow.defer()
    db.execute(
        "UPDATE cronbase.jobs SET status = 'running', attempts = 1, lease_token = gen_random_uuid(),"
        " locked_until = now() + interval '1 minute', started_at = now() - CASE id WHEN %s "
        "THEN interval '2 hours' ELSE interval '1 second' END",
        [old],
    )
    assert [j.id for j in admin.long_running(app.db, older_than=timedelta(minutes=30))] == [old]
    assert {j.id for j in admin.long_running(app.db, older_than=timedelta(0))} == {old, new}
    # 20 seconds on a 1-second lease: renewed 20 times, far beyond what was expected of it.
    short = slow.configure(lease=timedelta(seconds=1)).defer()
    db.execute(
        "UPDATE cronbase.jobs SET status = 'running', attempts = 1, lease_token = gen_random_uuid(),"
        " locked_until = now() + interval '1 second', started_at = now() - interval '20 seconds'"
        " WHERE id = %s",
        [short],
    )
    found = admin.long_running(app.db, older_than=timedelta(minutes=30))
    assert [j.id for j in found] == [old, short]
    assert [
        j.id for j in admin.long_running(app.db, older_than=timedelta(minutes=30), leases=30)
    ] == [old]


def _fill(db: psycopg.Connection[Any]) -> None:
    # 100,000 finished jobs in the history: ages 0..99 days by id, a third each succeeded,
    # cancelled, dead; each with one attempt row. The history has day partitions from yesterday
    # on: the older days' rows are in its default partitions (as after a long outage).
    db.execute(
        "INSERT INTO cronbase.jobs_history (id, task, status, attempts, finished_at) "
        "SELECT nextval(pg_get_serial_sequence('cronbase.jobs', 'id')), 't', "
        "(ARRAY['succeeded', 'cancelled', 'dead'])[1 + i % 3], 1, "
        "now() - make_interval(days => i % 100) - interval '1 minute' "
        "FROM generate_series(1, 100000) i"
    )
    db.execute(
        "INSERT INTO cronbase.job_attempts (job_id, attempt, outcome, finished_at) "
        "SELECT id, 1, status, finished_at FROM cronbase.jobs_all"
    )


def _count(db: psycopg.Connection[Any], sql: str) -> int:
    row = db.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def test_prune_on_100000_finished_jobs(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    _fill(db)
    waiting_id = _count(
        db,
        "INSERT INTO cronbase.jobs (task, run_at) VALUES ('t', now() - interval '1 year') "
        "RETURNING id",
    )
    expected = _count(
        db,
        "SELECT count(*) FROM cronbase.jobs_all WHERE status IN ('succeeded', 'cancelled') "
        "AND finished_at < now() - interval '7 days'",
    )
    assert expected > 50_000
    removed = prune(app.db, timedelta(days=7), ["succeeded", "cancelled"])
    assert removed == expected
    assert (
        _count(
            db,
            "SELECT count(*) FROM cronbase.jobs_all WHERE status IN ('succeeded', 'cancelled') "
            "AND finished_at < now() - interval '7 days'",
        )
        == 0
    )
    # Kept: recent finished jobs, every dead one, the waiting one; and their history only.
    assert _count(db, "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'dead'") == 33_333
    assert _count(db, "SELECT count(*) FROM cronbase.jobs_all") == 100_001 - expected
    assert _count(db, "SELECT count(*) FROM cronbase.job_attempts_all") == 100_000 - expected
    assert _count(db, f"SELECT count(*) FROM cronbase.jobs_all WHERE id = {waiting_id}") == 1

    with pytest.raises(cronbase.CronbaseError, match="cannot prune jobs in status 'queued'"):
        prune(app.db, timedelta(days=1), ["queued"])


def test_retention_round_runs_one_worker_at_a_time(
    app: cronbase.App, db: psycopg.Connection[Any], database_url: str
) -> None:
    _fill(db)
    retention = Retention(succeeded=timedelta(days=50), cancelled=None, dead=timedelta(days=90))
    doomed = (
        "SELECT count(*) FROM cronbase.jobs_all WHERE (status = 'succeeded' AND finished_at < "
        "now() - interval '50 days') OR (status = 'dead' AND finished_at < now() - interval '90 days')"
    )
    expected = _count(db, doomed)
    assert expected > 10_000

    async def round_() -> int | None:
        pool = await app.async_pool()
        return await prune_once(pool, app.db, retention)

    with psycopg.connect(database_url, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [lock_key(app.schema)])
        assert asyncio.run(round_()) is None  # another worker is pruning
        other.execute("SELECT pg_advisory_unlock(%s)", [lock_key(app.schema)])
    assert asyncio.run(round_()) == expected
    assert _count(db, doomed) == 0
    assert _count(db, "SELECT count(*) FROM cronbase.jobs_all") == 100_000 - expected
    assert _count(db, "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'cancelled'") == 33_334


def test_a_worker_with_a_busy_metrics_port_fails_before_it_registers_or_starts(
    app: cronbase.App, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = app.worker(install_signal_handlers=False, metrics_port=port, burst=True)
        with (
            caplog.at_level(logging.INFO, logger="cronbase"),
            pytest.raises(cronbase.ConfigurationError) as refused,
        ):
            asyncio.run(worker.run())
    assert str(refused.value) == (
        f"cannot serve metrics on 127.0.0.1:{port}: Address already in use; pick another metrics "
        "port (--metrics-port / metrics_port), or stop what listens there"
    )
    assert not worker.started.is_set()
    assert not [r for r in caplog.records if "started" in r.getMessage()]
    assert db.execute("SELECT count(*) FROM cronbase.workers").fetchone() == (0,)
    with pytest.raises(cronbase.ConfigurationError, match="metrics_port must be a port from 1"):
        app.worker(metrics_port="9100")


def test_worker_metrics_show_a_known_workload(app: cronbase.App) -> None:
    @app.task(queue="emails")
    def ok() -> None:
        pass

    @app.task(
        queue="emails",
        max_attempts=2,
        retry=cronbase.Backoff(base=timedelta(milliseconds=1), jitter=0),
    )
    def broken() -> None:
        raise RuntimeError("no")

    for _ in range(5):
        ok.defer()
    broken.defer()
    with serving_metrics(app) as scrape:

        def done() -> str | None:
            text = scrape()
            dead = 'cronbase_jobs_finished_total{queue="emails",status="dead",task="broken"} 1.0'
            return text if text and dead in text else None

        text = wait_for(done, timeout=30, what="the workload in the metrics")
    lines = set(text.splitlines())
    assert 'cronbase_jobs_claimed_total{queue="emails",task="ok"} 5.0' in lines
    assert 'cronbase_jobs_claimed_total{queue="emails",task="broken"} 2.0' in lines
    assert 'cronbase_jobs_finished_total{queue="emails",status="succeeded",task="ok"} 5.0' in lines
    assert 'cronbase_jobs_finished_total{queue="emails",status="failed",task="broken"} 1.0' in lines
    assert 'cronbase_job_duration_seconds_count{queue="emails",task="ok"} 5.0' in lines
    # Read from the database at scrape time.
    assert 'cronbase_queue_jobs{queue="emails",status="succeeded"} 5.0' in lines
    assert 'cronbase_queue_jobs{queue="emails",status="dead"} 1.0' in lines
    assert "cronbase_database_up 1.0" in lines
    assert any(line.startswith("cronbase_worker_heartbeat_age_seconds{") for line in lines)
