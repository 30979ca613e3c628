"""Queue demand for autoscaling (operations/demand.py): due and running jobs, the oldest due
job's age, the rates and the workers needed, through the API, the CLI, the metric and the deploy
guide's SQL query (directly and through pgbouncer in transaction mode)."""

from __future__ import annotations

import json
import math
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.operations.demand import QueueDemand
from cronbase.operations.metrics import database_families, database_state
from tests.e2e.test_cli import cronbase as run_cli
from tests.integration.doc_blocks import REPO, blocks
from tests.servers import PgBouncer, PostgresCluster
from tests.servers import make_cluster as make_cluster
from tests.servers import make_pgbouncer as make_pgbouncer
from tests.servers import pg_cluster as pg_cluster
from tests.servers import pgbouncer_transaction as pgbouncer_transaction

DEPLOY = REPO / "docs" / "guides" / "deploy.md"

# Every state, in two queues. Live rows are created now; the history's as said.
WORKLOAD = """
INSERT INTO cronbase.jobs (task, queue, status, run_at) VALUES
    ('t', 'default', 'queued', now() - interval '10 minutes'),  -- due: the oldest
    ('t', 'default', 'queued', now() - interval '2 minutes'),
    ('t', 'default', 'queued', now()),
    ('t', 'default', 'queued', now() + interval '1 hour'),  -- scheduled: not due
    ('t', 'default', 'queued', 'infinity'),  -- as an event wait: not due
    ('t', 'default', 'failed', now() - interval '1 minute'),  -- retry due
    ('t', 'default', 'failed', now() + interval '1 hour'),  -- retry not due
    ('t', 'default', 'pending', now() - interval '1 hour'),  -- waits for its parents
    ('t', 'default', 'pending', now() - interval '1 hour');
INSERT INTO cronbase.jobs (task, queue, status, run_at, lease_token, locked_until, started_at)
SELECT 't', q, 'running', now() - interval '20 minutes', gen_random_uuid(),
       now() + interval '1 hour', now() - interval '1 minute'
FROM (VALUES ('default'), ('default'), ('default'), ('default'), ('emails')) v(q);
INSERT INTO cronbase.jobs (task, queue, status, run_at)
SELECT 't', 'emails', 'queued', now() - interval '30 seconds' FROM generate_series(1, 25);
-- Finished, not yet moved to the history.
INSERT INTO cronbase.jobs (task, queue, status, run_at, finished_at)
VALUES ('t', 'default', 'succeeded', now(), now());
INSERT INTO cronbase.jobs_history (id, task, queue, status, run_at, created_at, finished_at)
VALUES (1000001, 't', 'default', 'succeeded', now(), now() - interval '2 minutes', now()),
       (1000002, 't', 'default', 'succeeded', now(), now() - interval '2 minutes', now()),
       (1000003, 't', 'default', 'dead', now(), now() - interval '2 minutes', now()),
       (1000004, 't', 'default', 'cancelled', now(), now() - interval '2 minutes', now()),
       -- outside the 5-minute window: neither an arrival nor a completion
       (1000005, 't', 'default', 'succeeded', now() - interval '2 hours',
        now() - interval '2 hours', now() - interval '1 hour'),
       (1000006, 't', 'emails', 'dead', now() - interval '2 hours',
        now() - interval '2 hours', now() - interval '1 hour');
"""

# default: 4 due (3 queued, 1 failed), 4 running; emails: 25 due, 1 running.
EXPECTED = {"default": (4, 4), "emails": (25, 1)}


def load(conn: psycopg.Connection[Any]) -> None:
    conn.execute(WORKLOAD)


def guide_query() -> str:
    """The deploy guide's SQL block of its autoscaling section: what KEDA runs."""
    text = DEPLOY.read_text("utf-8")
    section = text.index("## Autoscaling on queue demand")
    sql = [b for b in blocks(DEPLOY) if b.language == "sql" and text.index(b.body) > section]
    assert len(sql) == 1
    assert sql[0].marker is None  # run by test_docs.py too
    return sql[0].body


def test_the_api_counts_work_in_hand_and_rates(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    load(db)
    found = {d.queue: d for d in app.queues.demand()}
    assert set(found) == {"default", "emails"}
    for queue, (due, running) in EXPECTED.items():
        d = found[queue]
        assert (d.due, d.running, d.desired_slots) == (due, running, due + running)
        assert d.workers_needed == math.ceil((due + running) / 10)
    assert found["default"].workers_needed == 1
    assert found["emails"].workers_needed == 3
    # The oldest due job's run_at is 10 minutes (default) and 30 seconds (emails) ago.
    default_age, emails_age = found["default"].oldest_due_age, found["emails"].oldest_due_age
    assert default_age is not None
    assert 600 <= default_age < 900
    assert emails_age is not None
    assert 30 <= emails_age < 330
    # Arrivals over 5 minutes: default's 14 live rows and 4 of the history; emails' 26.
    assert found["default"].arrivals_per_minute == pytest.approx(18 / 5)
    assert found["emails"].arrivals_per_minute == pytest.approx(26 / 5)
    # Completions: succeeded or dead within the window (1 live, 3 history), cancelled not.
    assert found["default"].completions_per_minute == pytest.approx(4 / 5)
    assert found["emails"].completions_per_minute == 0

    three = {d.queue: d.workers_needed for d in app.queues.demand(concurrency=3)}
    assert three == {"default": 3, "emails": 9}
    (only,) = app.queues.demand(["emails"])
    assert (only.queue, only.due, only.running) == ("emails", 25, 1)
    # A queue asked for with nothing in hand is zero, not missing.
    assert app.queues.demand(["idle"]) == [QueueDemand("idle", 0, 0, None, 0.0, 0.0, 10)]


def test_bad_input_is_refused_naming_the_value(app: cronbase.App) -> None:
    for bad in (0, -1, 10_001):
        with pytest.raises(cronbase.ConfigurationError, match=str(bad)):
            app.queues.demand(concurrency=bad)
    with pytest.raises(cronbase.InvalidNameError, match="no such"):
        app.queues.demand(["no such"])


@pytest.mark.anyio
async def test_the_async_twin_agrees(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    load(db)

    def counted(found: list[QueueDemand]) -> list[tuple[str, int, int, int]]:
        return [(d.queue, d.due, d.running, d.workers_needed) for d in found]

    assert counted(await app.queues.demand_async()) == counted(app.queues.demand())
    assert counted(await app.queues.demand_async()) == [("default", 4, 4, 1), ("emails", 25, 1, 3)]


def test_the_cli_prints_it_and_refuses_bad_input(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    load(db)
    shown = run_cli(database_url, "queues", "demand", "--json")
    assert shown.returncode == 0, shown.stderr
    found = {d["queue"]: d for d in json.loads(shown.stdout)}
    assert {q: (d["due"], d["running"], d["workers_needed"]) for q, d in found.items()} == {
        "default": (4, 4, 1),
        "emails": (25, 1, 3),
    }
    assert 600 <= found["default"]["oldest_due_age_seconds"] < 900
    assert found["default"]["completions_per_minute"] == 0.8

    one = run_cli(database_url, "queues", "demand", "--queue", "emails", "--concurrency", "2")
    assert one.returncode == 0, one.stderr
    (row,) = [line for line in one.stdout.splitlines() if "emails" in line]
    assert row.replace("│", " ").split()[-1] == "13"  # ceil(26 / 2) workers, the last column
    assert "default" not in one.stdout

    for args, named in (
        (["--queue", "emials"], "'emials'"),
        (["--concurrency", "0"], "0"),
        (["--concurrency", "100000"], "100000"),
    ):
        refused = run_cli(database_url, "queues", "demand", *args)
        assert refused.returncode == 2, refused
        assert named in refused.stderr


def test_the_metric_gives_the_workers_needed(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    load(db)
    families = {f.name: f for f in database_families(database_state(app.db))}
    needed = {s.labels["queue"]: s.value for s in families["cronbase_queue_workers_needed"].samples}
    assert needed == {"default": 1, "emails": 3}


def test_the_guide_query_gives_the_desired_slots(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    load(db)
    ((slots,),) = db.execute(guide_query().encode()).fetchall()
    (default,) = app.queues.demand(["default"])
    assert slots == default.desired_slots == 8


def test_the_guide_query_reads_no_history_partition(db: psycopg.Connection[Any]) -> None:
    """Cheap as a poll: the history is partitioned by status, none of its partitions can hold
    the statuses asked for, so the plan reads the live table only."""
    plan = "\n".join(r[0] for r in db.execute(b"EXPLAIN " + guide_query().encode()).fetchall())
    assert "jobs_history" not in plan, plan


@pytest.mark.slow
def test_the_guide_query_through_pgbouncer_in_transaction_mode(
    pg_cluster: PostgresCluster, pgbouncer_transaction: PgBouncer
) -> None:
    direct = pg_cluster.create_database("app")
    cronbase.App(direct).migrate()
    with psycopg.connect(direct, autocommit=True) as conn:
        load(conn)
    query = guide_query()
    # What KEDA does: a connection, the query as text, repeated; no session state.
    for _ in range(3):
        with psycopg.connect(pgbouncer_transaction.url("app"), autocommit=True) as conn:
            ((slots,),) = conn.execute(query.encode()).fetchall()
        assert slots == 8


def test_a_paused_queue_asks_for_its_running_jobs_only_and_a_limit_caps_it(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    load(db)  # default: 4 due, 4 running; emails: 25 due, 1 running

    def slots() -> dict[str, tuple[int, int]]:
        found = app.queues.demand(concurrency=1)
        return {d.queue: (d.desired_slots, d.workers_needed) for d in found}

    assert slots() == {"default": (8, 8), "emails": (26, 26)}
    app.queues.pause("emails")  # its due jobs wait: no worker may claim them
    app.queues.set_limit("default", 5)  # at most 5 running at once, however many workers
    assert slots() == {"default": (5, 5), "emails": (1, 1)}
    # A limit lowered below what runs now: the running jobs still hold their slots.
    app.queues.set_limit("default", 2)
    assert slots()["default"] == (4, 4)
    (emails,) = app.queues.demand(["emails"])
    assert (emails.paused, emails.max_running, emails.due) == (True, None, 25)
    families = {f.name: f for f in database_families(database_state(app.db))}
    needed = {s.labels["queue"]: s.value for s in families["cronbase_queue_workers_needed"].samples}
    assert needed == {"default": 1, "emails": 1}
    app.queues.resume("emails")
    assert slots()["emails"] == (26, 26)
