"""Fair share across worker processes, directly and through pgbouncer's transaction mode: tenant
a defers a backlog, then tenant b a few jobs; b's jobs start among the next few slots the fleet
frees, not after a's backlog, and every job runs exactly once."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import wait_for
from tests.e2e.fair_app import FAIR_TABLE, make_fair_app
from tests.e2e.harness import WorkerProcesses, is_registered
from tests.e2e.test_cli import cronbase, ok
from tests.servers import PgBouncer, PostgresCluster
from tests.servers import make_cluster as make_cluster
from tests.servers import make_pgbouncer as make_pgbouncer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

WORKERS = 3
CONCURRENCY = 4
A_JOBS = 600
B_JOBS = 30


def succeeded(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'succeeded'"
    ).fetchone()
    return int(row[0]) if row else 0


def drain_a_backlog_and_a_few(url: str, direct: str, tmp_path: Path, env: dict[str, str]) -> None:
    with psycopg.connect(direct, autocommit=True) as conn:
        conn.execute(FAIR_TABLE)
        with WorkerProcesses(url, tmp_path, module="tests.e2e.fair_app", env=env) as fleet:
            names = [f"w{n}" for n in range(WORKERS)]
            for name in names:
                fleet.start(name, "--concurrency", str(CONCURRENCY), "--poll-interval", "0.1")
            for name in names:
                wait_for(partial(is_registered, conn, name), timeout=60, what=f"worker {name}")
            app = make_fair_app(url)
            task = app.get_task("import_row")
            task.defer_many([{"tenant": "a", "n": n, "ms": 5} for n in range(A_JOBS)])
            # b arrives once a's backlog is being worked through.
            wait_for(lambda: succeeded(conn) >= 50, timeout=60, what="a's first jobs")
            task.defer_many([{"tenant": "b", "n": n, "ms": 5} for n in range(B_JOBS)])
            app.close()
            wait_for(
                lambda: succeeded(conn) == A_JOBS + B_JOBS, timeout=180, what="every job to succeed"
            )
            starts = [
                tenant
                for (tenant,) in conn.execute(
                    "SELECT tenant FROM fair_executions ORDER BY start_at, id"
                ).fetchall()
            ]
            pids = conn.execute("SELECT count(DISTINCT pid) FROM fair_executions").fetchone()
    # Exactly once: each job started once.
    assert len(starts) == A_JOBS + B_JOBS
    assert pids == (WORKERS,)
    # From b's first start, b has half the fleet's slots: its 30 jobs start within the next
    # ~60 starts (slack for the jobs each worker had claimed already).
    first_b = starts.index("b")
    last_b = len(starts) - 1 - starts[::-1].index("b")
    window = starts[first_b : last_b + 1]
    assert len(window) <= 2 * B_JOBS + WORKERS * CONCURRENCY, window
    # Under FIFO b would have waited for a's whole backlog: here it did not.
    assert starts[last_b + 1 :].count("a") > A_JOBS / 2


def test_a_small_tenant_shares_the_fleet_with_a_backlog(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # db: the test database emptied first (a job another test left succeeded counts too).
    drain_a_backlog_and_a_few(database_url, database_url, tmp_path, {})


def test_fair_share_through_a_transaction_pooler(
    make_cluster: Callable[[], PostgresCluster],
    make_pgbouncer: Callable[..., PgBouncer],
    tmp_path: Path,
) -> None:
    cluster = make_cluster()
    direct = cluster.create_database("app")
    owner = make_fair_app(direct)
    owner.migrate()
    owner.close()
    pooler = make_pgbouncer(cluster, pool_mode="transaction", default_pool_size=5)
    drain_a_backlog_and_a_few(
        pooler.url("app"), direct, tmp_path, {"CRONBASE_POOLER": "transaction"}
    )


def test_the_cli_sets_weights_and_shows_the_busiest_keys(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    app = make_fair_app(database_url)
    task = app.get_task("import_row")
    task.defer_many([{"tenant": "a", "n": n, "ms": 0} for n in range(3)])
    task.defer(tenant="b", n=0, ms=0)
    app.close()
    out = ok(cronbase(database_url, "queues", "weight", "default", "b", "2.5"))
    assert out.strip() == "queue 'default': fair key 'b' has weight 2.5"
    shown = json.loads(ok(cronbase(database_url, "queues", "fair", "default", "--json")))
    assert [(k["key"], k["waiting"], k["weight"]) for k in shown] == [("a", 3, 1.0), ("b", 1, 2.5)]
    assert "share" in ok(cronbase(database_url, "queues", "fair"))
    bad = cronbase(database_url, "queues", "weight", "default", "b", "nan")
    assert bad.returncode != 0
    assert "weight must be a number above 0" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    audit = db.execute("SELECT action, actor FROM cronbase.audit_log").fetchall()
    assert [action for action, _ in audit] == ["queue.weight"]
    assert audit[0][1].startswith("cli:")
