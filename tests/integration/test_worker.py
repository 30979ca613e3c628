"""The worker in this process: burst, queues, concurrency, priority, threads, timeouts, progress."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import cronbase
from tests.conftest import SCHEMA
from tests.e2e.harness import eventually, running_worker, wait_event

NO_RETRY_SOON = cronbase.Backoff(base=timedelta(hours=1), jitter=0)


def row(db: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
    with db.cursor(row_factory=dict_row) as cur:
        found = cur.execute("SELECT * FROM cronbase.jobs_all WHERE id = %s", (job_id,)).fetchone()
    assert found is not None
    return found


def statuses(db: psycopg.Connection[Any]) -> dict[str, int]:
    rows = db.execute("SELECT status, count(*) FROM cronbase.jobs_all GROUP BY status").fetchall()
    return {status: count for status, count in rows}


def run_burst(app: cronbase.App, **options: Any) -> None:
    app.run_worker(burst=True, install_signal_handlers=False, **options)


# -- burst and queues ------------------------------------------------------------------------------


def test_burst_returns_at_once_when_nothing_is_due(app: cronbase.App) -> None:
    @app.task
    def later() -> None:
        raise AssertionError("not due yet")

    job_id = later.configure(delay=timedelta(hours=1)).defer()
    run_burst(app)
    job = app.jobs.get(job_id)
    assert (job.status, job.attempts) == (cronbase.JobStatus.QUEUED, 0)


def test_burst_runs_everything_due_then_returns(app: cronbase.App) -> None:
    ran: list[int] = []

    @app.task
    def record(n: int) -> None:
        ran.append(n)

    record.defer_many([{"n": n} for n in range(25)])
    run_burst(app, concurrency=4)
    assert sorted(ran) == list(range(25))
    assert [job.status for job in app.jobs.list()] == [cronbase.JobStatus.SUCCEEDED] * 25


def test_a_worker_on_queue_a_never_claims_queue_b(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    ran: list[str] = []

    @app.task
    def record(queue: str) -> None:
        ran.append(queue)

    a_jobs = [record.configure(queue="a").defer(queue="a") for _ in range(3)]
    b_jobs = [record.configure(queue="b").defer(queue="b") for _ in range(3)]
    run_burst(app, queues=["a"])
    assert ran == ["a"] * 3
    assert {row(db, j)["status"] for j in a_jobs} == {"succeeded"}
    assert {(row(db, j)["status"], row(db, j)["attempts"]) for j in b_jobs} == {("queued", 0)}


def test_task_and_queue_names_an_array_literal_would_read_as_null_are_claimed_by_name(
    app: cronbase.App, database_url: str
) -> None:
    # A worker sends its task and queue names to the claims as array literals (db/arrays.py):
    # written there unquoted, NULL would be a null element that matches nothing.
    ran: list[tuple[str, int]] = []

    @app.task(name="NULL", queue="NULL")
    def plain(n: int) -> None:
        ran.append(("plain", n))

    @app.task(name="null", queue="NULL", fair_key="{n}")
    def fair(n: int) -> None:
        ran.append(("fair", n))

    plain.defer_many([{"n": n} for n in range(3)])
    fair.defer_many([{"n": n} for n in range(3)])
    with cronbase.App(database_url=database_url, schema=SCHEMA) as other:
        unknown = other.task(name="Null", queue="NULL")(lambda n: None).defer(n=0)
    run_burst(app, queues=["NULL"], concurrency=2)
    assert sorted(ran) == [("fair", n) for n in range(3)] + [("plain", n) for n in range(3)]
    assert {j.status for j in app.jobs.list() if j.id != unknown} == {cronbase.JobStatus.SUCCEEDED}
    assert app.jobs.get(unknown).status == cronbase.JobStatus.QUEUED


def test_priority_lower_runs_first(app: cronbase.App) -> None:
    order: list[int] = []

    @app.task
    def record(priority: int) -> None:
        order.append(priority)

    priorities = [50, 10, 100, 0, -5, 10]
    for p in priorities:
        record.configure(priority=p).defer(priority=p)
    run_burst(app, concurrency=1)
    assert order == sorted(priorities)


# -- concurrency and threads -----------------------------------------------------------------------


class Gauge:
    """How many handlers run now, and the most that ever ran at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def enter(self) -> None:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_never_more_handlers_at_once_than_the_concurrency(
    app: cronbase.App, db: psycopg.Connection[Any], kind: str
) -> None:
    limit = 3
    gauge = Gauge()
    open_async, open_sync = asyncio.Event(), threading.Event()

    if kind == "async":

        @app.task(name="held")
        async def held_async(n: int) -> None:
            gauge.enter()
            await open_async.wait()
            gauge.leave()

    else:

        @app.task(name="held")
        def held_sync(n: int) -> None:
            gauge.enter()
            open_sync.wait()
            gauge.leave()

    await app.get_task("held").defer_many_async([{"n": n} for n in range(limit + 5)])
    try:
        async with running_worker(app, concurrency=limit, poll_interval=timedelta(seconds=0.05)):
            await eventually(lambda: gauge.now == limit, what=f"{limit} handlers to run")
            # The worker claimed no more than it can run; the rest wait in the database.
            assert statuses(db) == {"running": limit, "queued": 5}
            open_async.set()
            open_sync.set()
            await eventually(lambda: statuses(db) == {"succeeded": limit + 5}, what="all jobs")
    finally:
        open_sync.set()
    assert gauge.peak == limit


@pytest.mark.anyio
async def test_a_blocking_sync_handler_does_not_stop_async_ones(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    blocked, unblock = threading.Event(), threading.Event()
    async_ran = asyncio.Event()

    @app.task
    def blocker() -> None:
        blocked.set()
        unblock.wait()

    @app.task
    async def ticker() -> None:
        for _ in range(3):
            await asyncio.sleep(0)  # gives the loop its turn: fine only if nothing blocks it
        async_ran.set()

    try:
        async with running_worker(app, concurrency=2):
            blocker_id = await blocker.defer_async()
            await eventually(blocked.is_set, what="the sync handler to block")
            await ticker.defer_async()
            await wait_event(async_ran, what="the async handler, while the sync one blocks")
            assert row(db, blocker_id)["status"] == "running"
            unblock.set()
            await eventually(lambda: statuses(db) == {"succeeded": 2}, what="both jobs")
    finally:
        unblock.set()


# -- timeouts, errors, progress, leases ------------------------------------------------------------


@pytest.mark.anyio
async def test_an_async_handler_past_its_timeout_fails_with_timeout_error(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    cancelled = asyncio.Event()

    @app.task(timeout=timedelta(milliseconds=200), max_attempts=3, retry=NO_RETRY_SOON)
    async def hangs() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job_id = await hangs.defer_async()
    async with asyncio.timeout(30):
        await app.worker(burst=True, install_signal_handlers=False).run()
    await app.aclose()

    assert cancelled.is_set()
    job = row(db, job_id)
    assert (job["status"], job["attempts"], job["error_type"]) == ("failed", 1, "TimeoutError")
    assert "timeout of 0:00:00.200000" in job["last_error"]
    attempt = app.jobs.attempts(job_id)
    assert [(a.outcome, a.error_type) for a in attempt] == [("failed", "TimeoutError")]


def test_an_error_message_with_a_nul_byte_is_recorded_and_the_worker_goes_on(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(max_attempts=1)
    def binary_error() -> None:
        raise ValueError("bad byte \x00 in input")

    @app.task
    def fine() -> None: ...

    broken, ok = binary_error.defer(), fine.defer()
    run_burst(app, concurrency=1)  # returns only once every outcome is written
    assert row(db, broken)["status"] == "dead"
    assert row(db, broken)["last_error"] == "ValueError: bad byte \\x00 in input"
    assert row(db, ok)["status"] == "succeeded"


@pytest.mark.anyio
async def test_progress_is_visible_in_the_jobs_row_while_the_job_runs(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    finish = asyncio.Event()

    @app.task
    async def long_report() -> None:
        cronbase.current_job().set_progress(40, stage="x")
        await finish.wait()

    async with running_worker(app):
        job_id = await long_report.defer_async()
        await eventually(
            lambda: (
                (lambda j: (j["status"], j["progress"], j["stage"]))(row(db, job_id))
                == ("running", 40.0, "x")
            ),
            what="progress 40 at stage x",
        )
        finish.set()
        await eventually(lambda: row(db, job_id)["status"] == "succeeded", what="the job")
    assert row(db, job_id)["progress"] == 100.0


@pytest.mark.anyio
async def test_a_job_outliving_a_short_lease_is_renewed_not_reaped(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    finish = asyncio.Event()

    @app.task(lease=timedelta(milliseconds=600))
    async def long_job() -> None:
        await finish.wait()

    leases: set[Any] = set()

    def renewed_three_times(job_id: int) -> bool:
        job = row(db, job_id)
        assert (job["status"], job["attempts"]) == ("running", 1)
        leases.add(job["locked_until"])
        return len(leases) >= 4

    # The worker reaps all the time: it must not reap its own live job.
    async with running_worker(app, reap_interval=timedelta(milliseconds=50)):
        job_id = await long_job.defer_async()
        await eventually(lambda: row(db, job_id)["status"] == "running", what="the claim")
        await eventually(lambda: renewed_three_times(job_id), what="three renewals")
        finish.set()
        await eventually(lambda: row(db, job_id)["status"] == "succeeded", what="the job")
    assert [(a.attempt, a.outcome) for a in app.jobs.attempts(job_id)] == [(1, "succeeded")]


@pytest.mark.anyio
async def test_the_worker_survives_its_database_connections_being_killed(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    ran = asyncio.Event()

    @app.task
    async def after_outage() -> None:
        ran.set()

    async with running_worker(app, poll_interval=timedelta(milliseconds=50)):
        # The next claim (and renewal, and completion) meets a dead connection.
        killed = db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE 'cronbase-worker%'"
        ).fetchall()
        assert killed, "the worker's pool connections were not found"
        await after_outage.defer_async()
        await wait_event(ran, what="a job deferred after the outage")
        await eventually(lambda: statuses(db) == {"succeeded": 1}, what="its outcome")


@pytest.mark.anyio
async def test_a_claim_connection_the_server_ended_while_the_worker_idled_is_replaced(
    app: cronbase.App, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    # The claimer keeps its connection from one claim to the next. The server ends it (and the
    # worker's others) while the worker idles: the next claim notices before it sends anything
    # and takes another connection, so it does not fail (no warning, no pause).
    ran = asyncio.Event()

    @app.task
    async def after_the_drop() -> None:
        ran.set()

    worker_backends = (
        "SELECT pid, state FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name LIKE 'cronbase-worker%'"
    )

    def all_idle() -> list[int]:
        # After its start (first claim, first retention round) the worker idles: nothing of it
        # is running a statement, so the kill below cannot fail one that was under way.
        rows = db.execute(worker_backends).fetchall()
        return [pid for pid, state in rows] if rows and all(s == "idle" for _, s in rows) else []

    with caplog.at_level(logging.WARNING, logger="cronbase"):
        async with running_worker(app, poll_interval=timedelta(seconds=30)):
            pids = await eventually(all_idle, what="the worker to idle")
            await asyncio.sleep(0.2)
            db.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid", [pids])
            gone = "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)"
            await eventually(
                lambda: db.execute(gone, [pids]).fetchone() == (0,), what="the backends to end"
            )
            # The listener's connection lives on: the NOTIFY wakes the worker for one claim.
            await after_the_drop.defer_async()
            await wait_event(ran, what="the job deferred after the drop")
            await eventually(lambda: statuses(db) == {"succeeded": 1}, what="its outcome")
    assert "claiming jobs failed" not in caplog.text


def test_a_worker_with_a_pool_of_one_connection_shares_it_between_claims_and_outcomes(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    # With fewer than three connections the claimer keeps none between claims: the completer,
    # the heartbeat and the reaper need the one there is.
    with cronbase.App(database_url=database_url, schema=SCHEMA, pool_size=1) as small:

        @small.task
        def one(n: int) -> None:
            pass

        one.defer_many([{"n": n} for n in range(30)])
        small.run_worker(burst=True, concurrency=5, install_signal_handlers=False)
    assert statuses(db) == {"succeeded": 30}


@pytest.fixture
def locker(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """Another session: the row locks a test takes on it (FOR UPDATE) hold until it rolls back."""
    conn = psycopg.connect(database_url)
    try:
        yield conn
    finally:
        conn.close()


def waiting_on_locks(db: psycopg.Connection[Any]) -> list[str]:
    """The start of each session's query that waits for a lock: every such session, not only
    those pg_blocking_pids() names the locker for, since a second waiter on a row waits for the
    first (the tuple lock's queue)."""
    rows = db.execute(
        "SELECT left(query, 40) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    ).fetchall()
    return [r[0] for r in rows]


@pytest.mark.anyio
async def test_a_success_a_claim_is_writing_is_not_renewed_beside_it(
    app: cronbase.App, db: psycopg.Connection[Any], locker: psycopg.Connection[Any]
) -> None:
    # A claim carrying a success holds that job's row until it commits. The heartbeat renewed
    # outcomes in flight too: the same rows, in another order, and the two deadlocked (seen in
    # bench's flow drain, where PostgreSQL aborted the claim and ended a burst worker). Here
    # another session holds the finished job's row, so the claim carrying it waits: the
    # heartbeat must not wait beside it, and must go on renewing the job still running.
    release = asyncio.Event()

    @app.task(lease=timedelta(milliseconds=600))
    async def stays() -> None:
        await release.wait()

    @app.task(lease=timedelta(milliseconds=600))
    async def finishes() -> None:
        locker.execute("SELECT 1 FROM cronbase.jobs WHERE task = 'finishes' FOR UPDATE")

    async with running_worker(app, poll_interval=timedelta(milliseconds=50)):
        running_id = await stays.defer_async()
        await eventually(lambda: row(db, running_id)["status"] == "running", what="a claim")
        finished_id = await finishes.defer_async()
        await eventually(lambda: len(waiting_on_locks(db)) == 1, what="the claim to wait")
        before = row(db, running_id)["locked_until"]
        # Five renewals' worth (a third of the 600 ms lease each).
        await asyncio.sleep(1.0)
        assert len(waiting_on_locks(db)) == 1, "something besides the claim waits on the row"
        assert row(db, running_id)["locked_until"] > before, "the running job went unrenewed"
        locker.rollback()
        await eventually(lambda: row(db, finished_id)["status"] == "succeeded", what="the success")
        release.set()
        await eventually(lambda: statuses(db) == {"succeeded": 2}, what="both outcomes")
    assert [a.outcome for a in app.jobs.attempts(finished_id)] == ["succeeded"]


@pytest.mark.anyio
async def test_a_job_that_finishes_while_its_lease_is_renewed_is_written_after_the_renewal(
    app: cronbase.App, db: psycopg.Connection[Any], locker: psycopg.Connection[Any]
) -> None:
    # The heartbeat takes its snapshot of held jobs, then renews their rows. A job of the
    # snapshot that finished meanwhile rode the next claim, whose DELETE met the renewal's UPDATE
    # on the same rows in another order: a deadlock (bench's drain at concurrency 100, 4
    # processes; PostgreSQL aborted the claim and a burst worker ended). Here another session
    # holds the running job's row, so the renewal waits on it; the job then finishes. No claim
    # and no flush may write it beside the renewal: one session waits on the row, not two.
    finish = asyncio.Event()

    @app.task(lease=timedelta(milliseconds=600))
    async def renewed() -> None:
        await finish.wait()

    async with running_worker(app, poll_interval=timedelta(milliseconds=50)):
        job_id = await renewed.defer_async()
        await eventually(lambda: row(db, job_id)["status"] == "running", what="a claim")
        locker.execute("SELECT 1 FROM cronbase.jobs WHERE id = %s FOR UPDATE", [job_id])
        # A third of the 600 ms lease: the next renewal waits on the row.
        await eventually(lambda: len(waiting_on_locks(db)) == 1, what="the renewal to wait")
        assert "beat" in waiting_on_locks(db)[0]
        finish.set()
        # Claims (every 50 ms) and the completer's flush (after 20 ms) have had their turns.
        await asyncio.sleep(0.5)
        assert len(waiting_on_locks(db)) == 1, f"waiting beside the renewal: {waiting_on_locks(db)}"
        assert row(db, job_id)["status"] == "running"
        locker.rollback()
        await eventually(lambda: row(db, job_id)["status"] == "succeeded", what="the success")
    assert [a.outcome for a in app.jobs.attempts(job_id)] == ["succeeded"]


@pytest.mark.anyio
async def test_a_stopping_worker_hands_its_jobs_back_after_a_renewal_of_their_rows(
    app: cronbase.App,
    db: psycopg.Connection[Any],
    locker: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Past its grace period a stopping worker hands its running jobs back (release_jobs), while
    # its heartbeat may be renewing the same rows: two statements of one worker taking the rows
    # each in its own order can deadlock, as the claim and the renewal did. Here another session
    # holds a running job's row, so the renewal waits on it; the worker is then stopped with no
    # grace. The hand-back must wait for the renewal in the worker, not beside it on the row;
    # then both jobs are queued again, attempts not counted, and no lease is reported lost.

    @app.task(lease=timedelta(milliseconds=600))
    async def stays() -> None:
        await asyncio.Event().wait()

    async with running_worker(
        app, poll_interval=timedelta(milliseconds=50), shutdown_grace=timedelta(0)
    ) as worker:
        ids = [await stays.defer_async() for _ in range(2)]
        await eventually(lambda: statuses(db) == {"running": 2}, what="both claimed")
        locker.execute("SELECT 1 FROM cronbase.jobs WHERE id = %s FOR UPDATE", [ids[0]])
        # A third of the 600 ms lease: the next renewal waits on the row.
        await eventually(lambda: len(waiting_on_locks(db)) == 1, what="the renewal to wait")
        worker.stop()
        await asyncio.sleep(0.5)  # the jobs are cancelled and handed back meanwhile
        waiting = waiting_on_locks(db)
        locker.rollback()  # before the check: the worker's stop waits for the row
    assert len(waiting) == 1, f"waiting beside the renewal: {waiting}"
    assert statuses(db) == {"queued": 2}
    assert [row(db, i)["attempts"] for i in ids] == [0, 0]
    assert not [r for r in caplog.records if "lease lost" in r.getMessage()]


@pytest.mark.anyio
async def test_a_worker_whose_connection_is_lost_while_it_registers_retries_and_starts(
    app: cronbase.App,
    db: psycopg.Connection[Any],
    locker: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The database can go away between a starting worker's first connection and its
    # registration: the chaos tier started a worker through pgbouncer while PostgreSQL
    # restarted, its registration met "server conn crashed?" and it exited 1. Here another
    # session locks the workers table so the registration waits, and its backend is then ended
    # as a restart ends it: the worker must say so, retry and start, not exit.
    locker.execute("LOCK TABLE cronbase.workers IN SHARE MODE")
    worker = app.worker(install_signal_handlers=False, poll_interval=timedelta(milliseconds=50))
    run = asyncio.create_task(worker.run(), name="test-worker")
    try:
        with caplog.at_level(logging.WARNING, logger="cronbase"):
            registering = (
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE 'INSERT INTO %workers%'"
            )
            pids = await eventually(
                lambda: [r[0] for r in db.execute(registering)], what="the registration to wait"
            )
            db.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid", [pids])
            await asyncio.sleep(0.3)  # the worker meets the lost connection, and waits
            assert not run.done(), "the worker ended at its start"
            locker.rollback()
            async with asyncio.timeout(30):
                await worker.started.wait()
        found = db.execute("SELECT count(*) FROM cronbase.workers WHERE id = %s", [worker.id])
        assert found.fetchone() == (1,)
        assert "database unreachable: registering the worker failed" in caplog.text
        assert "database reachable again after" in caplog.text
        assert "(registering the worker works; 1 failed tries by registering the worker" in (
            caplog.text
        )
    finally:
        locker.rollback()
        worker.stop()
        async with asyncio.timeout(30):
            await run
        await app.aclose()


@pytest.mark.anyio
async def test_a_success_whose_carrying_claim_fails_is_written_once_later(
    app: cronbase.App, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    # A success rides on the worker's next claim. Here that claim fails (a table the claim reads
    # is away for a moment): the claim fails whole, the success goes back to the completer and
    # is written afterwards, once, and the job is not run again.
    runs = []

    @app.task
    async def breaks_the_claim_then_succeeds() -> None:
        runs.append(1)
        db.execute("ALTER TABLE cronbase.queues RENAME TO queues_away")

    async with running_worker(app, poll_interval=timedelta(milliseconds=50)) as worker:
        job_id = await breaks_the_claim_then_succeeds.defer_async()
        await eventually(
            lambda: any("claiming jobs failed" in r.getMessage() for r in caplog.records),
            what="a failed claim",
        )
        db.execute("ALTER TABLE cronbase.queues_away RENAME TO queues")
        await eventually(lambda: row(db, job_id)["status"] == "succeeded", what="the success")
        assert worker.parts.completer is not None
        await worker.parts.completer.drain()
        assert (worker.parts.completer.written, worker.parts.completer.fenced_out) == (1, 0)
    assert runs == [1]
    assert [(a.attempt, a.outcome) for a in app.jobs.attempts(job_id)] == [(1, "succeeded")]


@pytest.mark.anyio
async def test_connections_killed_under_the_worker_cost_no_claim(
    app: cronbase.App, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    # The pool checks an idle connection that has something to read (the server's goodbye)
    # before handing it out: a terminated backend is replaced, not used and failed on.
    runs = []

    @app.task
    async def kills_the_pool_then_succeeds() -> None:
        runs.append(1)
        killed = db.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE 'cronbase-worker%'"
        ).fetchall()
        assert killed
        # Gone, so their goodbye is on the wire (a restart's connections are the same).
        await eventually(
            lambda: (
                not db.execute(
                    "SELECT FROM pg_stat_activity WHERE pid = ANY(%s)", [[p for p, _ in killed]]
                ).fetchall()
            ),
            what="the backends to exit",
        )

    # No retention round: one of its statements may be on a killed connection (it says so and
    # tries again next round; this is about claims).
    async with running_worker(app, poll_interval=timedelta(milliseconds=50), retention=None):
        job_id = await kills_the_pool_then_succeeds.defer_async()
        await eventually(lambda: row(db, job_id)["status"] == "succeeded", what="the success")
        follow_up = await kills_the_pool_then_succeeds.defer_async()
        await eventually(lambda: row(db, follow_up)["status"] == "succeeded", what="the next")
    assert not [r for r in caplog.records if "failed" in r.getMessage()], caplog.text
    assert runs == [1, 1]
