"""claim_fair_jobs on its own (fair share between keys, db/sql/fair.sql): round robin, weights,
priority within a key, a key alone, a returning key, concurrent claimers, and bad input."""

from __future__ import annotations

import math
import threading
from collections import Counter
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.worker.claim import ClaimResult, run_claim_sync
from cronbase.worker.fair_claim import SCAN_KEYS, fair_params, fair_statement

_cursors: dict[str, str | None] = {}


def claim(
    app: cronbase.App,
    conn: psycopg.Connection[Any],
    limit: int,
    *,
    worker: str = "w1",
    queues: list[str] | None = None,
) -> ClaimResult:
    """One claim, as worker ``worker`` makes it (its cursor kept between claims)."""
    params = fair_params(
        limit=limit,
        worker=worker,
        tasks=sorted(app.tasks),
        queues=queues,
        after=_cursors.get(worker),
    )
    statement = fair_statement(app.queries, limit, queues)
    result = run_claim_sync(conn, statement, params, app.db.json_loads)
    _cursors[worker] = result.cursor
    return result


@pytest.fixture(autouse=True)
def _fresh_cursors() -> None:
    _cursors.clear()


def tenants(result: ClaimResult) -> list[str]:
    return [job.payload["tenant"] for job in result.jobs]


def test_a_small_key_is_not_stuck_behind_a_big_one(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(fair_key="{tenant}")
    def work(tenant: str, n: int) -> None: ...

    work.defer_many([{"tenant": "a", "n": n} for n in range(1000)])
    work.defer_many([{"tenant": "b", "n": n} for n in range(10)])
    order: list[str] = []
    for _ in range(21):
        order += tenants(claim(app, db, 1))
    # One job a claim: a and b take turns until b has none left (a ties once: two keys new
    # at once start together; the key that holds the clock loses ties to a newcomer).
    assert order.count("b") == 10
    assert order.count("a") == 11
    assert "b,b" not in ",".join(order)
    # In batches too: a claim of 8 shares its slots.
    work.defer_many([{"tenant": "c", "n": n} for n in range(10)])
    got = Counter(tenants(claim(app, db, 8)))
    assert got == {"a": 4, "c": 4}


def test_a_key_alone_gets_every_slot(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    @app.task(fair_key="{tenant}")
    def work(tenant: str, n: int) -> None: ...

    work.defer_many([{"tenant": "a", "n": n} for n in range(30)])
    assert tenants(claim(app, db, 10)) == ["a"] * 10
    assert len(claim(app, db, 25).jobs) == 20
    assert claim(app, db, 5).jobs == []


def test_weights_give_a_proportional_share(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    @app.task(fair_key="{tenant}")
    def work(tenant: str, n: int) -> None: ...

    assert app.queues.set_weight("default", "gold", 2) == 2.0
    work.defer_many([{"tenant": t, "n": n} for t in ("gold", "basic") for n in range(300)])
    got: Counter[str] = Counter()
    for _ in range(30):
        got.update(tenants(claim(app, db, 10)))
    assert sum(got.values()) == 300
    assert got["gold"] / got["basic"] == pytest.approx(2.0, rel=0.05)
    audit = db.execute(
        "SELECT action, target, detail->>'key' FROM cronbase.audit_log ORDER BY id"
    ).fetchall()
    assert audit == [("queue.weight", "queue:default", "gold")]


def test_priority_orders_jobs_within_a_key(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    @app.task(fair_key="{tenant}")
    def work(tenant: str, n: int) -> None: ...

    work.defer_many([{"tenant": "a", "n": n} for n in range(5)])
    work.configure(priority=1).defer(tenant="a", n=99)
    work.defer_many([{"tenant": "b", "n": n} for n in range(5)])
    got = claim(app, db, 2).jobs
    assert sorted((j.payload["tenant"], j.payload["n"]) for j in got) == [("a", 99), ("b", 0)]


def test_a_returning_key_banks_no_credit(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    @app.task(fair_key="{tenant}")
    def work(tenant: str, n: int) -> None: ...

    work.defer(tenant="b", n=0)
    work.defer_many([{"tenant": "a", "n": n} for n in range(200)])
    for _ in range(50):
        claim(app, db, 2)
    # b was served once, then idle while a took ~99 claims; back with 20 jobs, it shares.
    work.defer_many([{"tenant": "b", "n": n} for n in range(20)])
    got = Counter(tenants(claim(app, db, 10)))
    assert got == {"a": 5, "b": 5}


def test_paused_queues_and_other_tasks_are_left_alone(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(fair_key="{tenant}", queue="imports")
    def work(tenant: str) -> None: ...

    @app.task
    def plain() -> None: ...

    plain.defer()
    work.defer(tenant="a")
    app.queues.pause("imports")
    assert claim(app, db, 5).jobs == []
    app.queues.resume("imports")
    assert [j.task for j in claim(app, db, 5, queues=["default"]).jobs] == []
    # A worker of some queues runs the fair claim's own form for them (claim_fair_jobs_in_queues).
    assert [j.task for j in claim(app, db, 5, queues=["imports"]).jobs] == ["work"]
    # The plain claim never saw the fair job, and the fair claim never took the plain one.
    assert db.execute(
        "SELECT task, flow_key FROM cronbase.jobs WHERE status = 'queued'"
    ).fetchall() == [("plain", None)]


def test_concurrent_claimers_take_each_job_once(
    app: cronbase.App, db: psycopg.Connection[Any], database_url: str
) -> None:
    @app.task(fair_key="{tenant}")
    def work(tenant: str, n: int) -> None: ...

    work.defer_many([{"tenant": f"t{t}", "n": n} for t in range(20) for n in range(50)])
    taken: list[int] = []
    lock = threading.Lock()

    def claimer(name: str) -> None:
        with psycopg.connect(database_url, autocommit=True) as conn:
            while jobs := claim(app, conn, 7, worker=name).jobs:
                with lock:
                    taken.extend(j.id for j in jobs)

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(taken) == len(set(taken)) == 1000
    claimed = dict(db.execute("SELECT scope, claimed FROM cronbase.fair_keys").fetchall())
    assert claimed == {f"fair:default|t{t}": 50 for t in range(20)}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fair_key": "{tenant"}, "fair_key '{tenant' is not a template"),
        ({"fair_key": "{tenant!r}"}, "fair_key '{tenant!r}': {tenant} must name a payload field"),
        ({"fair_key": ""}, "fair_key must be a template string, got ''"),
        (
            {"fair_key": "{tenant}", "global_concurrency": 2},
            "fair_key '{tenant}' cannot be combined with global_concurrency",
        ),
    ],
)
def test_bad_fair_keys_are_refused(
    app: cronbase.App, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(cronbase.ConfigurationError) as info:

        @app.task(**options)
        def job(tenant: str = "") -> None: ...

    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_payload_without_the_key_is_refused(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(fair_key="{tenant}")
    def work(**payload: Any) -> None: ...

    with pytest.raises(cronbase.PayloadError, match="fair_key '\\{tenant\\}' names 'tenant'"):
        work.defer(user=1)
    assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (0,)


@pytest.mark.parametrize("weight", [0, -1, math.nan, math.inf, "2", True, 10**7])
def test_bad_weights_are_refused(app: cronbase.App, weight: Any) -> None:
    with pytest.raises(cronbase.ConfigurationError, match="weight must be a number above 0"):
        app.queues.set_weight("default", "a", weight)


def test_the_busiest_keys_are_listed(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    @app.task(fair_key="{tenant}")
    def work(tenant: str, n: int) -> None: ...

    app.queues.set_weight("default", "idle", 3)
    work.defer_many([{"tenant": "a", "n": n} for n in range(5)])
    work.defer_many([{"tenant": "b", "n": n} for n in range(2)])
    claim(app, db, 2)
    keys = [(k.key, k.waiting, k.running, k.weight) for k in app.queues.fair_keys("default")]
    assert keys == [("a", 4, 1, 1.0), ("b", 1, 1, 1.0), ("idle", 0, 0, 3.0)]


def test_a_worker_runs_fair_plain_and_limited_jobs_together(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    ran: list[str] = []

    @app.task(fair_key="{tenant}")
    def fair(tenant: str) -> None:
        ran.append(f"fair:{tenant}")

    @app.task
    def plain() -> None:
        ran.append("plain")

    @app.task(global_concurrency=1)
    def limited() -> None:
        ran.append("limited")

    fair.defer_many([{"tenant": t} for t in ("a", "a", "a", "b")])
    plain.defer()
    limited.defer()
    app.run_worker(concurrency=3, burst=True, install_signal_handlers=False)
    assert sorted(ran) == ["fair:a", "fair:a", "fair:a", "fair:b", "limited", "plain"]
    assert db.execute(
        "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'succeeded'"
    ).fetchone() == (6,)
    # The successes the fair claim carried were written (no job left running).
    assert db.execute("SELECT scope, claimed FROM cronbase.fair_keys ORDER BY 1").fetchall() == [
        ("fair:default|a", 3),
        ("fair:default|b", 1),
    ]


def test_many_keys_take_turns_and_a_new_key_is_found_soon(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(fair_key="{tenant}")
    def work(tenant: str, n: int) -> None: ...

    # More keys than one claim looks at in the jobs index (SCAN_KEYS): each claim sees a window.
    keys = 4 * SCAN_KEYS
    work.defer_many([{"tenant": f"t{k:03}", "n": n} for k in range(keys) for n in range(5)])
    got: Counter[str] = Counter()
    for _ in range(keys // 10):
        got.update(tenants(claim(app, db, 10)))
    assert max(got.values()) - min(got[f"t{k:03}"] for k in range(keys)) <= 2, got
    # A newcomer is seen within keys / SCAN_KEYS claims, and served at once.
    work.defer_many([{"tenant": "new", "n": n} for n in range(3)])
    claims = 0
    while "new" not in tenants(claim(app, db, 10)):
        claims += 1
        assert claims <= keys // SCAN_KEYS + 1
    # Everything is claimed once in the end.
    while claim(app, db, 10).jobs:
        pass
    assert db.execute(
        "SELECT count(*) FROM cronbase.jobs WHERE status <> 'running'"
    ).fetchone() == (0,)


def test_a_key_whose_jobs_are_not_due_turns_idle_and_comes_back_when_due(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(fair_key="{tenant}")
    def work(tenant: str, n: int) -> None: ...

    work.defer_many([{"tenant": "a", "n": n} for n in range(3)])
    work.configure(delay=3600).defer(tenant="later", n=0)
    assert tenants(claim(app, db, 10)) == ["a", "a", "a"]
    result = claim(app, db, 10)
    assert result.jobs == []
    idle = dict(db.execute("SELECT scope, is_idle FROM cronbase.fair_keys").fetchall())
    # a ran out: idle. later was seen with no due job: nothing written for it.
    assert idle == {"fair:default|a": True}
    assert result.held == 1
    db.execute("UPDATE cronbase.jobs SET run_at = now() WHERE payload->>'tenant' = 'later'")
    assert tenants(claim(app, db, 10)) == ["later"]


def test_keys_whose_jobs_are_not_due_do_not_take_a_due_key_s_probes(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    # A claim of one job probes two busy keys (PROBE_FACTOR). Keys a and b hold only jobs due in
    # an hour: found by the window as fresh keys, they won the ties for the probes claim after
    # claim, and c's due job waited for an hour.
    @app.task(fair_key="{tenant}")
    def work(tenant: str, n: int) -> None: ...

    later = work.configure(delay=3600)
    later.defer_many([{"tenant": t, "n": n} for t in ("a", "b") for n in range(2)])
    work.defer(tenant="c", n=0)
    got = [tenants(claim(app, db, 1)) for _ in range(3)]
    assert ["c"] in got, got


def test_a_worker_claims_the_fair_jobs_of_a_task_s_newer_version(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    # A job deferred for version 2 is named `work@2` in a claim's task list, as the plain
    # claim names it; the fair claim asked for `work` only and never took it.
    @app.task(fair_key="{tenant}", version=2)
    def work(tenant: str) -> None: ...

    work.defer(tenant="a")
    app.run_worker(burst=True, install_signal_handlers=False)
    assert db.execute("SELECT status, task_version FROM cronbase.jobs_all").fetchall() == [
        ("succeeded", 2)
    ]


def test_inline_mode_runs_fair_jobs_and_refuses_a_payload_without_the_key() -> None:
    from cronbase.testing import inline

    app = cronbase.App(database_url="postgresql://inline.invalid/none")
    ran: list[str] = []

    @app.task(fair_key="{tenant}")
    def work(**payload: Any) -> None:
        ran.append(payload["tenant"])

    with inline(app):
        work.defer(tenant="a")
        work.defer_many([{"tenant": "b"}, {"tenant": "c"}])
        with pytest.raises(cronbase.PayloadError, match="fair_key"):
            app.defer("work", {"user": 1})
    assert ran == ["a", "b", "c"]
