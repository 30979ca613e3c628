"""Enqueue against PostgreSQL: rows, run_at/delay, defer_many, the caller's transaction, keys."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg.rows import dict_row

import cronbase
from tests.conftest import claim_rows
from tests.e2e.harness import job_row


def db_now(db: psycopg.Connection[Any]) -> datetime:
    now = db.execute("SELECT now()").fetchone()
    assert now is not None
    return now[0]  # type: ignore[no-any-return]


def job_count(db: psycopg.Connection[Any]) -> int:
    found = db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone()
    assert found is not None
    return int(found[0])


@pytest.fixture
def send(app: cronbase.App) -> cronbase.Task[Any, None]:
    @app.task(queue="emails", priority=7, max_attempts=4, lease=timedelta(seconds=90))
    def send_invoice(invoice_id: int, note: str = "") -> None: ...

    return send_invoice


def test_defer_writes_one_queued_row_with_the_task_defaults(
    send: cronbase.Task[Any, None], db: psycopg.Connection[Any]
) -> None:
    before = db_now(db)
    job_id = send.defer(invoice_id=812, note="née ✓")
    row = job_row(db, job_id)
    assert row["task"] == "send_invoice"
    assert row["payload"] == {"invoice_id": 812, "note": "née ✓"}
    assert (row["queue"], row["priority"], row["max_attempts"]) == ("emails", 7, 4)
    assert row["lease"] == timedelta(seconds=90)
    assert (row["status"], row["attempts"], row["locked_by"], row["finished_at"]) == (
        "queued",
        0,
        None,
        None,
    )
    # Due at once: run_at is the insert's database time.
    assert before <= row["run_at"] == row["created_at"] <= db_now(db)


def test_configure_overrides_the_defaults_for_one_defer(
    send: cronbase.Task[Any, None], db: psycopg.Connection[Any]
) -> None:
    job_id = send.configure(
        queue="urgent", priority=-3, max_attempts=9, lease=timedelta(seconds=5)
    ).defer(invoice_id=1)
    row = job_row(db, job_id)
    assert (row["queue"], row["priority"], row["max_attempts"]) == ("urgent", -3, 9)
    assert row["lease"] == timedelta(seconds=5)
    assert job_row(db, send.defer(invoice_id=2))["queue"] == "emails"


def test_delay_is_counted_from_the_database_time_of_the_insert(
    send: cronbase.Task[Any, None], db: psycopg.Connection[Any]
) -> None:
    job_id = send.configure(delay=timedelta(minutes=5, microseconds=7)).defer(invoice_id=1)
    row = job_row(db, job_id)
    assert row["run_at"] - row["created_at"] == timedelta(minutes=5, microseconds=7)


def test_run_at_is_stored_as_given_in_any_time_zone(
    send: cronbase.Task[Any, None], db: psycopg.Connection[Any]
) -> None:
    at = datetime(2031, 7, 1, 14, 30, 0, 123456, tzinfo=ZoneInfo("Europe/Berlin"))
    row = job_row(db, send.configure(run_at=at).defer(invoice_id=1))
    assert row["run_at"] == at
    past = db_now(db) - timedelta(days=1)
    assert job_row(db, send.configure(run_at=past).defer(invoice_id=2))["run_at"] == past


def test_defer_many_returns_ids_in_input_order_with_matching_payloads(
    send: cronbase.Task[Any, None], db: psycopg.Connection[Any]
) -> None:
    numbers = [5, 3, 9, 1, 7, 2, 8, 0, 6, 4] * 30
    ids = send.configure(priority=1).defer_many([{"invoice_id": n} for n in numbers])
    assert len(ids) == len(numbers) == len(set(ids))
    rows = {r[0]: r[1:] for r in db.execute("SELECT id, payload, priority FROM cronbase.jobs_all")}
    assert [rows[i] for i in ids] == [({"invoice_id": n}, 1) for n in numbers]
    # One statement, so one transaction: every row carries the same xmin.
    xmins = db.execute("SELECT count(DISTINCT xmin::text) FROM cronbase.jobs").fetchone()
    assert xmins == (1,)


class CountingCursor(psycopg.Cursor[Any]):
    """Records every statement a connection runs (what a round trip costs, counted)."""

    statements: ClassVar[list[bytes | str]] = []

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> CountingCursor:
        CountingCursor.statements.append(query)
        super().execute(query, params, **kwargs)
        return self


def test_defer_many_is_one_statement(
    send: cronbase.Task[Any, None],
    app: cronbase.App,
    database_url: str,
    db: psycopg.Connection[Any],
) -> None:
    CountingCursor.statements = []
    with psycopg.connect(database_url, autocommit=True, cursor_factory=CountingCursor) as conn:
        ids = send.configure(connection=conn).defer_many([{"invoice_id": n} for n in range(50)])
        assert CountingCursor.statements == [app.queries.insert_jobs]
    assert len(ids) == job_count(db) == 50
    assert send.defer_many([]) == []
    assert job_count(db) == 50


@pytest.mark.anyio
async def test_async_twins_write_the_same_rows(
    send: cronbase.Task[Any, None], app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    one = await send.configure(delay=timedelta(seconds=30)).defer_async(invoice_id=1)
    many = await send.defer_many_async([{"invoice_id": 2}, {"invoice_id": 3}])
    await app.aclose()
    assert [job_row(db, i)["payload"]["invoice_id"] for i in (one, *many)] == [1, 2, 3]
    row = job_row(db, one)
    assert row["run_at"] - row["created_at"] == timedelta(seconds=30)


# -- the caller's transaction --------------------------------------------------------------------


@pytest.mark.parametrize("row_factory", [None, dict_row])
def test_a_job_deferred_on_the_callers_connection_exists_only_if_it_commits(
    send: cronbase.Task[Any, None],
    app: cronbase.App,
    database_url: str,
    db: psycopg.Connection[Any],
    row_factory: Any,
) -> None:
    # The caller's connection may carry its own row factory; dict_row is a common one.
    options: dict[str, Any] = {"row_factory": row_factory} if row_factory else {}
    with psycopg.connect(database_url, **options) as conn:
        with conn.transaction():
            committed = send.configure(connection=conn).defer(invoice_id=1)
            keyed = send.configure(connection=conn, idempotency_key="k").defer(invoice_id=2)
            many = send.configure(connection=conn).defer_many([{"invoice_id": 3}])
            # Not visible outside the transaction before it commits.
            assert job_count(db) == 0
        rolled_back: list[int] = []

        def defer_then_fail() -> None:
            with conn.transaction():
                rolled_back.append(send.configure(connection=conn).defer(invoice_id=4))
                rolled_back.extend(send.configure(connection=conn).defer_many([{"invoice_id": 5}]))
                raise RuntimeError("payment provider said no")

        with pytest.raises(RuntimeError):
            defer_then_fail()
    assert len(rolled_back) == 2
    assert job_count(db) == 3
    assert {committed, keyed, *many} == {
        r[0] for r in db.execute("SELECT id FROM cronbase.jobs_all")
    }
    with pytest.raises(cronbase.JobNotFoundError, match=f"no job with id {rolled_back[0]}"):
        app.jobs.get(rolled_back[0])


@pytest.mark.anyio
@pytest.mark.parametrize("row_factory", [None, dict_row])
async def test_async_connection_commit_keeps_the_job_and_rollback_drops_it(
    send: cronbase.Task[Any, None], database_url: str, db: psycopg.Connection[Any], row_factory: Any
) -> None:
    options: dict[str, Any] = {"row_factory": row_factory} if row_factory else {}
    async with await psycopg.AsyncConnection.connect(database_url, **options) as conn:
        async with conn.transaction():
            committed = await send.configure(connection=conn).defer_async(invoice_id=1)
            keyed = await send.configure(connection=conn, dedupe_key="d").defer_async(invoice_id=2)
            many = await send.configure(connection=conn).defer_many_async([{"invoice_id": 3}])
            assert job_count(db) == 0

        async def defer_then_fail() -> None:
            async with conn.transaction():
                await send.configure(connection=conn).defer_async(invoice_id=4)
                raise RuntimeError("rolled back")

        with pytest.raises(RuntimeError):
            await defer_then_fail()
    assert {r[0] for r in db.execute("SELECT id FROM cronbase.jobs_all")} == {
        committed,
        keyed,
        *many,
    }


def test_a_connection_of_the_wrong_kind_is_refused_by_name(
    send: cronbase.Task[Any, None], database_url: str, db: psycopg.Connection[Any]
) -> None:
    with psycopg.connect(database_url) as conn:
        deferral = send.configure(connection=conn)
        with pytest.raises(
            cronbase.ConnectionTypeError,
            match=r"got a psycopg.Connection, which is sync; use defer\(\)",
        ):
            asyncio.run(deferral.defer_async(invoice_id=1))
    assert job_count(db) == 0


# -- idempotency and dedupe keys -------------------------------------------------------------------


def claim_one(app: cronbase.App, db: psycopg.Connection[Any]) -> int:
    rows = claim_rows(app, db, 1, "test-worker")[0]
    assert len(rows) == 1, rows
    return rows[0].id


def run_burst(app: cronbase.App) -> None:
    app.run_worker(burst=True, install_signal_handlers=False)


def test_an_idempotency_key_gives_one_job_ever_whatever_its_state(
    send: cronbase.Task[Any, None], app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    keyed = send.configure(idempotency_key="charge:812")
    first = keyed.defer(invoice_id=812)
    assert keyed.defer(invoice_id=999) == first  # the second payload is not written
    run_burst(app)
    assert job_row(db, first)["status"] == "succeeded"
    assert keyed.defer(invoice_id=812) == first
    assert job_count(db) == 1
    assert job_row(db, first)["payload"] == {"invoice_id": 812}


def test_a_dedupe_key_gives_one_waiting_or_running_job_then_frees_up(
    send: cronbase.Task[Any, None], app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    deduped = send.configure(dedupe_key="invoice:812")
    first = deduped.defer(invoice_id=1)
    assert deduped.defer(invoice_id=2) == first  # queued
    claim_one(app, db)
    assert deduped.defer(invoice_id=3) == first  # running
    app.jobs.cancel(first)
    second = deduped.defer(invoice_id=4)  # the cancelled job no longer holds the key
    assert second != first
    run_burst(app)
    assert job_row(db, second)["status"] == "succeeded"
    third = deduped.defer(invoice_id=5)  # nor does a succeeded one
    assert len({first, second, third}) == 3
    assert [job_row(db, i)["payload"]["invoice_id"] for i in (first, second, third)] == [1, 4, 5]


def test_a_failed_job_waiting_for_its_retry_still_holds_its_dedupe_key(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(retry=cronbase.Backoff(base=timedelta(hours=1), jitter=0))
    def flaky(n: int) -> None:
        raise ValueError(n)

    first = flaky.configure(dedupe_key="k").defer(n=1)
    run_burst(app)
    assert job_row(db, first)["status"] == "failed"
    assert flaky.configure(dedupe_key="k").defer(n=2) == first


def test_replace_debounces_the_waiting_job(
    send: cronbase.Task[Any, None], db: psycopg.Connection[Any]
) -> None:
    first = send.configure(dedupe_key="cache:prices", delay=timedelta(seconds=30)).defer(
        invoice_id=1
    )
    replaced = send.configure(
        dedupe_key="cache:prices", on_duplicate="replace", delay=timedelta(seconds=60), priority=3
    ).defer(invoice_id=2, note="newer")
    assert replaced == first
    row = job_row(db, first)
    assert row["payload"] == {"invoice_id": 2, "note": "newer"}
    assert row["priority"] == 3
    # Due 60 s after the replacing statement's database time (which it stamped on updated_at).
    assert row["run_at"] - row["updated_at"] == timedelta(seconds=60)
    assert row["updated_at"] > row["created_at"]
    assert job_count(db) == 1


def test_replace_leaves_a_running_job_alone_and_makes_a_new_one_once_it_finished(
    send: cronbase.Task[Any, None], app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    replace = send.configure(dedupe_key="k", on_duplicate="replace")
    first = replace.defer(invoice_id=1)
    claim_one(app, db)
    assert replace.defer(invoice_id=2) == first
    assert job_row(db, first)["payload"] == {"invoice_id": 1}  # it started with this one
    app.jobs.cancel(first)
    second = replace.defer(invoice_id=3)
    assert second != first
    assert job_row(db, second)["payload"] == {"invoice_id": 3}


@pytest.mark.parametrize(
    "options",
    [
        {"idempotency_key": "same"},
        {"dedupe_key": "same"},
        {"dedupe_key": "same", "on_duplicate": "replace"},
        {"idempotency_key": "same", "dedupe_key": "also-same"},
    ],
)
def test_concurrent_defers_with_one_key_make_one_job_and_all_get_its_id(
    send: cronbase.Task[Any, None],
    database_url: str,
    db: psycopg.Connection[Any],
    options: dict[str, Any],
) -> None:
    callers = 16
    start = threading.Barrier(callers)
    connections = [psycopg.connect(database_url, autocommit=True) for _ in range(callers)]

    def defer(n: int) -> int:
        deferral = send.configure(connection=connections[n], **options)
        start.wait(timeout=30)  # all callers insert at once: the unique index must decide
        return deferral.defer(invoice_id=n)

    try:
        with ThreadPoolExecutor(callers) as pool:
            ids = list(pool.map(defer, range(callers)))
    finally:
        for conn in connections:
            conn.close()
    assert len(set(ids)) == 1
    assert job_count(db) == 1
    assert job_row(db, ids[0])["payload"]["invoice_id"] in range(callers)


def test_concurrent_defers_through_the_apps_pool_make_one_job(
    send: cronbase.Task[Any, None], db: psycopg.Connection[Any]
) -> None:
    start = threading.Barrier(16)

    def defer(n: int) -> int:
        start.wait(timeout=30)
        return send.configure(idempotency_key="pooled").defer(invoice_id=n)

    with ThreadPoolExecutor(16) as pool:
        ids = list(pool.map(defer, range(16)))
    assert len(set(ids)) == 1
    assert job_count(db) == 1


@pytest.mark.anyio
async def test_concurrent_async_defers_with_one_key_make_one_job(
    send: cronbase.Task[Any, None], database_url: str, db: psycopg.Connection[Any]
) -> None:
    connections = [
        await psycopg.AsyncConnection.connect(database_url, autocommit=True) for _ in range(8)
    ]
    try:
        ids = await asyncio.gather(
            *(
                send.configure(connection=conn, dedupe_key="async").defer_async(invoice_id=n)
                for n, conn in enumerate(connections)
            )
        )
    finally:
        for conn in connections:
            await conn.close()
    assert len(set(ids)) == 1
    assert job_count(db) == 1


def test_when_both_keys_match_different_jobs_the_idempotency_key_wins(app: cronbase.App) -> None:
    @app.task
    def sync_account(n: int) -> None:
        pass

    by_key = sync_account.configure(idempotency_key="sync:1").defer(n=1)
    by_dedupe = sync_account.configure(dedupe_key="account:1").defer(n=2)
    for _ in range(3):
        again = sync_account.configure(idempotency_key="sync:1", dedupe_key="account:1").defer(n=3)
        assert again == by_key != by_dedupe
