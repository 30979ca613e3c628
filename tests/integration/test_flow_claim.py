"""claim_flow_jobs on its own: admission per key, task and queue, rates, round robin, locks held
by another claimer (the race of pgqueuer #761/#774, replayed with two real connections)."""

from __future__ import annotations

from typing import Any

import psycopg

import cronbase
from cronbase.worker.flow_claim import (
    FlowResult,
    candidate_params,
    claim_flow_jobs_sync,
    register_params,
    task_flows,
)


def claim(
    app: cronbase.App,
    conn: psycopg.Connection[Any],
    limit: int,
    *,
    after: str | None = None,
    worker: str = "w1",
) -> FlowResult:
    params = candidate_params(
        schema=app.schema,
        limit=limit,
        flows=task_flows(app.tasks),
        after=after,
        tasks=sorted(app.tasks),
        queues=None,
    )
    return claim_flow_jobs_sync(conn, app.queries, params, worker=worker, limit=limit)


def register(app: cronbase.App, conn: psycopg.Connection[Any]) -> None:
    conn.execute(app.queries.register_task_limits, register_params(app.tasks))


def running(db: psycopg.Connection[Any]) -> list[tuple[str, str | None]]:
    return db.execute(
        "SELECT task, flow_key FROM cronbase.jobs_all WHERE status = 'running' ORDER BY id"
    ).fetchall()


def test_key_concurrency_admits_one_job_per_key(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(concurrency_key="tenant:{tenant}", key_concurrency=1)
    def per_tenant(tenant: int, n: int) -> None: ...

    register(app, db)
    per_tenant.defer_many([{"tenant": t, "n": n} for t in range(3) for n in range(4)])
    got = claim(app, db, 10)
    assert sorted(j.payload["tenant"] for j in got.result.jobs) == [0, 1, 2]
    # Full: the next claim finds nothing (and leaves the other 9 queued).
    again = claim(app, db, 10)
    assert again.result.jobs == []
    assert db.execute(
        "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'queued'"
    ).fetchone() == (9,)


def test_global_concurrency_counts_running_jobs(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(global_concurrency=2)
    def limited(n: int) -> None: ...

    register(app, db)
    limited.defer_many([{"n": n} for n in range(10)])
    assert len(claim(app, db, 10).result.jobs) == 2
    assert len(claim(app, db, 10).result.jobs) == 0
    # One ends (any statement that ends it frees the slot: here other SQL).
    db.execute(
        "UPDATE cronbase.jobs SET status = 'succeeded', lease_token = NULL, finished_at = now() "
        "WHERE id = (SELECT min(id) FROM cronbase.jobs_all WHERE status = 'running')"
    )
    assert len(claim(app, db, 10).result.jobs) == 1


def test_a_scope_locked_by_another_claimer_is_skipped_not_overrun(
    app: cronbase.App, db: psycopg.Connection[Any], database_url: str
) -> None:
    @app.task(global_concurrency=1)
    def one(n: int) -> None: ...

    register(app, db)
    one.defer_many([{"n": n} for n in range(5)])
    with psycopg.connect(database_url) as other:
        # The other claimer is inside its transaction, past its lock, not yet committed.
        params = candidate_params(
            schema=app.schema,
            limit=5,
            flows=task_flows(app.tasks),
            after=None,
            tasks=["one"],
            queues=None,
        )
        ids, locked, *_ = other.execute(app.queries.claim_flow_candidates, params).fetchone()
        assert locked == ["task:one"]
        rows = other.execute(
            app.queries.claim_flow_jobs, {"ids": ids, "locked": locked, "limit": 5, "worker": "w2"}
        ).fetchall()
        assert len([r for r in rows if r[0] is not None]) == 1
        # Uncommitted: this claimer cannot see the running job, but it cannot lock the scope.
        mine = claim(app, db, 5)
        assert mine.result.jobs == []
        assert mine.contended
        other.commit()
    # Committed: the scope is full.
    assert claim(app, db, 5).result.jobs == []
    assert len(running(db)) == 1


def test_queue_limit_applies_to_jobs_enqueued_before_it(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(queue="emails")
    def send(n: int) -> None: ...

    send.defer_many([{"n": n} for n in range(6)])
    db.execute(app.queries.set_queue_limit, {"name": "emails", "max_running": 2})
    # The plain claim leaves a limited queue alone...
    from tests.conftest import claim_rows

    assert claim_rows(app, db, 10, "w1")[0] == []
    # ...the flow claim takes it, two at a time.
    assert len(claim(app, db, 10).result.jobs) == 2
    assert claim(app, db, 10).result.jobs == []
    db.execute(app.queries.set_queue_limit, {"name": "emails", "max_running": None})
    assert len(claim_rows(app, db, 10, "w1")[0]) == 4


def test_rate_limit_admits_n_starts_per_window(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(rate_limit="3/hour")
    def api(n: int) -> None: ...

    register(app, db)
    api.defer_many([{"n": n} for n in range(5)])
    first = claim(app, db, 10)
    assert len(first.result.jobs) == 3
    assert first.held == 2
    assert first.open_in is not None
    assert 3500 < first.open_in <= 3600
    # Finishing does not give the rate back: starts are counted, not running jobs.
    db.execute(
        "UPDATE cronbase.jobs SET status = 'succeeded', lease_token = NULL, finished_at = now() "
        "WHERE status = 'running'"
    )
    assert claim(app, db, 10).result.jobs == []
    # An hour later (the log moved back in time), two more.
    db.execute(
        "UPDATE cronbase.flow_limits SET starts = ARRAY(SELECT s - interval '1 hour' "
        "FROM unnest(starts) s) WHERE scope = 'task:api'"
    )
    assert len(claim(app, db, 10).result.jobs) == 2


def test_a_full_key_does_not_hold_back_the_others(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(concurrency_key="k{k}", key_concurrency=1)
    def keyed(k: int, n: int) -> None: ...

    register(app, db)
    # Key 0's long backlog sorts first by priority, run_at and id.
    keyed.defer_many([{"k": 0, "n": n} for n in range(500)])
    keyed.defer_many([{"k": k, "n": 0} for k in range(1, 6)])
    got = claim(app, db, 3)
    assert len(got.result.jobs) == 3
    # Round robin: the next claim starts after the last scope claimed in.
    nxt = claim(app, db, 3, after=got.last_scope)
    assert len(nxt.result.jobs) == 3
    keys = sorted(j.payload["k"] for j in got.result.jobs + nxt.result.jobs)
    assert keys == [0, 1, 2, 3, 4, 5]
