"""How often a worker's fair claim runs and looks for new keys (worker/fair_claim.py,
FairPacing). A worker with fair_key tasks and plain ones lets its fair claim rest while no fair
job is due (no second round trip per claim); between passes over the keys, a fair claim serves
the busy keys only. A fair job deferred, or coming due, while other jobs fill the worker is
still found soon: at the defer's notification, or within a poll interval."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.worker.fair_claim import SCAN_KEYS, FairKind
from cronbase.worker.plain_claim import PlainKind
from tests.e2e.harness import eventually, running_worker

BACKLOG = 300


@pytest.fixture
def claims(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many fair and plain claim statements the worker's claimer ran."""
    counted: Counter[str] = Counter()
    for name, kind in (("fair", FairKind), ("plain", PlainKind)):
        original = kind.claim

        async def counting(
            self: Any, *args: Any, _name: str = name, _f: Any = original, **kw: Any
        ) -> Any:
            counted[_name] += 1
            return await _f(self, *args, **kw)

        monkeypatch.setattr(kind, "claim", counting)
    return counted


def tasks(app: cronbase.App, pause: float = 0.0) -> tuple[cronbase.Task[Any, Any], ...]:
    @app.task(fair_key="{tenant}")
    async def fair(tenant: str, n: int = 0) -> None:
        await asyncio.sleep(pause)

    @app.task
    async def plain(n: int) -> None:
        await asyncio.sleep(pause)

    return fair, plain


def backlog_done(db: psycopg.Connection[Any], before: int | None = None) -> int:
    """Jobs of the backlog (all but tenant znew's) finished, or finished before job ``before``."""
    row = db.execute(
        "SELECT count(*) FROM cronbase.jobs_all b WHERE b.status = 'succeeded' "
        "AND b.payload->>'tenant' IS DISTINCT FROM 'znew' AND (%(before)s::bigint IS NULL "
        "OR b.finished_at < (SELECT finished_at FROM cronbase.jobs_all WHERE id = %(before)s))",
        {"before": before},
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
    # due), then rests: again only where a plain claim leaves a slot free (the drain's tail, or
    # a claim that found one slot of two free). Before, there was one per plain claim.
    assert claims["plain"] >= 30
    assert claims["fair"] <= claims["plain"] // 3, claims


@pytest.mark.anyio
@pytest.mark.parametrize("backlog", ["plain jobs", "busy keys"])
@pytest.mark.parametrize(
    ("poll_interval", "delay"),
    [
        # The backlog fills every claim and the poll interval is long: only the notification
        # of the new job's defer can make the worker look for it before the backlog is done.
        pytest.param(timedelta(seconds=30), None, id="deferred"),
        # A job deferred with a delay sends no notification when it comes due (nor does a
        # retry): the worker looks again after a poll interval.
        pytest.param(timedelta(milliseconds=200), timedelta(milliseconds=300), id="coming-due"),
    ],
)
async def test_a_new_fair_key_is_served_while_a_backlog_fills_the_worker(
    app: cronbase.App,
    db: psycopg.Connection[Any],
    backlog: str,
    poll_interval: timedelta,
    delay: timedelta | None,
) -> None:
    fair, plain = tasks(app, pause=0.02)
    if backlog == "plain jobs":
        await plain.defer_many_async([{"n": n} for n in range(BACKLOG)])
    else:  # more keys than one look at the jobs index takes (SCAN_KEYS)
        keys = 2 * SCAN_KEYS
        await fair.defer_many_async([{"tenant": f"t{n % keys}", "n": n} for n in range(BACKLOG)])
    async with running_worker(app, concurrency=1, poll_interval=poll_interval):
        await eventually(lambda: backlog_done(db) >= 5, what="the backlog to start")
        # A key that sorts after the busy ones: a claim between passes looks at one key of
        # the jobs index (the first after its cursor), which would find a key sorted first.
        new_id = await fair.configure(delay=delay).defer_async(tenant="znew")
        await eventually(lambda: status(db, new_id) == "succeeded", what="the new key's job")
    assert backlog_done(db, before=new_id) < BACKLOG // 2


def status(db: psycopg.Connection[Any], job_id: int) -> str | None:
    row = db.execute("SELECT status FROM cronbase.jobs_all WHERE id = %s", [job_id]).fetchone()
    return None if row is None else str(row[0])
