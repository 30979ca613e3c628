"""Durable handlers on the real database: steps stored in the effects ledger and skipped on the
next run, sleeps and event waits that suspend the job (no attempt counted, no lease held),
events emitted inside a caller's transaction, the emit/suspend race; and inline mode."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase import JobStatus as S
from cronbase.testing import inline
from tests.integration.test_steering import running_worker


def drain(app: cronbase.App) -> None:
    app.run_worker(burst=True, install_signal_handlers=False, concurrency=20)


def row(db: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
    with db.cursor(row_factory=psycopg.rows.dict_row) as cur:
        found = cur.execute(
            "SELECT status, attempts, waiting_for, run_at, run_at - now() AS left, result"
            " FROM cronbase.jobs_all WHERE id = %s",
            (job_id,),
        ).fetchone()
    assert found is not None
    return found


def test_finished_steps_return_their_stored_result_on_the_next_attempt(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    calls: list[str] = []

    def charge(invoice: int) -> dict[str, Any]:
        calls.append("charge")
        return {"charge": f"ch_{invoice}", "parts": (1, 2)}

    @app.task(retry=cronbase.Backoff(base=timedelta(milliseconds=1), jitter=0))
    def bill(invoice: int) -> Any:
        job = cronbase.current_job()
        charged = job.step("charge", charge, invoice)
        assert charged["parts"] == [1, 2]  # JSON's, on the first run as on replays
        if job.attempt == 1:
            raise RuntimeError("crash after the charge")
        mailed = job.step("mail", lambda: calls.append("mail") or "sent")
        return [charged["charge"], mailed]

    job_id = bill.defer(invoice=812)
    drain(app)
    drain(app)
    assert row(db, job_id)["status"] == "succeeded"
    assert app.jobs.get(job_id).result == ["ch_812", "sent"]
    assert calls == ["charge", "mail"]  # the charge ran once over two attempts
    effect = app.effects.get(f"step:{job_id}:charge")
    assert (effect.status, effect.result) == (
        "done",
        {"value": {"charge": "ch_812", "parts": [1, 2]}},
    )


def test_a_step_name_used_twice_in_one_run_is_refused(app: cronbase.App) -> None:
    @app.task(max_attempts=1)
    def twice() -> None:
        job = cronbase.current_job()
        job.step("a", int)
        job.step("a", int)

    job_id = twice.defer()
    drain(app)
    job = app.jobs.get(job_id)
    assert job.status is S.DEAD
    assert job.last_error == (
        f"WorkflowError: step 'a' already ran in this run of job {job_id}; give each step its "
        "own name (in a loop: f'charge:{item}')"
    )


def test_a_sleep_suspends_the_job_without_counting_the_attempt(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    ran: list[str] = []

    @app.task
    def nap() -> str:
        job = cronbase.current_job()
        job.step("before", ran.append, "before")
        try:
            job.sleep(timedelta(seconds=1))
        except Exception:  # a suspension is no Exception: this does not swallow it
            ran.append("swallowed")
            raise
        ran.append("after")
        return "awake"

    job_id = nap.defer()
    drain(app)
    suspended = row(db, job_id)
    assert (suspended["status"], suspended["attempts"]) == ("queued", 0)
    assert timedelta(0) < suspended["left"] <= timedelta(seconds=1)
    assert [a.outcome for a in app.jobs.attempts(job_id)] == ["suspended"]
    time.sleep(1.1)
    drain(app)
    assert row(db, job_id)["status"] == "succeeded"
    assert ran == ["before", "after"]


@pytest.mark.anyio
async def test_async_handlers_use_the_async_twins(app: cronbase.App) -> None:
    async def fetch(n: int) -> int:
        return n + 1

    @app.task
    async def steps() -> int:
        job = cronbase.current_job()
        first = await job.step_async("fetch", fetch, 1)
        await job.sleep_async(0)
        paid = await job.wait_for_async("async:paid")
        return first + paid["n"]

    await app.events.emit_async("async:paid", {"n": 40})
    job_id = await steps.defer_async()
    await app.worker(burst=True, install_signal_handlers=False).run()
    assert (await app.jobs.get_async(job_id)).result == 42
    await app.aclose()


def test_wait_for_suspends_until_the_event_and_returns_its_payload(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def awaits(key: str) -> Any:
        return cronbase.current_job().wait_for(key)

    job_id = awaits.defer(key="invoice_paid:812")
    drain(app)
    waiting = row(db, job_id)
    assert (waiting["status"], waiting["attempts"], waiting["waiting_for"]) == (
        "queued",
        0,
        "invoice_paid:812",
    )
    assert waiting["run_at"].year == 9999  # no timeout: only the event wakes it
    assert app.events.emit("invoice_paid:812", {"amount": 120}) is True
    woken = row(db, job_id)
    assert (woken["waiting_for"], woken["left"] <= timedelta(0)) == (None, True)
    drain(app)
    assert row(db, job_id)["result"] == {"amount": 120}
    assert app.events.emit("invoice_paid:812", {"amount": 999}) is False
    assert app.events.get("invoice_paid:812")["payload"] == {"amount": 120}


def test_a_wait_that_times_out_raises_in_the_handler_and_says_so_on_replay(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    seen: list[str] = []

    @app.task
    def impatient() -> str:
        job = cronbase.current_job()
        try:
            job.wait_for("never", timeout=timedelta(milliseconds=300))
        except cronbase.EventTimeout as exc:
            seen.append(str(exc))
            return "gave up"
        return "got it"

    job_id = impatient.defer()
    drain(app)
    assert timedelta(0) < row(db, job_id)["left"] <= timedelta(milliseconds=300)
    time.sleep(0.35)
    drain(app)
    assert app.jobs.get(job_id).result == "gave up"
    assert seen == ["event 'never' was not emitted before wait_for's timeout"]
    # The timeout is a recorded outcome: an event emitted later does not change a replay.
    assert app.effects.get(f"step:{job_id}:event:never").result == {"timed_out": True}


def test_an_event_emitted_in_a_rolled_back_transaction_never_happened(
    app: cronbase.App, database_url: str, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def awaits() -> Any:
        return cronbase.current_job().wait_for("shipped:7")

    job_id = awaits.defer()
    drain(app)
    with psycopg.connect(database_url) as conn:
        assert app.events.emit("shipped:7", "first", connection=conn) is True
        conn.rollback()
        assert app.events.get("shipped:7") is None
        assert row(db, job_id)["waiting_for"] == "shipped:7"
        app.events.emit("shipped:7", "second", connection=conn)
        conn.commit()
    drain(app)
    assert app.jobs.get(job_id).result == "second"


def test_bad_event_keys_and_payloads_are_refused_by_name(app: cronbase.App) -> None:
    with pytest.raises(cronbase.EventError, match="an event needs a key"):
        app.events.emit("")
    with pytest.raises(cronbase.EventError, match=r"event 'k': its payload cannot be stored"):
        app.events.emit("k", object())
    assert app.events.get("k") is None


def test_emits_racing_suspensions_lose_no_wake_up(
    app: cronbase.App, database_url: str, db: psycopg.Connection[Any]
) -> None:
    """Each job waits for its own key while another thread emits it at about the moment the
    worker suspends the job: none may stay asleep (run_at 9999) with its event there."""

    @app.task
    def awaits(key: str) -> Any:
        return cronbase.current_job().wait_for(key)

    keys = [f"race:{n}" for n in range(60)]
    ids = awaits.defer_many([{"key": k} for k in keys])

    def emit_all() -> None:
        emitter = cronbase.App(database_url)
        try:
            for key in keys:
                time.sleep(0.002)
                emitter.events.emit(key, key)
        finally:
            emitter.close()

    thread = threading.Thread(target=emit_all)
    with running_worker(app):
        thread.start()
        thread.join()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            done = db.execute(
                "SELECT count(*) FROM cronbase.jobs_all WHERE id = ANY(%s) AND status = 'succeeded'",
                (ids,),
            ).fetchone()
            if done == (len(ids),):
                break
            time.sleep(0.1)
    asleep = db.execute(
        "SELECT id FROM cronbase.jobs_all WHERE id = ANY(%s) AND status <> 'succeeded'", (ids,)
    ).fetchall()
    assert asleep == []
    assert [app.jobs.get(i).result for i in ids] == keys


def test_inline_mode_runs_steps_sleeps_and_event_waits(app: cronbase.App) -> None:
    charged: list[int] = []

    @app.task
    def order(n: int) -> Any:
        job = cronbase.current_job()
        job.step("charge", charged.append, n)
        job.sleep(timedelta(days=3))  # no time passes in inline mode
        return job.wait_for(f"paid:{n}")

    with inline(app) as run:
        app.events.emit("paid:1", {"ok": 1})
        first = order.defer(n=1)
        assert run.job(first).result == {"ok": 1}
        second = order.defer(n=2)
        assert (run.job(second).status, run.job(second).waiting_for) == (S.QUEUED, "paid:2")
        assert app.events.emit("paid:2", {"ok": 2}) is True  # runs it again, now
        assert run.job(second).result == {"ok": 2}
        assert app.events.emit("paid:2", {"ok": 3}) is False
    assert charged == [1, 2]  # each job's step once, over its two runs
