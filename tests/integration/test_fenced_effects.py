"""An attempt whose lease is gone (a zombie) may run on, but starts no effect and no
transaction(): another attempt may own the job by now."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from tests.e2e.harness import eventually, running_worker


@pytest.mark.anyio
@pytest.mark.parametrize("entry", ["effect", "transaction"])
async def test_a_zombie_attempt_is_refused_at_the_door(
    app: cronbase.App, db: psycopg.Connection[Any], entry: str
) -> None:
    started = threading.Event()
    go_on = threading.Event()
    seen: list[BaseException] = []

    @app.task(lease=timedelta(minutes=5))
    def charge() -> None:
        started.set()
        go_on.wait(30)
        try:
            if entry == "effect":
                with app.effects.once("charge:812") as effect:
                    effect.record(charge_id="ch_1")
            else:
                with cronbase.current_job().transaction() as conn:
                    conn.execute("CREATE TABLE zombie_was_here ()")
        except BaseException as exc:
            seen.append(exc)
            raise

    async with running_worker(app, poll_interval=timedelta(milliseconds=50)):
        job_id = await charge.defer_async()
        await eventually(started.is_set, what="the handler to start")
        # An operator cancels the running job: the attempt's lease token is gone at once. The
        # lease is 5 minutes, so no heartbeat has told the worker yet: the database says it.
        await app.jobs.cancel_async(job_id)
        go_on.set()
        await eventually(lambda: bool(seen), what="the handler to try")
    assert len(seen) == 1
    assert isinstance(seen[0], cronbase.LeaseLostError), seen
    # The effect is refused at the door; a transaction() at its commit (fenced, rolled back).
    expected = "its lease is gone" if entry == "effect" else "lease lost before the transaction"
    assert f"job {job_id} attempt 1: {expected}" in str(seen[0])
    # Nothing recorded: no effect row, no table, the job stays cancelled.
    assert db.execute("SELECT count(*) FROM cronbase.effects").fetchone() == (0,)
    assert db.execute("SELECT to_regclass('zombie_was_here')").fetchone() == (None,)
    assert app.jobs.get(job_id).status == cronbase.JobStatus.CANCELLED


def test_outside_a_job_effects_need_no_lease(app: cronbase.App) -> None:
    with app.effects.once("report:2026-11") as effect:
        effect.record(sent=True)
    assert app.effects.get("report:2026-11").status == "done"
