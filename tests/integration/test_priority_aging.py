"""Priority aging (``app.queues.set_aging``, migration 0019): a waiting job of an aging queue
gains ``step`` priority for each ``every`` it has been due, down to 0 at most, written by the
workers' reaper round (``age_priorities``). On real PostgreSQL, with rows written by plain SQL."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.flow import Aging
from tests.conftest import claim_rows
from tests.e2e.harness import running_worker

AGE = {"limit": 1000}


def insert(
    db: psycopg.Connection[Any], queue: str, priority: int, due_ago: str, **extra: str
) -> int:
    """A waiting job of ``queue`` due ``due_ago`` ago (an interval; negative: ahead)."""
    columns = ", ".join(["task", "queue", "payload", "priority", "run_at", *extra])
    values = ", ".join(["'t'", "%s", "'{}'", "%s", "now() - %s::interval", *extra.values()])
    row = db.execute(
        f"INSERT INTO cronbase.jobs ({columns}) VALUES ({values}) RETURNING id",
        [queue, priority, due_ago],
    ).fetchone()
    assert row is not None
    return int(row[0])


def priorities(db: psycopg.Connection[Any]) -> dict[int, tuple[int, int | None]]:
    rows = db.execute("SELECT id, priority, base_priority FROM cronbase.jobs").fetchall()
    return {job_id: (priority, base) for job_id, priority, base in rows}


def age(app: cronbase.App, db: psycopg.Connection[Any], *, due: bool = True) -> set[int]:
    """The jobs one reaper round ages; ``due``: as if the queue's last aging was long ago."""
    if due:
        db.execute("UPDATE cronbase.queues SET aged_at = NULL")
    return {row[0] for row in db.execute(app.queries.age_priorities, AGE).fetchall()}


def test_the_rule(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    state = app.queues.set_aging("imports", timedelta(minutes=10), step=30)
    assert state.aging is not None
    assert (state.aging.every, state.aging.step) == (timedelta(minutes=10), 30)
    assert str(state.aging) == "30 every 10m"
    # No step given: the queue keeps its own (10 for a queue that has none).
    assert app.queues.set_aging("imports", 600).aging == state.aging
    assert app.queues.set_aging("mail", 60).aging == Aging(timedelta(minutes=1), 10)
    assert app.queues.set_aging("mail", None).aging is None

    three_steps = insert(db, "imports", 100, "31 minutes")  # 100 - 3 * 30
    to_the_top = insert(db, "imports", 100, "2 hours")  # never below 0
    urgent = insert(db, "imports", -5, "2 hours")  # at 0 or below: does not age
    fresh = insert(db, "imports", 100, "9 minutes")  # not one step yet
    ahead = insert(db, "imports", 100, "-1 hour")  # not due
    other = insert(db, "exports", 100, "2 hours")  # a queue without aging
    running = insert(
        db,
        "imports",
        100,
        "2 hours",
        status="'running'",
        lease_token="gen_random_uuid()",
        locked_by="'w'",
        locked_until="now() + interval '1 minute'",
        attempts="1",
        started_at="now()",
    )
    retrying = insert(db, "imports", 200, "25 minutes", status="'failed'")  # 200 - 2 * 30

    assert age(app, db) == {three_steps, to_the_top, retrying}
    assert priorities(db) == {
        three_steps: (10, 100),
        to_the_top: (0, 100),
        urgent: (-5, None),
        fresh: (100, None),
        ahead: (100, None),
        other: (100, None),
        running: (100, None),
        retrying: (140, 200),
    }

    # A round soon after does nothing (the queue was aged moments ago); a later one computes
    # from the base priority, so a job is never stepped twice for the same wait.
    db.execute("UPDATE cronbase.jobs SET run_at = run_at - interval '10 minutes'")
    assert age(app, db, due=False) == set()
    db.execute("UPDATE cronbase.jobs SET run_at = run_at + interval '10 minutes'")
    assert age(app, db) == set()
    db.execute("UPDATE cronbase.jobs SET run_at = run_at - interval '10 minutes'")
    assert age(app, db) == {three_steps, fresh, retrying}
    assert priorities(db)[fresh] == (70, 100)
    assert priorities(db)[three_steps] == (0, 100)

    # The aged job is what the claim takes first: the order is the stored priority.
    newer = insert(db, "imports", 50, "0 seconds")
    claimed, _ = claim_rows(app, db, limit=4, queues=["imports"])
    assert [job.id for job in claimed] == [urgent, to_the_top, three_steps, newer]

    # Off: no more aging; aged jobs keep what they reached.
    assert app.queues.set_aging("imports", None).aging is None
    db.execute("UPDATE cronbase.queues SET aged_at = NULL")
    db.execute("UPDATE cronbase.jobs SET run_at = run_at - interval '1 hour'")
    assert age(app, db) == set()
    assert priorities(db)[fresh] == (70, 100)

    # It shows: jobs show and the job's JSON say where the priority came from.
    job = app.jobs.get(fresh)
    assert job is not None
    assert (job.priority, job.base_priority, job.priority_label) == (70, 100, "70 (aged from 100)")
    assert app.jobs.get(urgent).priority_label == "-5"  # type: ignore[union-attr]


def test_a_round_ages_the_longest_waiting_first_and_skips_what_a_claim_holds(
    app: cronbase.App, db: psycopg.Connection[Any], database_url: str
) -> None:
    app.queues.set_aging("imports", timedelta(minutes=1), step=100)
    oldest = [insert(db, "imports", 100, f"{60 - n} minutes") for n in range(5)]
    held = insert(db, "imports", 100, "2 hours")
    with psycopg.connect(database_url) as claim:  # a claim's row lock, not yet committed
        claim.execute("SELECT 1 FROM cronbase.jobs WHERE id = %s FOR UPDATE", [held])
        aged = {row[0] for row in db.execute(app.queries.age_priorities, {"limit": 3})}
        assert aged == set(oldest[:3])
        claim.rollback()
    db.execute("UPDATE cronbase.queues SET aged_at = NULL")
    assert age(app, db) == {held, *oldest[3:]}
    assert all(p == (0, 100) for p in priorities(db).values())


def test_two_workers_age_a_queue_once(
    app: cronbase.App, db: psycopg.Connection[Any], database_url: str
) -> None:
    """Rounds of several workers at once: the queue's row is taken by one (SKIP LOCKED); every
    job is aged exactly as the rule says, whoever did it."""
    app.queues.set_aging("imports", timedelta(minutes=1), step=1)
    jobs = [insert(db, "imports", 100, f"{n} minutes") for n in range(1, 200)]
    results: list[set[int]] = []
    start = threading.Barrier(4)

    def round_() -> None:
        with psycopg.connect(database_url, autocommit=True) as conn:
            start.wait()
            rows = conn.execute(app.queries.age_priorities, AGE).fetchall()
            results.append({row[0] for row in rows})

    threads = [threading.Thread(target=round_) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    aged = [job for found in results for job in found]
    assert sorted(aged) == sorted(jobs)  # each once, by one worker
    got = priorities(db)
    assert [got[job] for job in jobs] == [(max(0, 100 - n), 100) for n in range(1, 200)]


def test_bad_values_are_refused_naming_them(app: cronbase.App) -> None:
    cases: list[tuple[Any, Any, str]] = [
        (0, 10, "aging interval must be a duration of more than 0"),
        (-5, 10, "aging interval must be a duration of more than 0"),
        (0.5, 10, "aging interval must be at least 1 second, got 0.5"),
        (float("nan"), 10, "aging interval must be a finite number of seconds, got nan"),
        (60, 0, "aging step must be a whole number of at least 1, got 0"),
        (60, 2.5, "aging step must be a whole number of at least 1, got 2.5"),
    ]
    for every, step, message in cases:
        with pytest.raises(cronbase.ConfigurationError, match=message):
            app.queues.set_aging("imports", every, step=step)
    with pytest.raises(TypeError, match="aging interval must be a timedelta or a number"):
        app.queues.set_aging("imports", "5m")
    with pytest.raises(cronbase.InvalidNameError, match="queue name"):
        app.queues.set_aging("bad\x00name", 60)
    assert all(q.aging is None for q in app.queues.list())  # nothing was written


@pytest.mark.anyio
async def test_a_low_priority_job_runs_while_higher_ones_keep_coming(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    """A worker of one slot and a producer that keeps it busy with priority-0 jobs: without
    aging the priority-100 job would wait until the producer stops; aged every second by 50,
    it reaches 0 within two seconds and, due earliest, runs next."""
    ran: list[str] = []
    low_ran = asyncio.Event()

    @app.task(queue="imports")
    async def work(kind: str) -> None:
        ran.append(kind)
        if kind == "low":
            low_ran.set()
        await asyncio.sleep(0.02)

    await app.queues.set_aging_async("imports", timedelta(seconds=1), step=50)
    for _ in range(50):  # a backlog of higher-priority jobs from the start
        await work.configure(priority=0).defer_async(kind="high")
    await work.configure(priority=100).defer_async(kind="low")
    stop = asyncio.Event()

    async def producer() -> int:
        made = 0
        while not stop.is_set():
            await work.configure(priority=0).defer_async(kind="high")
            made += 1
            await asyncio.sleep(0.01)  # faster than one slot runs them: a backlog grows
        return made

    async with running_worker(
        app, concurrency=1, reap_interval=timedelta(milliseconds=200), queues=["imports"]
    ):
        feeding = asyncio.create_task(producer())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(low_ran.wait(), 20)
        high_before = ran.index("low") if "low" in ran else None
        stop.set()
        made = await feeding
    assert high_before is not None, f"the low-priority job never ran ({len(ran)} high ones did)"
    backlog = 50 + made - high_before
    assert backlog > 0, "the producer never got ahead of the worker: nothing to overtake"
    (row,) = db.execute(
        "SELECT priority, base_priority FROM cronbase.jobs_all WHERE payload->>'kind' = 'low'"
    ).fetchall()
    assert row == (0, 100)


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for child in plan.get("Plans", []) for n in _nodes(child))]


def test_a_round_with_no_queue_due_reads_no_job(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    """Every worker runs the statement every reap_interval: with no aging queue due, the jobs
    table (however big, and it keeps its pages: vacuum_truncate is off) is not read at all."""
    for n in range(50):
        insert(db, "imports", 100, f"{n} hours")
    app.queues.set_aging("imports", timedelta(hours=1))
    # Before and after the tables' statistics (autovacuum's ANALYZE, at any moment): with
    # them, the planner joins the aged jobs back to jobs by a hash join whose probe side, a
    # scan of jobs, starts before the (empty) hash side is known.
    for analyzed in (False, True):
        if analyzed:
            db.execute("ANALYZE cronbase.jobs, cronbase.queues")
        age(app, db)  # aged now: not due again for min(every / 4, 30 s)
        for due_queue in (False, True):
            if due_queue:
                db.execute("UPDATE cronbase.queues SET aged_at = NULL")
            (plan,) = db.execute(
                b"EXPLAIN (ANALYZE, FORMAT JSON) " + app.queries.age_priorities, AGE
            ).fetchone()  # type: ignore[misc]
            loops = [
                n["Actual Loops"]
                for n in _nodes(plan[0]["Plan"])
                if n.get("Relation Name") == "jobs" and n["Node Type"] != "ModifyTable"
            ]
            assert loops, plan  # the jobs table is in the plan...
            # ...and read only for a queue that is due (then once, for its waiting jobs).
            assert max(loops) == (1 if due_queue else 0), (analyzed, due_queue, loops)
