"""The hot statements' plans on a table that has lived a while (bench/README.md, workload 4).

The plain claim reads jobs by key only (its tickets' jobs, the tick's ranges: migration 0020),
however many finished and future rows the table holds; completing a batch must probe the primary
key once per outcome; the fair claim probes its indexes. Each is checked in the custom plan
(EXPLAIN with parameters) and in the generic plan a prepared statement ends up with (psycopg
prepares a statement on its fifth use).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.db import migrate
from cronbase.worker.claim import ClaimedJob, claim_params, claim_statement
from cronbase.worker.fair_claim import fair_params, fair_statement, sized_statement
from tests.conftest import SCHEMA, claim_rows
from tests.servers import PostgresCluster

FINISHED = 20_000
FUTURE = 2_000
DUE = 50


@pytest.fixture(scope="module")
def database_url(database_url: str) -> Iterator[str]:
    """The session's database when its server can load auto_explain (the plans of the
    statements claim_tickets runs are read through it); the embedded server cannot: then a
    database on a PostgreSQL 15 cluster of this module's own (tests/servers.py)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        try:
            conn.execute("LOAD 'auto_explain'")
        except psycopg.errors.UndefinedFile:
            pass
        else:
            yield database_url
            return
    with PostgresCluster() as cluster:
        url = cluster.create_database("plans")
        with psycopg.connect(url, autocommit=True) as conn:
            migrate.apply_migrations(conn, SCHEMA)
        yield url


@pytest.fixture
def lived_in(app: cronbase.App, db: psycopg.Connection[Any]) -> cronbase.App:
    """Many finished rows, some future ones, a few due, and fresh statistics."""
    db.execute(
        """
        INSERT INTO cronbase.jobs (task, payload, status, attempts, started_at, finished_at)
        SELECT 'old', jsonb_build_object('n', i), 'succeeded', 1, now(), now()
        FROM generate_series(1, %s) AS i
        """,
        (FINISHED,),
    )
    db.execute(
        """
        INSERT INTO cronbase.jobs (task, payload, run_at)
        SELECT 'later', '{}', now() + interval '1 day' + i * interval '1 s'
        FROM generate_series(1, %s) AS i
        """,
        (FUTURE,),
    )
    db.execute(
        "INSERT INTO cronbase.jobs (task, payload) SELECT 'due', '{}' FROM generate_series(1, %s)",
        (DUE,),
    )
    db.execute("ANALYZE cronbase.jobs")
    return app


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def explain(db: psycopg.Connection[Any], statement: bytes, params: Any = None) -> list[Any]:
    row = db.execute(b"EXPLAIN (FORMAT JSON) " + statement, params).fetchone()
    assert row is not None
    data = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    return list(plan_nodes(data[0]["Plan"]))


def generic_plan(db: psycopg.Connection[Any], statement: bytes, args: str) -> list[Any]:
    """The plan PostgreSQL uses for the prepared statement once it goes generic."""
    numbered: dict[str, str] = {}

    def number(match: re.Match[bytes]) -> bytes:
        name = match.group(1).decode()
        numbered.setdefault(name, f"${len(numbered) + 1}")
        return numbered[name].encode()

    body = re.sub(rb"%\((\w+)\)[sb]", number, statement)
    db.execute(b"PREPARE hot_statement AS " + body)
    db.execute("SET plan_cache_mode = force_generic_plan")
    try:
        return explain(db, f"EXECUTE hot_statement({args})".encode())
    finally:
        db.execute("RESET plan_cache_mode")
        db.execute("DEALLOCATE hot_statement")


def arguments(statement: bytes, values: dict[str, str]) -> str:
    """EXECUTE's arguments for a statement's parameters, numbered in order of first use (as
    generic_plan numbers them), each given as SQL text in ``values``."""
    names = re.findall(rb"%\((\w+)\)[sb]", statement)
    return ", ".join(values[name] for name in dict.fromkeys(n.decode() for n in names))


def scans_of_jobs(nodes: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(scan type, index) of every scan of cronbase.jobs (the UPDATE node itself is no scan). A
    bitmap scan is named by its index scans (a Bitmap Index Scan names no relation): a bitmap of
    the primary key fetches the rows it names and no other."""
    scans = [
        (n["Node Type"], n.get("Index Name"))
        for n in nodes
        if n.get("Relation Name") == "jobs"
        and n["Node Type"].endswith("Scan")
        and n["Node Type"] != "Bitmap Heap Scan"
    ]
    for n in nodes:
        if n["Node Type"] == "Bitmap Heap Scan" and n.get("Relation Name") == "jobs":
            scans.extend(
                (b["Node Type"], b.get("Index Name"))
                for b in plan_nodes(n)
                if b["Node Type"] == "Bitmap Index Scan"
            )
    return scans


# What the plain claim may read of cronbase.jobs (migration 0020): the primary key (the jobs its
# tickets name, the successes it carries), and the tick's ranges (the jobs of the transactions
# since the last tick; the jobs come due since). Never a walk of waiting jobs, nor a scan or a
# hash of the table: while a horizon is held, those are where the dead rows are.
CLAIM_READS = {
    ("Index Scan", "jobs_pkey"),
    ("Bitmap Index Scan", "jobs_pkey"),
    ("Index Scan", "jobs_ready_xid_idx"),
    ("Index Only Scan", "jobs_ready_xid_idx"),
    ("Index Scan", "jobs_later_idx"),
    ("Index Only Scan", "jobs_later_idx"),
}


def claim_plans(
    db: psycopg.Connection[Any], statement: bytes, params: Any, mode: str = "auto"
) -> list[Any]:
    """The plans of claim_jobs and of every statement its claim_tickets runs (auto_explain,
    nested statements included: an EXPLAIN of the call shows a Function Scan only), each as
    its list of nodes, under plan_cache_mode ``mode`` (force_generic_plan: the plans a worker's
    session settles on). Run in a transaction rolled back."""
    plans: list[Any] = []

    def seen(diagnostic: psycopg.errors.Diagnostic) -> None:
        message = diagnostic.message_primary or ""
        if message.startswith("duration:") and "plan:" in message:
            data = json.loads(message.split("plan:", 1)[1])
            plans.append(list(plan_nodes(data["Plan"])))

    db.execute("LOAD 'auto_explain'")
    settings = {
        "auto_explain.log_min_duration": "0",
        "auto_explain.log_nested_statements": "on",
        "auto_explain.log_format": "json",
        "client_min_messages": "log",
        "plan_cache_mode": mode,
    }
    db.add_notice_handler(seen)
    try:
        with db.transaction(force_rollback=True):
            for name, value in settings.items():
                db.execute(f"SET LOCAL {name} = '{value}'")
            db.execute(statement, params).fetchall()
    finally:
        db.remove_notice_handler(seen)
    assert len(plans) >= 3, plans  # the call, and the statements of the claim it made
    return plans


def assert_reads_by_key(plans: list[Any]) -> None:
    for nodes in plans:
        scans = scans_of_jobs(nodes)
        assert set(scans) <= CLAIM_READS, scans
        others = [
            (n["Node Type"], n.get("Index Name"))
            for n in nodes
            if n.get("Relation Name") in ("tickets", "lane_claims", "ticks")
            and n["Node Type"].endswith("Scan")
        ]
        assert all(kind in ("Index Scan", "Index Only Scan") for kind, _ in others), others


@pytest.mark.parametrize(
    "tasks", [None, ["due", "later", "old"], ["due", "other"]], ids=["any", "all-known", "few"]
)
def test_the_claim_reads_jobs_by_key_only_on_a_table_of_finished_jobs(
    lived_in: cronbase.App, db: psycopg.Connection[Any], tasks: list[str] | None
) -> None:
    q = lived_in.queries
    done = [claimed(1), claimed(2)]
    params = claim_params(done=done, limit=10, worker="plan-test", tasks=tasks)
    # The first claim ticks (every due job gets a ticket), the next take tickets there; custom
    # plans, then the generic ones a worker's session settles on.
    for mode in ("auto", "auto", "force_generic_plan"):
        assert_reads_by_key(claim_plans(db, claim_statement(q, None, 10), params, mode))
        claim_rows(lived_in, db, 1, "plan-test", tasks=tasks)
    # And it claims what is due, in order.
    rows = claim_rows(lived_in, db, 10, "plan-test", tasks=tasks)[0]
    assert [job.task for job in rows] == ["due"] * 10
    assert [job.id for job in rows] == sorted(job.id for job in rows)


def test_a_task_aware_claim_leaves_jobs_of_tasks_it_does_not_know(
    lived_in: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    # No live worker knows 'due': its jobs are parked (no ticket), untouched otherwise.
    assert claim_rows(lived_in, db, 60, "plan-test", tasks=["other"])[0] == []
    rows = db.execute(
        "SELECT status, attempts, ready_xid IS NULL FROM cronbase.jobs WHERE task = 'due'"
    ).fetchall()
    assert set(rows) == {("queued", 0, True)}
    assert len(rows) == DUE
    # A worker that knows it starts (register_worker, then unpark_jobs): they are claimed.
    db.execute(lived_in.queries.unpark_jobs, {"tasks": "{due}"})
    assert len(claim_rows(lived_in, db, 60, "plan-test", tasks=["due"])[0]) == DUE


def test_a_job_of_a_task_a_live_worker_knows_goes_round_to_it(
    lived_in: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    db.execute(
        "INSERT INTO cronbase.workers (id, hostname, pid, concurrency, tasks) "
        "VALUES ('knows', 'h', 1, 1, '{due}')"
    )
    assert claim_rows(lived_in, db, 60, "other-worker", tasks=["other"])[0] == []
    # Made ready again (a new ticket at the lane's end), not parked: the worker that knows the
    # task takes them without waiting for a round of its own.
    assert db.execute(
        "SELECT count(*) FROM cronbase.jobs WHERE task = 'due' AND ready_xid IS NULL"
    ).fetchone() == (0,)
    assert len(claim_rows(lived_in, db, 60, "knows", tasks=["due"])[0]) == DUE


def test_claim_in_queues_reads_jobs_by_key_only(
    lived_in: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    q = lived_in.queries
    params = claim_params(
        limit=10, worker="plan-test", queues=["default"], tasks=["due", "later", "old"]
    )
    assert_reads_by_key(claim_plans(db, claim_statement(q, ["default"], 10), params))
    assert claim_rows(lived_in, db, 10, "plan-test", queues=["elsewhere"])[0] == []
    rows = claim_rows(lived_in, db, 10, "plan-test", queues=["default"], tasks=["due"])[0]
    assert [job.task for job in rows] == ["due"] * 10


def claimed(job_id: int) -> ClaimedJob:
    """A made-up attempt whose success a claim carries (its token matches nothing)."""
    return ClaimedJob(job_id, "t", "default", {}, 100, 1, 1, uuid.uuid4(), timedelta(minutes=1))


def test_finish_probes_the_primary_key_per_outcome(
    lived_in: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    # Not jobs_running_lease_idx: statistics taken when few jobs ran make it look tiny, but a
    # busy worker fills it with dead entries between vacuums (bench/README.md).
    q = lived_in.queries
    args = "'{1,2}'::bigint[], '{}'::uuid[], '{}'::text[], '{}'::float8[], '{}'::text[], "
    args += "'{}'::text[], '{}'::text[], '{}'::integer[], 'plan-test'"
    scans = scans_of_jobs(generic_plan(db, q.finish_jobs, args))
    # target locks the rows, then retried updates and gone deletes (moves) them: each a probe.
    assert scans == [("Index Scan", "jobs_pkey")] * 3, scans


def fair_values() -> dict[str, str]:
    """EXECUTE's arguments of a fair claim carrying one success, for a worker of every queue."""
    return {
        "done_ids": "'{1}'::bigint[]",
        "done_tokens": f"'{{{uuid.uuid4()}}}'::uuid[]",
        "done_results": "NULL::text[]",
        "after": "''",
        "worker": "'plan-test'",
        "tasks": "'{fair}'::text[]",
        "queues": "NULL::text[]",
    }


@pytest.mark.parametrize("scan", [True, False], ids=["window", "between-passes"])
def test_the_fair_claim_probes_indexes_only(
    lived_in: cronbase.App, db: psycopg.Connection[Any], scan: bool
) -> None:
    """claim_fair_jobs (db/sql/fair.sql) beside the finished rows and a fair backlog of a few
    keys: every read of cronbase.jobs is an index probe of jobs_flow_due_idx (the key window, the
    due probe, the per-key pick) or of the primary key (the lease, the successes carried), in the
    custom plan and in the generic one; never a scan of the table or a hash of waiting jobs.
    Both forms: with the window, and with the one key a claim between passes looks at."""
    db.execute(
        """
        INSERT INTO cronbase.jobs (task, payload, flow_key)
        SELECT 'fair', '{}', 'fair:default|t' || (i % 5) FROM generate_series(1, 5000) AS i
        """
    )
    db.execute("ANALYZE cronbase.jobs")
    q = lived_in.queries
    params = fair_params(
        done=[claimed(1)], limit=10, worker="plan-test", tasks=["fair"], queues=None
    )
    allowed = {("Index Scan", "jobs_flow_due_idx"), ("Index Only Scan", "jobs_flow_due_idx")}
    allowed |= {("Index Scan", "jobs_pkey")}
    # As the worker runs it: its sizes written in (sized_statement), so the generic plan is the
    # one a prepared claim settles on.
    statement = sized_statement(q.claim_fair_jobs, 10, scan=scan)
    assert set(scans_of_jobs(explain(db, statement, params))) <= allowed
    values = fair_values()
    args = arguments(statement, values)
    assert set(scans_of_jobs(generic_plan(db, statement, args))) <= allowed


@pytest.mark.parametrize("analyzed", [False, True], ids=["as-claims-left-it", "analyzed"])
def test_the_fair_claim_reads_the_next_busy_keys_in_order_among_many(
    lived_in: cronbase.App, db: psycopg.Connection[Any], analyzed: bool
) -> None:
    """With 1,000 busy keys, a worker of every queue's prepared fair claim (its generic plan)
    reads the few keys it probes by walking fair_keys_next_idx and stopping: not every busy key's
    row, sorted. A queue test in the statement, unknown to the generic plan, made the planner
    fetch and sort them all (0.24 of ~1.3 ms a claim; bench/README.md), with the statistics
    the claims' writes leave (none yet) and with fresh ones."""
    db.execute(
        """
        INSERT INTO cronbase.fair_keys (scope, pass)
        SELECT 'fair:default|t' || i, i / 1000.0 FROM generate_series(1, 1000) AS i
        """
    )
    db.execute(
        """
        INSERT INTO cronbase.jobs (task, payload, flow_key)
        SELECT 'fair', '{}', 'fair:default|t' || (i % 1000) FROM generate_series(1, 20000) AS i
        """
    )
    db.execute("ANALYZE cronbase.jobs")
    if analyzed:
        db.execute("ANALYZE cronbase.fair_keys")
    q = lived_in.queries
    statement = fair_statement(q, 10, None)
    values = fair_values()
    nodes = generic_plan(db, statement, arguments(statement, values))
    reads = [
        (n["Node Type"], n.get("Index Name"))
        for n in nodes
        if n.get("Relation Name") == "fair_keys" and n["Node Type"].endswith("Scan")
    ]
    assert ("Index Scan", "fair_keys_next_idx") in reads, reads
    assert not [r for r in reads if r[0].startswith("Bitmap")], reads
    # The worker of some queues has its own form, which still claims from those queues only.
    in_queues = fair_statement(q, 10, ["default"])
    assert in_queues != statement
    assert b"%(queues)s" in in_queues
    assert b"%(queues)s" not in statement
