"""A worker with fair_key tasks and plain ones: while no fair job is due its fair claim rests
(no second round trip per claim), and it looks again at a notification, after a poll interval,
and whenever the plain claim leaves a slot free (worker/claimer.py, Claimer._fair_rests)."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.worker.claimer import Claimer
from tests.e2e.harness import eventually, running_worker

PLAIN_JOBS = 300


@pytest.fixture
def claims(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many fair and plain claims the worker's claimer made."""
    counted: Counter[str] = Counter()
    for kind in ("fair", "plain"):
        original = getattr(Claimer, f"_claim_{kind}")

        async def counting(self: Claimer, *args: Any, _kind: str = kind, _f: Any = original) -> Any:
            counted[_kind] += 1
            return await _f(self, *args)

        monkeypatch.setattr(Claimer, f"_claim_{kind}", counting)
    return counted


def tasks(app: cronbase.App, pause: float = 0.0) -> tuple[cronbase.Task[Any, Any], ...]:
    @app.task(fair_key="{tenant}")
    async def fair(tenant: str) -> None:
        pass

    @app.task
    async def plain(n: int) -> None:
        await asyncio.sleep(pause)

    return fair, plain


def finished_before(db: psycopg.Connection[Any], fair_id: int) -> int:
    """Plain jobs finished before the fair job ``fair_id`` did."""
    row = db.execute(
        "SELECT count(*) FROM cronbase.jobs_all p, cronbase.jobs_all f "
        "WHERE f.id = %s AND p.task = 'plain' AND p.finished_at < f.finished_at",
        [fair_id],
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_plain_backlog_costs_no_fair_claim_per_claim(
    app: cronbase.App, db: psycopg.Connection[Any], claims: Counter[str]
) -> None:
    _, plain = tasks(app)
    plain.defer_many([{"n": n} for n in range(60)])
    app.run_worker(
        concurrency=2,
        burst=True,
        install_signal_handlers=False,
        poll_interval=timedelta(seconds=30),
    )
    done = db.execute("SELECT count(*) FROM cronbase.jobs_all WHERE status = 'succeeded'")
    assert done.fetchone() == (60,)
    # At most two jobs a claim: thirty plain claims at least. The fair claim runs first (none
    # due), then rests: again only where a plain claim leaves a slot free (the drain's tail).
    assert claims["plain"] >= 30
    assert claims["fair"] <= 4, claims


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("poll_interval", "delay"),
    [
        # The plain backlog fills every claim and the poll interval is long: only the
        # notification of the fair job's defer can make the worker look for it before the
        # backlog is done.
        pytest.param(timedelta(seconds=30), None, id="deferred"),
        # A job deferred with a delay sends no notification when it comes due (nor does a
        # retry): the resting fair claim looks again after a poll interval.
        pytest.param(timedelta(milliseconds=200), timedelta(milliseconds=300), id="coming-due"),
    ],
)
async def test_a_fair_job_is_claimed_while_plain_jobs_fill_the_worker(
    app: cronbase.App,
    db: psycopg.Connection[Any],
    poll_interval: timedelta,
    delay: timedelta | None,
) -> None:
    fair, plain = tasks(app, pause=0.02)
    await plain.defer_many_async([{"n": n} for n in range(PLAIN_JOBS)])
    async with running_worker(app, concurrency=1, poll_interval=poll_interval):
        await eventually(lambda: ran_plain(db) >= 5, what="plain jobs to run")
        fair_id = await fair.configure(delay=delay).defer_async(tenant="a")
        await eventually(lambda: status(db, fair_id) == "succeeded", what="the fair job")
    assert finished_before(db, fair_id) < PLAIN_JOBS // 2


def ran_plain(db: psycopg.Connection[Any]) -> int:
    row = db.execute(
        "SELECT count(*) FROM cronbase.jobs_all WHERE task = 'plain' AND status = 'succeeded'"
    ).fetchone()
    assert row is not None
    return int(row[0])


def status(db: psycopg.Connection[Any], job_id: int) -> str | None:
    row = db.execute("SELECT status FROM cronbase.jobs_all WHERE id = %s", [job_id]).fetchone()
    return None if row is None else str(row[0])
