"""cronbase through a real pgbouncer: transaction mode (no prepared statements, no session state,
poll instead of LISTEN unless a listen URL is given) and session mode."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

import cronbase
from cronbase.operations.retention import Retention
from tests.conftest import wait_for
from tests.e2e.harness import (
    WorkerProcesses,
    is_registered,
    reset_test_tables,
    retention_round,
)
from tests.e2e.worker_app import make_app
from tests.servers import PgBouncer, PostgresCluster
from tests.servers import make_cluster as make_cluster
from tests.servers import make_pgbouncer as make_pgbouncer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

THREADS = 16
EACH = 25


@pytest.fixture
def stack(
    make_cluster: Callable[[], PostgresCluster], make_pgbouncer: Callable[..., PgBouncer]
) -> tuple[PostgresCluster, PgBouncer, PgBouncer, str]:
    cluster = make_cluster()
    direct = cluster.create_database("app")
    cronbase.App(direct).migrate()
    transaction = make_pgbouncer(cluster, pool_mode="transaction", default_pool_size=5)
    session = make_pgbouncer(cluster, pool_mode="session", default_pool_size=40)
    return cluster, transaction, session, direct


def count(url: str, query: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def test_migrate_through_a_transaction_pooler_refuses_and_names_the_fix(
    stack: tuple[PostgresCluster, PgBouncer, PgBouncer, str],
) -> None:
    _, transaction, _, _ = stack
    app = cronbase.App(transaction.url("app"), pooler="transaction")
    with pytest.raises(cronbase.ConfigurationError, match="direct or session-mode URL"):
        app.migrate()


def test_concurrent_defers_and_key_races_through_transaction_mode(
    stack: tuple[PostgresCluster, PgBouncer, PgBouncer, str],
) -> None:
    _, transaction, _, direct = stack
    app = cronbase.App(transaction.url("app"), pooler="transaction", pool_size=8)

    @app.task
    def send(n: int) -> None: ...

    errors: list[BaseException] = []
    keyed: list[int] = []

    def producer(t: int) -> None:
        try:
            for i in range(EACH):
                send.defer(n=t * EACH + i)
            # Every thread races for the same key: one job, every caller gets its id.
            keyed.append(send.configure(idempotency_key="the-one").defer(n=-1))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    async def async_producers() -> None:
        async def one(t: int) -> None:
            for i in range(EACH):
                await send.defer_async(n=10_000 + t * EACH + i)
            await send.defer_many_async([{"n": 20_000 + t}])

        await asyncio.gather(*(one(t) for t in range(THREADS)))
        await app.aclose()

    asyncio.run(async_producers())
    app.close()
    assert errors == []
    assert len(set(keyed)) == 1
    assert (
        count(direct, "SELECT count(*) FROM cronbase.jobs_all") == 2 * THREADS * EACH + THREADS + 1
    )


def drain_with_workers(
    url: str, direct: str, tmp_path: Path, env: dict[str, str], jobs: int
) -> list[str]:
    """Three worker processes drain ``jobs`` jobs; returns their logs."""
    with psycopg.connect(direct, autocommit=True) as conn:
        reset_test_tables(conn)
        with WorkerProcesses(url, tmp_path, env=env) as workers:
            names = ("A", "B", "C")
            processes = [workers.start(name, "--concurrency", "8") for name in names]
            for name in names:
                wait_for(partial(is_registered, conn, name), timeout=60, what=f"worker {name}")
            app = make_app(url)
            ids = app.get_task("execute_once").defer_many([{"n": n} for n in range(jobs)])
            app.close()
            assert len(set(ids)) == jobs
            wait_for(
                lambda: (
                    count(
                        direct, "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'succeeded'"
                    )
                    == jobs
                ),
                timeout=120,
                what=f"{jobs} jobs to succeed",
            )
            executions = conn.execute("SELECT job_id, n FROM test_executions").fetchall()
            assert len(executions) == jobs  # exactly once: none twice, none missing
            assert {job_id for job_id, _ in executions} == set(ids)
            assert count(direct, "SELECT count(*) FROM cronbase.jobs_all WHERE attempts <> 1") == 0
            for process in processes:
                process.send(signal.SIGTERM)
            assert [process.wait_exit(timeout=60) for process in processes] == [0, 0, 0]
            return [process.log() for process in processes]


def test_three_workers_drain_2000_jobs_exactly_once_through_transaction_mode(
    stack: tuple[PostgresCluster, PgBouncer, PgBouncer, str], tmp_path: Path
) -> None:
    _, transaction, _, direct = stack
    logs = drain_with_workers(
        transaction.url("app"), direct, tmp_path, {"CRONBASE_POOLER": "transaction"}, 2000
    )
    # No listen URL through a transaction pooler: the workers say they poll.
    assert all("polling every" in log for log in logs), logs[0]
    assert not any("prepared statement" in log for log in logs), logs


def test_with_a_listen_url_transaction_mode_workers_listen_directly(
    stack: tuple[PostgresCluster, PgBouncer, PgBouncer, str], tmp_path: Path
) -> None:
    _, transaction, _, direct = stack
    env = {"CRONBASE_POOLER": "transaction", "CRONBASE_LISTEN_URL": direct}
    logs = drain_with_workers(transaction.url("app"), direct, tmp_path, env, 300)
    assert not any("polling every" in log for log in logs), logs[0]


def test_three_workers_drain_exactly_once_through_session_mode(
    stack: tuple[PostgresCluster, PgBouncer, PgBouncer, str], tmp_path: Path
) -> None:
    _, _, session, direct = stack
    drain_with_workers(session.url("app"), direct, tmp_path, {}, 2000)


def test_schedules_pruning_and_effects_through_transaction_mode(
    stack: tuple[PostgresCluster, PgBouncer, PgBouncer, str],
) -> None:
    _, transaction, _, direct = stack
    app = cronbase.App(transaction.url("app"), pooler="transaction")

    @app.periodic(cron="* * * * *", key="every-minute")
    @app.task
    def tick_job(scheduled_at: Any = None) -> None: ...

    # Several schedulers tick at once through the pooler: one job per slot.
    async def tick_all() -> list[list[int]]:
        tickers = [cronbase.Scheduler(app.db, app.tasks, app.periodic_schedules) for _ in range(4)]
        # Two minutes on: a slot is due (the declared schedule starts from the database's now).
        later = datetime.now(UTC) + timedelta(minutes=2)
        return list(await asyncio.gather(*(t.tick(later) for t in tickers)))

    fired = asyncio.run(tick_all())
    # SKIP LOCKED shares the schedule out: one ticker fires the slot, the others find it taken.
    assert len({job_id for ids in fired for job_id in ids}) == 1
    assert count(direct, "SELECT count(*) FROM cronbase.jobs_all") == 1

    # The pruner's lock is transaction-scoped: it works, one pruner at a time, through it.
    with psycopg.connect(direct, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO cronbase.jobs (task, payload, status, attempts, started_at, finished_at)"
            " SELECT 'old', '{}', 'succeeded', 1, now() - interval '30 days',"
            " now() - interval '30 days' FROM generate_series(1, 1500)"
        )

    assert retention_round(app, Retention(succeeded=timedelta(days=7))) == 1500

    with app.effects.once("charge:1") as effect:
        assert not effect.done
        effect.record(charge="ch_1")
    with app.effects.once("charge:1") as again:
        assert again.done
    assert app.effects.get("charge:1").result == {"charge": "ch_1"}
    app.close()


def test_the_command_takes_the_pooler_and_refuses_to_migrate_through_it(
    stack: tuple[PostgresCluster, PgBouncer, PgBouncer, str],
) -> None:
    _, transaction, _, direct = stack
    url = transaction.url("app")
    refused = cronbase_cli(url, "--pooler", "transaction", "migrate")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        "error: cannot migrate through a transaction pooler (the migration lock is held for the "
        "session); run `cronbase migrate` with a direct or session-mode URL "
        "(--database-url postgresql://...@db-host:5432/...)"
    ]
    # Everything else works through it; the listen URL goes direct.
    enqueued = cronbase_cli(
        url, "--pooler", "transaction", "--listen-url", direct, "stats", "--json"
    )
    assert enqueued.returncode == 0, enqueued.stderr
    bad = cronbase_cli(url, "--pooler", "statement", "stats")
    assert bad.returncode == 2
    assert "'statement' is not one of 'session', 'transaction'" in bad.stderr


def cronbase_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRONBASE_", "DATABASE_URL"))}
    return subprocess.run(
        [str(Path(sys.executable).with_name("cronbase")), "--database-url", url, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_dashboard_through_transaction_mode(
    stack: tuple[PostgresCluster, PgBouncer, PgBouncer, str],
) -> None:
    from cronbase.dashboard import create_app

    _, transaction, _, _ = stack
    app = cronbase.App(transaction.url("app"), pooler="transaction")

    @app.task
    def shown(n: int) -> None: ...

    job_id = shown.defer(n=1)
    web = create_app(app)

    async def pages() -> list[tuple[str, int, str]]:
        transport = httpx.ASGITransport(app=web, client=("127.0.0.1", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            found = []
            # Each page more than psycopg's prepare threshold (5): no prepared statement.
            for _ in range(6):
                for path in ("/", "/jobs", f"/jobs/{job_id}", "/schedules", "/effects", "/audit"):
                    response = await http.get(path)
                    found.append((path, response.status_code, response.text))
        await app.aclose()
        return found

    found = asyncio.run(pages())
    assert {(path, status) for path, status, _ in found if status != 200} == set()
    assert any(f"/jobs/{job_id}" == path and "shown" in text for path, _, text in found)
    app.close()


def test_limits_hold_through_transaction_mode(
    stack: tuple[PostgresCluster, PgBouncer, PgBouncer, str], tmp_path: Path
) -> None:
    """The flow claim's two statements share a transaction, and its advisory locks are
    transaction-level: through a transaction pooler (5 server connections for three workers)
    a lock cannot outlive its claim or leak to another client's transaction."""
    from tests.e2e.flow_app import FLOW_TABLE, make_flow_app
    from tests.e2e.test_flow_limits import max_running

    _, transaction, _, direct = stack
    url = transaction.url("app")
    with psycopg.connect(direct, autocommit=True) as conn:
        conn.execute(FLOW_TABLE)
        env = {"CRONBASE_POOLER": "transaction"}
        with WorkerProcesses(url, tmp_path, module="tests.e2e.flow_app", env=env) as workers:
            for name in ("A", "B", "C"):
                workers.start(name, "--concurrency", "8", "--poll-interval", "0.2")
            app = make_flow_app(url)
            app.tasks["per_tenant"].defer_many(
                [{"tenant": t, "ms": 5 + (n * 7) % 30} for n in range(20) for t in range(4)]
            )
            app.tasks["three_at_a_time"].defer_many(
                [{"n": n, "ms": 5 + (n * 11) % 30} for n in range(40)]
            )
            app.close()
            wait_for(
                lambda: (
                    count(
                        direct, "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'succeeded'"
                    )
                    == 120
                ),
                timeout=120,
                what="120 limited jobs to succeed",
            )
        per_key = max_running(conn, "CASE WHEN task = 'per_tenant' THEN key END")
        per_key.pop(None, None)
        per_task = max_running(conn, "task")
    assert max(per_key.values()) == 2
    assert per_task["three_at_a_time"] == 3


def test_workflows_and_event_waits_through_transaction_mode(
    stack: tuple[PostgresCluster, PgBouncer, PgBouncer, str], tmp_path: Path
) -> None:
    """A group's fan-in (insert_graph in one statement, the trigger in the finishing worker's
    transaction), a durable sleep and an event wait (suspend_jobs after its advisory try-locks,
    in one transaction; emit_event after its lock) through a transaction pooler."""
    from tests.e2e.durable_app import DURABLE_TABLE, make_durable_app

    _, transaction, _, direct = stack
    url = transaction.url("app")
    with psycopg.connect(direct, autocommit=True) as conn:
        conn.execute(DURABLE_TABLE)
        env = {"CRONBASE_POOLER": "transaction"}
        with WorkerProcesses(url, tmp_path, module="tests.e2e.durable_app", env=env) as workers:
            for name in ("A", "B"):
                workers.start(name, "--concurrency", "8", "--poll-interval", "0.2")
            app = make_durable_app(url)
            t = app.tasks
            callback = (
                cronbase.group([t["square"].s(n=n) for n in range(50)])
                .then(t["gather"].s())
                .defer()
            )
            waiter = t["awaits_event"].defer(key="paid:pool")
            wait_for(
                lambda: count(
                    direct, f"SELECT count(*) FROM cronbase.jobs_all WHERE id = {waiter} "
                    "AND waiting_for = 'paid:pool'"
                ) == 1,
                timeout=60,
                what="the waiter suspended",
            )  # fmt: skip
            assert app.events.emit("paid:pool", {"ok": True}) is True
            for job_id in (callback, waiter):
                wait_for(
                    lambda job_id=job_id: count(
                        direct, f"SELECT count(*) FROM cronbase.jobs_all WHERE id = {job_id} "
                        "AND status = 'succeeded'"
                    ) == 1,
                    timeout=120,
                    what=f"job {job_id} to succeed",
                )  # fmt: skip
            assert app.jobs.get(callback).result == sum(n * n for n in range(50))
            assert app.jobs.get(waiter).result == {"ok": True}
            app.close()
