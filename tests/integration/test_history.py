"""The history (migration 0015): finished jobs leave the live table in the statement that writes
their outcome, into jobs_history, partitioned by status and day; retention drops whole days;
keys hold across both tables; a previous release's finished rows are moved over."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.db import migrate
from cronbase.db.queries import Queries
from cronbase.operations.retention import Retention, lock_key, move_history, prune, prune_once

NEVER_SOON = cronbase.Backoff(base=timedelta(hours=1), jitter=0)


def run_burst(app: cronbase.App) -> None:
    app.run_worker(burst=True, install_signal_handlers=False, retention=None)


def scalar(db: psycopg.Connection[Any], query: str, *params: Any) -> Any:
    row = db.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def where(db: psycopg.Connection[Any], job_id: int) -> list[str]:
    """The tables that hold the job: the live table or a day partition of the history."""
    rows = db.execute(
        "SELECT tableoid::regclass::text FROM cronbase.jobs WHERE id = %s"
        " UNION ALL SELECT tableoid::regclass::text FROM cronbase.jobs_history WHERE id = %s",
        [job_id, job_id],
    ).fetchall()
    return [r[0] for r in rows]


def round_(app: cronbase.App, retention: Retention) -> int | None:
    async def run() -> int | None:
        try:
            return await prune_once(await app.async_pool(), app.db, retention)
        finally:
            await app.aclose()

    return asyncio.run(run())


def test_the_history_is_partitioned_by_status_then_day(db: psycopg.Connection[Any]) -> None:
    keys = db.execute(
        "SELECT c.relname, pg_get_partkeydef(c.oid) FROM pg_partitioned_table p"
        " JOIN pg_class c ON c.oid = p.partrelid"
        " WHERE c.relnamespace = 'cronbase'::regnamespace ORDER BY 1"
    ).fetchall()
    assert keys == [
        ("job_attempts", "RANGE (finished_at)"),
        ("jobs_history", "LIST (status)"),
        ("jobs_history_cancelled", "RANGE (finished_at)"),
        ("jobs_history_dead", "RANGE (finished_at)"),
        ("jobs_history_succeeded", "RANGE (finished_at)"),
    ]
    today = datetime.now(UTC).strftime("%Y%m%d")
    for status in ("succeeded", "dead", "cancelled"):
        assert scalar(
            db, "SELECT to_regclass(%s) IS NOT NULL", f"cronbase.jobs_history_{status}_{today}"
        )


def test_the_archive_writes_every_column_of_jobs_in_order(db: psycopg.Connection[Any]) -> None:
    # db/queries.py's moves list the job_columns fragment: a column added to jobs and not to it
    # would be lost by every move.
    def columns(table: str) -> list[str]:
        rows = db.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
            " AND NOT attisdropped ORDER BY attnum",
            [f"cronbase.{table}"],
        ).fetchall()
        return [r[0] for r in rows]

    listed = _job_columns()
    # But ready_xid (migration 0020): the engine's own, set when a job is made ready; a job
    # moved back from the history is, and gets its own (the column's default), not the NULL the
    # history holds (which would park it).
    assert columns("jobs") == [*listed, "ready_xid"]
    assert columns("jobs_history") == [*listed, "ready_xid"]
    assert ", ".join(listed) in Queries("cronbase").complete_jobs.decode()


def _job_columns() -> list[str]:
    from importlib.resources import files

    text = (files("cronbase.db") / "sql" / "jobs.sql").read_text()
    block = text.split("-- fragment: job_columns\n", 1)[1].split("\n\n", 1)[0]
    body = " ".join(line for line in block.splitlines() if not line.startswith("--"))
    return [c.strip() for c in body.split(",")]


def test_every_outcome_moves_the_job_to_its_status_and_day(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(max_attempts=1)
    def work(outcome: str) -> str:
        if outcome == "fail":
            raise RuntimeError("no")
        if outcome == "cancel":
            raise cronbase.Cancel("not needed")
        return outcome

    ok, dead, cancelled = (work.defer(outcome=o) for o in ("ok", "fail", "cancel"))
    by_operator = work.defer(outcome="ok")
    app.jobs.cancel(by_operator, actor="test")
    run_burst(app)
    today = datetime.now(UTC).strftime("%Y%m%d")
    assert scalar(db, "SELECT count(*) FROM cronbase.jobs") == 0
    assert where(db, ok) == [f"cronbase.jobs_history_succeeded_{today}"]
    assert where(db, dead) == [f"cronbase.jobs_history_dead_{today}"]
    assert where(db, cancelled) == [f"cronbase.jobs_history_cancelled_{today}"]
    assert where(db, by_operator) == [f"cronbase.jobs_history_cancelled_{today}"]
    job = app.jobs.get(ok)
    assert (job.status, job.result, job.attempts) == (cronbase.JobStatus.SUCCEEDED, "ok", 1)
    assert [a.outcome for a in app.jobs.attempts(dead)] == ["dead"]

    # A retry moves it back, once; it runs and moves again.
    app.jobs.retry(dead, actor="test")
    assert where(db, dead) == ["cronbase.jobs"]
    assert app.jobs.get(dead).status is cronbase.JobStatus.QUEUED
    run_burst(app)
    assert where(db, dead) == [f"cronbase.jobs_history_dead_{today}"]
    assert [a.outcome for a in app.jobs.attempts(dead)] == ["dead", "dead"]


def test_a_wait_finds_a_job_that_moved_as_it_asked(app: cronbase.App) -> None:
    @app.task
    def quick() -> int:
        return 7

    ids = [quick.defer() for _ in range(30)]
    with ThreadPoolExecutor(4) as pool:
        waits = [pool.submit(app.jobs.wait, i, timeout=60) for i in ids]
        run_burst(app)
        assert [w.result().result for w in waits] == [7] * 30


def test_an_idempotency_key_holds_after_its_job_left_the_live_table(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def charge(cents: int) -> None: ...

    first = charge.configure(idempotency_key="order-1").defer(cents=100)
    run_burst(app)
    assert where(db, first)[0].startswith("cronbase.jobs_history_succeeded_")
    # Many producers at once, the job finished and archived: each gets the first job.
    keyed = charge.configure(idempotency_key="order-1")
    with ThreadPoolExecutor(8) as pool:
        again = set(pool.map(lambda _: keyed.defer(cents=100), range(40)))
    assert again == {first}
    assert scalar(db, "SELECT count(*) FROM cronbase.jobs_all") == 1


def test_keys_race_with_the_move_and_one_job_wins(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def sync(n: int) -> None: ...

    keys = [f"k{i}" for i in range(40)]
    firsts = [sync.configure(idempotency_key=k).defer(n=0) for k in keys]

    def defer_all() -> list[int]:
        return [sync.configure(idempotency_key=k).defer(n=1) for k in keys]

    # Producers keep deferring the same keys while a worker finishes (moves) the jobs.
    with ThreadPoolExecutor(3) as pool:
        producers = [pool.submit(defer_all) for _ in range(2)]
        run_burst(app)
        results = [p.result() for p in producers]
    assert all(r == firsts for r in results)
    assert scalar(db, "SELECT count(*) FROM cronbase.jobs_all") == len(keys)
    assert scalar(db, "SELECT count(*) FROM cronbase.job_keys") == len(keys)


def test_a_unique_window_holds_in_the_history_and_frees_when_cancelled(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(unique_for=timedelta(days=1))
    def daily() -> None: ...

    first = daily.defer()
    run_burst(app)
    assert app.jobs.get(first).status is cronbase.JobStatus.SUCCEEDED
    assert daily.defer() == first  # succeeded, archived: the window is still its
    other = daily.configure(run_at=datetime.now(UTC) + timedelta(days=2)).defer()
    assert other != first
    app.jobs.cancel(other, actor="test")
    again = daily.configure(run_at=datetime.now(UTC) + timedelta(days=2)).defer()
    assert again not in (first, other)


def test_retention_drops_whole_days_with_their_keys(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def work() -> None: ...

    kept = work.configure(idempotency_key="recent").defer()
    old = work.configure(idempotency_key="old").defer()
    run_burst(app)
    # The old one finished three days ago (its day's partition made, as maintenance does).
    three_days_ago = (datetime.now(UTC) - timedelta(days=3)).date()
    db.execute("SELECT cronbase.create_history_days(%s, %s)", [three_days_ago, three_days_ago])
    db.execute(
        "UPDATE cronbase.jobs_history SET finished_at = now() - interval '3 days' WHERE id = %s",
        [old],
    )
    day = f"cronbase.jobs_history_succeeded_{three_days_ago:%Y%m%d}"
    assert where(db, old) == [day]

    assert round_(app, Retention(succeeded=timedelta(days=2))) == 1
    assert scalar(db, "SELECT to_regclass(%s)", day) is None  # dropped, not deleted from
    assert where(db, kept) != []
    assert where(db, old) == []
    assert scalar(db, "SELECT array_agg(key ORDER BY key) FROM cronbase.job_keys") == ["i:recent"]
    # Its key is free again; the recent one's holds.
    assert work.configure(idempotency_key="old").defer() not in (old, kept)
    assert work.configure(idempotency_key="recent").defer() == kept
    # The days ahead exist; a second round finds nothing to do.
    ahead = (datetime.now(UTC) + timedelta(days=7)).strftime("%Y%m%d")
    assert scalar(db, "SELECT to_regclass(%s) IS NOT NULL", f"cronbase.job_attempts_{ahead}")
    assert round_(app, Retention(succeeded=timedelta(days=2))) == 0


def test_rows_of_a_day_without_partition_go_to_the_default_and_are_pruned_by_row(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def work() -> None: ...

    ids = [work.defer() for _ in range(5)]
    run_burst(app)
    db.execute(
        "UPDATE cronbase.jobs_history SET finished_at = now() - interval '40 days'"
        " WHERE id = ANY(%s)",
        [ids[:3]],
    )
    assert {where(db, i)[0] for i in ids[:3]} == {"cronbase.jobs_history_succeeded_default"}
    # The default holds rows of that day: making its partition is skipped, not an error.
    forty = (datetime.now(UTC) - timedelta(days=40)).date()
    made = scalar(db, "SELECT cronbase.create_history_days(%s, %s)", forty, forty)
    assert made == 3  # the dead, cancelled and attempts days; not the succeeded one
    assert round_(app, Retention(succeeded=timedelta(days=30))) == 3
    assert scalar(db, "SELECT count(*) FROM cronbase.jobs_history") == 2


def test_a_retention_round_waits_for_no_long_reader(
    app: cronbase.App, db: psycopg.Connection[Any], database_url: str
) -> None:
    @app.task
    def work() -> None: ...

    old = work.defer()
    run_burst(app)
    three_days_ago = (datetime.now(UTC) - timedelta(days=3)).date()
    db.execute("SELECT cronbase.create_history_days(%s, %s)", [three_days_ago, three_days_ago])
    db.execute(
        "UPDATE cronbase.jobs_history SET finished_at = now() - interval '3 days' WHERE id = %s",
        [old],
    )
    day = f"cronbase.jobs_history_succeeded_{three_days_ago:%Y%m%d}"
    with psycopg.connect(database_url) as reader:
        reader.execute(f"SELECT count(*) FROM {day}")  # a report's transaction holds the day
        assert round_(app, Retention(succeeded=timedelta(days=2))) == 0  # gave up after 2 s
        assert scalar(db, "SELECT to_regclass(%s) IS NOT NULL", day)
        # The history took new jobs meanwhile? The round held no lock past its statement.
        reader.rollback()
    assert round_(app, Retention(succeeded=timedelta(days=2))) == 1
    assert scalar(db, "SELECT to_regclass(%s)", day) is None


def test_manual_prune_drops_days_then_deletes_rows_to_the_cutoff(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def work() -> None: ...

    ids = [work.defer() for _ in range(4)]
    run_burst(app)
    yesterday = (datetime.now(UTC) - timedelta(days=1)).date()
    db.execute(
        "UPDATE cronbase.jobs_history SET finished_at = %s WHERE id = ANY(%s)",
        [datetime.combine(yesterday, datetime.min.time(), UTC) + timedelta(hours=1), ids[:2]],
    )
    assert prune(app.db, timedelta(0), ["succeeded"], actor="test") == 4
    assert scalar(db, "SELECT count(*) FROM cronbase.jobs_all") == 0
    assert (
        scalar(db, "SELECT to_regclass(%s)", f"cronbase.jobs_history_succeeded_{yesterday:%Y%m%d}")
        is None
    )
    assert app.audit.list(limit=1)[0].detail["removed"] == 4


def test_an_upgrade_moves_finished_rows_keys_and_attempts_into_the_history(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = "cronbase_upgrade"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        before = [m for m in migrate.MIGRATIONS if m.version < 15]
        with monkeypatch.context() as patched:
            patched.setattr(migrate, "MIGRATIONS", before)
            patched.setattr(migrate, "LATEST_VERSION", 14)
            migrate.apply_migrations(conn, schema)
        # What a 0014 database holds: finished jobs (one keyed, one two days old), a waiting
        # one, and attempts.
        conn.execute(
            f"""
            INSERT INTO {schema}.jobs (id, task, status, attempts, finished_at, idempotency_key)
            VALUES (1, 't', 'succeeded', 1, now(), 'pay-1'),
                   (2, 't', 'dead', 2, now() - interval '2 days', NULL),
                   (3, 't', 'queued', 0, NULL, NULL)
            """
        )
        conn.execute(
            f"INSERT INTO {schema}.job_attempts (job_id, attempt, outcome, finished_at)"
            " VALUES (2, 1, 'failed', now() - interval '2 days'),"
            " (2, 2, 'dead', now() - interval '2 days')"
        )
        migrate.apply_migrations(conn, schema)
        app = cronbase.App(database_url=database_url, schema=schema)
        try:
            # Reads see every job at once, before anything moved.
            assert [j.id for j in app.jobs.list(limit=10)] == [3, 2, 1]
            assert [a.outcome for a in app.jobs.attempts(2)] == ["failed", "dead"]
            assert move_history(app.db) == 2
            assert conn.execute(f"SELECT id FROM {schema}.jobs").fetchall() == [(3,)]
            two_days_ago = (datetime.now(UTC) - timedelta(days=2)).strftime("%Y%m%d")
            assert conn.execute(
                f"SELECT tableoid::regclass::text FROM {schema}.jobs_history WHERE id = 2"
            ).fetchone() == (f"{schema}.jobs_history_dead_{two_days_ago}",)
            assert conn.execute(
                f"SELECT count(*) FROM {schema}.job_attempts_legacy"
            ).fetchone() == (0,)
            assert [a.outcome for a in app.jobs.attempts(2)] == ["failed", "dead"]

            # The key moved with its job: the same defer returns it.
            @app.task(name="t")
            def t() -> None: ...

            assert t.configure(idempotency_key="pay-1").defer() == 1
            assert move_history(app.db) == 0
        finally:
            app.close()
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def test_the_lock_is_one_pruner_at_a_time(app: cronbase.App, database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [lock_key(app.schema)])
        assert round_(app, Retention()) is None
        other.execute("SELECT pg_advisory_unlock(%s)", [lock_key(app.schema)])
    assert round_(app, Retention()) == 0


def test_a_day_past_retention_leaves_no_dead_tuples_in_the_live_table(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def work(n: int) -> None: ...

    work.defer_many([{"n": n} for n in range(500)])
    run_burst(app)
    removed: list[str] = []

    def vacuum_jobs() -> int:
        """VACUUM the live table; the dead row versions it removed (its VERBOSE report)."""
        removed.clear()
        db.execute("VACUUM (VERBOSE) cronbase.jobs")
        found = [line for line in removed if "tuples:" in line]
        assert found, removed
        return int(found[0].split("tuples:")[1].split("removed")[0])

    db.add_notice_handler(lambda notice: removed.append(notice.message_primary or ""))
    db.add_notice_handler(lambda notice: removed.append(notice.message_detail or ""))
    assert vacuum_jobs() > 0  # the drain's own row versions (each job's claim and move)
    three_days_ago = (datetime.now(UTC) - timedelta(days=3)).date()
    db.execute("SELECT cronbase.create_history_days(%s, %s)", [three_days_ago, three_days_ago])
    db.execute("UPDATE cronbase.jobs_history SET finished_at = now() - interval '3 days'")
    assert round_(app, Retention(succeeded=timedelta(days=2))) == 500
    assert scalar(db, "SELECT count(*) FROM cronbase.jobs_all") == 0
    assert vacuum_jobs() == 0  # retention wrote nothing in the live table
