"""``app.effects`` in this process (sync and async twins), and ``cronbase effects`` as a command.

An owner that died is played by a ``once()`` block entered by hand and never left; a row goes
stale when the database clock says so (waited for, never slept).
"""

from __future__ import annotations

import asyncio
import json
import threading
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import cronbase
from cronbase import Effect, EffectError, EffectInProgress, EffectNotFoundError
from tests.conftest import wait_for
from tests.e2e.test_cli import cronbase as run_cli
from tests.e2e.test_cli import ok

KEY = "monthly_report:2026-10:ana@example.com"
HOUR = timedelta(hours=1)
SHORT = timedelta(milliseconds=300)


def row(db: psycopg.Connection[Any], key: str = KEY) -> dict[str, Any] | None:
    with db.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM cronbase.effects WHERE key = %s", (key,)).fetchone()


def count(db: psycopg.Connection[Any]) -> int:
    found = db.execute("SELECT count(*) FROM cronbase.effects").fetchone()
    assert found is not None
    return int(found[0])


def wait_stale(db: psycopg.Connection[Any], stale_after: timedelta, key: str = KEY) -> None:
    """Until the database clock says the effect's processing row is older than stale_after."""

    def is_stale() -> bool:
        found = db.execute(
            "SELECT started_at < now() - %s::interval FROM cronbase.effects WHERE key = %s",
            (stale_after, key),
        ).fetchone()
        return bool(found and found[0])

    wait_for(is_stale, timeout=30, what=f"effect {key!r} to be older than {stale_after}")


def dead_owner(
    app: cronbase.App, key: str = KEY, stale_after: timedelta = SHORT
) -> tuple[Effect, AbstractContextManager[Effect]]:
    """Enters ``once(key)`` and leaves the block open: an owner that stopped mid-effect."""
    block = app.effects.once(key, stale_after=stale_after)
    return block.__enter__(), block


# -- owning, done, in progress --------------------------------------------------------------------


def test_the_first_caller_owns_and_its_record_is_kept(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    with app.effects.once(KEY) as effect:
        assert (effect.done, effect.taken_over, effect.reconciled) == (False, False, False)
        during = row(db)
        assert during is not None
        assert (during["status"], during["job_id"], during["attempt"]) == ("processing", None, None)
        effect.record(message_id="<m1@x>")
    after = row(db)
    assert after is not None
    assert (after["status"], after["result"], after["error"]) == (
        "done",
        {"message_id": "<m1@x>"},
        None,
    )
    assert after["owner"] == during["owner"]
    assert after["finished_at"] is not None
    assert after["takeovers"] == 0


def test_a_done_effect_is_seen_as_done_with_its_result(app: cronbase.App) -> None:
    with app.effects.once(KEY) as effect:
        effect.record(message_id="<m1@x>")
    runs = 0
    with app.effects.once(KEY) as again:
        assert again.done
        assert again.result == {"message_id": "<m1@x>"}
        with pytest.raises(EffectError, match="already done; there is nothing to record"):
            again.record(message_id="<m2@x>")
        if not again.done:
            runs += 1
    assert runs == 0
    assert app.effects.get(KEY).result == {"message_id": "<m1@x>"}


def test_a_block_without_record_ends_done_with_an_empty_result(app: cronbase.App) -> None:
    with app.effects.once(KEY) as effect:
        assert not effect.done
    record = app.effects.get(KEY)
    assert (record.status, record.result) == ("done", {})


def test_a_fresh_effect_of_another_owner_is_in_progress(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    dead_owner(app, stale_after=HOUR)
    before = row(db)
    with (
        pytest.raises(EffectInProgress, match=f"effect '{KEY}' is in progress by a caller") as err,
        app.effects.once(KEY, stale_after=HOUR),
    ):
        pytest.fail("the block ran while another owner held the effect")
    assert "try again later" in str(err.value)
    assert row(db) == before  # nothing changed


def test_a_keyboard_interrupt_leaves_the_effect_processing(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    with pytest.raises(KeyboardInterrupt), app.effects.once(KEY):
        raise KeyboardInterrupt
    found = row(db)
    assert found is not None
    assert (found["status"], found["finished_at"]) == ("processing", None)
    with pytest.raises(EffectInProgress), app.effects.once(KEY, stale_after=HOUR):
        pytest.fail("unreachable")


# -- stale takeover and reconcile ----------------------------------------------------------------


def test_a_stale_effect_is_taken_over_and_its_old_owner_cannot_finish(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    first, first_block = dead_owner(app)
    first_row = row(db)
    assert first_row is not None
    wait_stale(db, SHORT)

    with app.effects.once(KEY, stale_after=SHORT) as effect:
        assert (effect.done, effect.taken_over) == (False, True)
        taken = row(db)
        assert taken is not None
        assert (taken["status"], taken["takeovers"]) == ("processing", 1)
        assert taken["owner"] != first_row["owner"]
        assert taken["started_at"] > first_row["started_at"]
        effect.record(message_id="<second@x>")

    # The first owner comes back: its writes are fenced out by the owner token.
    first.record(message_id="<first@x>")
    with pytest.raises(EffectError, match="was taken over by another owner"):
        first_block.__exit__(None, None, None)
    final = row(db)
    assert final is not None
    assert (final["status"], final["result"], final["takeovers"]) == (
        "done",
        {"message_id": "<second@x>"},
        1,
    )


def test_stale_after_is_the_callers_own(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    dead_owner(app)
    wait_stale(db, SHORT)
    with pytest.raises(EffectInProgress), app.effects.once(KEY, stale_after=HOUR):
        pytest.fail("taken over although this caller allows an hour")
    with app.effects.once(KEY, stale_after=SHORT) as effect:
        assert effect.taken_over


def test_reconcile_marks_a_stale_effect_done_without_running_it(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    _, first_block = dead_owner(app)
    first_row = row(db)
    assert first_row is not None
    wait_stale(db, SHORT)
    asked: list[str] = []

    def reconcile(key: str) -> dict[str, Any]:
        asked.append(key)
        return {"message_id": "<found@x>"}

    ran = False
    with app.effects.once(KEY, stale_after=SHORT, reconcile=reconcile) as effect:
        assert (effect.done, effect.reconciled, effect.taken_over) == (True, True, False)
        assert effect.result == {"message_id": "<found@x>"}
        if not effect.done:
            ran = True
    assert not ran
    assert asked == [KEY]
    found = row(db)
    assert found is not None
    assert (found["status"], found["reconciled"], found["takeovers"], found["result"]) == (
        "done",
        True,
        1,
        {"message_id": "<found@x>"},
    )
    assert found["owner"] == first_row["owner"]  # the owner that did it, by all we know
    with pytest.raises(EffectError, match="taken over"):
        first_block.__exit__(None, None, None)
    with app.effects.once(KEY, reconcile=reconcile) as again:
        assert (again.done, again.reconciled) == (True, True)
    assert asked == [KEY]  # a done effect needs no asking


def test_reconcile_saying_none_lets_the_caller_take_over(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    dead_owner(app)
    wait_stale(db, SHORT)
    asked: list[str] = []

    def reconcile(key: str) -> None:
        asked.append(key)

    with app.effects.once(KEY, stale_after=SHORT, reconcile=reconcile) as effect:
        assert (effect.done, effect.taken_over, effect.reconciled) == (False, True, False)
        effect.record(message_id="<again@x>")
    assert asked == [KEY]
    record = app.effects.get(KEY)
    assert (record.status, record.reconciled, record.takeovers) == ("done", False, 1)


def test_reconcile_is_not_asked_about_fresh_effects_but_is_about_failed_ones(
    app: cronbase.App,
) -> None:
    asked: list[str] = []

    def reconcile(key: str) -> dict[str, Any]:
        asked.append(key)
        return {"found": True}

    dead_owner(app, stale_after=HOUR)
    with pytest.raises(EffectInProgress), app.effects.once(KEY, reconcile=reconcile):
        pytest.fail("unreachable")

    other = "monthly_report:2026-10:bo@example.com"
    with pytest.raises(RuntimeError), app.effects.once(other):
        raise RuntimeError("smtp down")
    assert asked == []
    # A failed block may have failed after the effect (its reply lost to a restart): reconcile
    # is asked, and what it found marks the effect done without running it again.
    with app.effects.once(other, reconcile=reconcile) as effect:
        assert (effect.done, effect.reconciled) == (True, True)
    assert asked == [other]
    # Without reconcile, a failed effect is taken over and run again.
    third = "monthly_report:2026-10:cy@example.com"
    with pytest.raises(RuntimeError), app.effects.once(third):
        raise RuntimeError("smtp down")
    with app.effects.once(third) as effect:
        assert (effect.done, effect.taken_over) == (False, True)


def test_an_async_reconcile_needs_once_async(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    dead_owner(app)
    before = row(db)
    wait_stale(db, SHORT)

    async def reconcile(key: str) -> dict[str, Any]:
        return {"found": key}

    with (
        pytest.raises(EffectError, match="coroutine function: use once_async"),
        app.effects.once(KEY, stale_after=SHORT, reconcile=reconcile),
    ):
        pytest.fail("unreachable")
    assert row(db) == before  # still the dead owner's


def test_a_reconcile_that_raises_changes_nothing(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    dead_owner(app)
    before = row(db)
    wait_stale(db, SHORT)

    def reconcile(key: str) -> None:
        raise ConnectionError("mail provider unreachable")

    with (
        pytest.raises(ConnectionError, match="unreachable"),
        app.effects.once(KEY, stale_after=SHORT, reconcile=reconcile),
    ):
        pytest.fail("unreachable")
    assert row(db) == before  # still stale, for the next caller to ask again


def test_a_reconcile_result_that_is_not_json_is_refused(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    dead_owner(app)
    before = row(db)
    wait_stale(db, SHORT)
    with (
        pytest.raises(EffectError, match=f"effect '{KEY}': the result is not JSON-serialisable"),
        app.effects.once(KEY, stale_after=SHORT, reconcile=lambda key: {"at": object()}),
    ):
        pytest.fail("unreachable")
    assert row(db) == before


# -- failures inside the block --------------------------------------------------------------------


def test_a_block_that_raises_marks_failed_and_the_next_caller_takes_over(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    with pytest.raises(RuntimeError, match="smtp down"), app.effects.once(KEY, stale_after=HOUR):
        raise RuntimeError("smtp down")
    failed = row(db)
    assert failed is not None
    assert (failed["status"], failed["error"], failed["result"]) == (
        "failed",
        "RuntimeError: smtp down",
        None,
    )
    assert failed["finished_at"] is not None

    # No waiting for stale_after: a failed effect did not happen.
    with app.effects.once(KEY, stale_after=HOUR) as effect:
        assert (effect.done, effect.taken_over) == (False, True)
        taken = row(db)
        assert taken is not None
        assert (taken["status"], taken["error"], taken["finished_at"]) == ("processing", None, None)
        effect.record(message_id="<m@x>")
    record = app.effects.get(KEY)
    assert (record.status, record.takeovers, record.result) == ("done", 1, {"message_id": "<m@x>"})


def record_then_raise(effect: Effect, message_id: str) -> None:
    effect.record(message_id=message_id)
    raise RuntimeError("after sending")


def test_recorded_then_raised_is_still_done(app: cronbase.App) -> None:
    with pytest.raises(RuntimeError, match="after sending"), app.effects.once(KEY) as effect:
        record_then_raise(effect, "<m@x>")
    record = app.effects.get(KEY)
    assert (record.status, record.result, record.error) == ("done", {"message_id": "<m@x>"}, None)
    with app.effects.once(KEY) as again:
        assert again.done


# -- get, list, forget ---------------------------------------------------------------------------


def test_get_list_and_forget(app: cronbase.App) -> None:
    with app.effects.once("a") as effect:
        effect.record(n=1)
    with pytest.raises(RuntimeError), app.effects.once("b"):
        raise RuntimeError("no")
    dead_owner(app, "c")

    record = app.effects.get("a")
    assert (record.key, record.status, record.result, record.job_id, record.attempt) == (
        "a",
        "done",
        {"n": 1},
        None,
        None,
    )
    as_json = record.to_json()
    assert json.loads(json.dumps(as_json)) == as_json
    assert as_json["owner"] == str(record.owner)

    assert [e.key for e in app.effects.list()] == ["c", "b", "a"]  # most recently changed first
    assert [e.key for e in app.effects.list(status="done")] == ["a"]
    assert [e.key for e in app.effects.list(status="failed")] == ["b"]
    assert [e.key for e in app.effects.list(status="processing")] == ["c"]
    assert len(app.effects.list(limit=2)) == 2
    with pytest.raises(EffectError, match="unknown effect status 'bogus'; one of: processing"):
        app.effects.list(status="bogus")  # type: ignore[arg-type]

    forgotten = app.effects.forget("a")
    assert (forgotten.key, forgotten.status) == ("a", "done")
    with pytest.raises(EffectNotFoundError, match="no effect with key 'a'"):
        app.effects.get("a")
    with pytest.raises(EffectNotFoundError, match="no effect with key 'a'"):
        app.effects.forget("a")
    with app.effects.once("a") as again:  # it can happen again
        assert not again.done
    assert [e.key for e in app.effects.list()] == ["a", "c", "b"]


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "stale_after", "message"),
    [
        ("", HOUR, "effect key must not be empty"),
        (KEY, timedelta(0), r"stale_after must be positive, got datetime.timedelta\(0\)"),
        (
            KEY,
            timedelta(seconds=-5),
            r"stale_after must be positive, got datetime.timedelta\(days=-1",
        ),
    ],
)
def test_bad_arguments_are_refused_and_nothing_is_written(
    app: cronbase.App, db: psycopg.Connection[Any], key: str, stale_after: timedelta, message: str
) -> None:
    with pytest.raises(EffectError, match=message), app.effects.once(key, stale_after=stale_after):
        pytest.fail("unreachable")
    assert count(db) == 0


@pytest.mark.parametrize("bad", [object(), float("nan"), {1, 2}])
def test_a_result_that_is_not_json_is_refused_and_not_stored(
    app: cronbase.App, db: psycopg.Connection[Any], bad: Any
) -> None:
    with (
        pytest.raises(EffectError, match=f"effect '{KEY}': the result is not JSON-serialisable"),
        app.effects.once(KEY) as effect,
    ):
        effect.record(message_id=bad)
    # record() raised inside the block, so the block failed; the bad value went nowhere.
    found = row(db)
    assert found is not None
    assert (found["status"], found["result"]) == ("failed", None)
    assert "not JSON-serialisable" in found["error"]


def test_a_record_refused_can_be_made_again(app: cronbase.App) -> None:
    with app.effects.once(KEY) as effect:
        with pytest.raises(EffectError):
            effect.record(message_id=object())
        effect.record(message_id="<m@x>")
    assert app.effects.get(KEY).result == {"message_id": "<m@x>"}


# -- races ---------------------------------------------------------------------------------------


def test_sixteen_threads_racing_on_one_key_run_the_block_once(app: cronbase.App) -> None:
    callers = 16
    start = threading.Barrier(callers)
    lock = threading.Lock()
    ran: list[int] = []
    busy: list[str] = []
    others_done = threading.Event()

    def caller(n: int) -> None:
        start.wait(timeout=30)
        try:
            with app.effects.once(KEY) as effect:
                assert not effect.done
                with lock:
                    ran.append(n)
                # Hold the effect until every other caller has been turned away.
                assert others_done.wait(timeout=30), "the other callers did not finish"
                effect.record(by=n)
        except EffectInProgress as exc:
            with lock:
                busy.append(str(exc))
                if len(busy) == callers - 1:
                    others_done.set()

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)

    assert len(ran) == 1
    assert len(busy) == callers - 1
    assert all(KEY in message for message in busy)
    record = app.effects.get(KEY)
    assert (record.status, record.result, record.takeovers) == ("done", {"by": ran[0]}, 0)


# -- async twins ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_async_owning_done_failed_and_takeover(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    try:
        async with app.effects.once_async(KEY) as effect:
            assert not effect.done
            with pytest.raises(EffectInProgress, match=KEY):
                async with app.effects.once_async(KEY):
                    pytest.fail("unreachable")
            effect.record(message_id="<m@x>")
        async with app.effects.once_async(KEY) as again:
            assert (again.done, again.result) == (True, {"message_id": "<m@x>"})

        other = "b"
        with pytest.raises(RuntimeError):
            async with app.effects.once_async(other):
                raise RuntimeError("smtp down")
        assert (await app.effects.get_async(other)).status == "failed"
        with pytest.raises(RuntimeError, match="after sending"):
            async with app.effects.once_async(other) as effect:
                record_then_raise(effect, "<b@x>")
        assert effect.taken_over
        record = await app.effects.get_async(other)
        assert (record.status, record.takeovers, record.result) == (
            "done",
            1,
            {"message_id": "<b@x>"},
        )

        assert [e.key for e in await app.effects.list_async(status="done")] == [other, KEY]
        assert (await app.effects.forget_async(other)).status == "done"
        with pytest.raises(EffectNotFoundError):
            await app.effects.get_async(other)
        with pytest.raises(EffectNotFoundError):
            await app.effects.forget_async(other)
        with pytest.raises(EffectError, match="must not be empty"):
            async with app.effects.once_async(""):
                pytest.fail("unreachable")
        assert count(db) == 1
    finally:
        await app.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_async_reconcile_of_either_kind(
    app: cronbase.App, db: psycopg.Connection[Any], kind: str
) -> None:
    dead_owner(app)
    await asyncio.to_thread(wait_stale, db, SHORT)
    asked: list[str] = []

    async def async_reconcile(key: str) -> dict[str, Any]:
        asked.append(key)
        return {"message_id": "<found@x>"}

    def sync_reconcile(key: str) -> dict[str, Any]:
        asked.append(key)
        return {"message_id": "<found@x>"}

    reconcile = async_reconcile if kind == "async" else sync_reconcile
    try:
        async with app.effects.once_async(KEY, stale_after=SHORT, reconcile=reconcile) as effect:
            assert (effect.done, effect.reconciled) == (True, True)
        assert asked == [KEY]
        record = await app.effects.get_async(KEY)
        assert (record.status, record.reconciled, record.result) == (
            "done",
            True,
            {"message_id": "<found@x>"},
        )
    finally:
        await app.aclose()


@pytest.mark.anyio
async def test_async_stale_takeover(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    dead_owner(app)
    await asyncio.to_thread(wait_stale, db, SHORT)
    try:
        async with app.effects.once_async(
            KEY, stale_after=SHORT, reconcile=lambda key: None
        ) as effect:
            assert (effect.done, effect.taken_over) == (False, True)
        assert (await app.effects.get_async(KEY)).takeovers == 1
    finally:
        await app.aclose()


@pytest.mark.anyio
async def test_sixteen_tasks_racing_on_one_key_run_the_block_once(app: cronbase.App) -> None:
    callers = 16
    ran: list[int] = []
    busy: list[str] = []
    others_done = asyncio.Event()
    go = asyncio.Event()

    async def caller(n: int) -> None:
        await go.wait()
        try:
            async with app.effects.once_async(KEY) as effect:
                ran.append(n)
                async with asyncio.timeout(30):
                    await others_done.wait()
                effect.record(by=n)
        except EffectInProgress as exc:
            busy.append(str(exc))
            if len(busy) == callers - 1:
                others_done.set()

    try:
        async with asyncio.timeout(60):
            tasks = [asyncio.create_task(caller(n)) for n in range(callers)]
            go.set()
            await asyncio.gather(*tasks)
        assert len(ran) == 1
        assert len(busy) == callers - 1
        record = await app.effects.get_async(KEY)
        assert (record.status, record.result) == ("done", {"by": ran[0]})
    finally:
        await app.aclose()


# -- the command ---------------------------------------------------------------------------------


def test_cli_effects_list_show_forget(
    app: cronbase.App, database_url: str, db: psycopg.Connection[Any]
) -> None:
    assert "no effects" in ok(run_cli(database_url, "effects", "list"))
    with app.effects.once(KEY) as effect:
        effect.record(message_id="<m1@cronbase.example>")
    with pytest.raises(RuntimeError), app.effects.once("refund:77"):
        raise RuntimeError("provider said no")

    listed = json.loads(ok(run_cli(database_url, "effects", "list", "--json")))
    assert [(e["key"], e["status"]) for e in listed] == [("refund:77", "failed"), (KEY, "done")]
    failed = json.loads(
        ok(run_cli(database_url, "effects", "list", "--status", "failed", "--json"))
    )
    assert [(e["key"], e["error"]) for e in failed] == [
        ("refund:77", "RuntimeError: provider said no")
    ]
    table = ok(run_cli(database_url, "effects", "list"))
    assert KEY in table
    assert "refund:77" in table
    assert "provider said no" in table

    shown = json.loads(ok(run_cli(database_url, "effects", "show", KEY, "--json")))
    assert (shown["key"], shown["status"], shown["result"]) == (
        KEY,
        "done",
        {"message_id": "<m1@cronbase.example>"},
    )
    assert "<m1@cronbase.example>" in ok(run_cli(database_url, "effects", "show", KEY))

    out = ok(run_cli(database_url, "effects", "forget", KEY))
    assert f"effect '{KEY}' forgotten (it was done)" in out
    assert row(db) is None
    for command in ("show", "forget"):
        missing = run_cli(database_url, "effects", command, KEY)
        assert missing.returncode == 2
        assert f"error: no effect with key '{KEY}'" in missing.stderr
    bad = run_cli(database_url, "effects", "list", "--status", "bogus")
    assert bad.returncode == 2
    assert "bogus" in bad.stderr
