"""unique_for: one job per task, key and window, enforced by jobs_unique_for_idx; a second defer
in the window returns the first job's id."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import cronbase


def test_concurrent_defers_in_one_window_write_one_job(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(unique_for=timedelta(hours=1), unique_key="{account}")
    def sync_account(account: int, attempt: int) -> None: ...

    # A window well inside the hour, so the 50 defers cannot straddle two windows.
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=2)
    at = hour + timedelta(minutes=30)
    deferral = sync_account.configure(run_at=at)
    with ThreadPoolExecutor(10) as pool:
        ids = list(pool.map(lambda n: deferral.defer(account=7, attempt=n), range(50)))
    assert len(set(ids)) == 1
    assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (1,)
    # Another key: its own job. The next window: a new one.
    other = sync_account.configure(run_at=at).defer(account=8, attempt=0)
    later = sync_account.configure(run_at=at + timedelta(hours=1)).defer(account=7, attempt=0)
    assert len({ids[0], other, later}) == 3
    # Earlier in the same window, by another route: still the window's job.
    assert (
        sync_account.configure(run_at=hour + timedelta(minutes=1)).defer(account=7, attempt=9)
        == ids[0]
    )


def test_the_window_holds_in_any_state_but_cancelled(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(unique_for=timedelta(days=1))
    def daily_report() -> None: ...

    first = daily_report.defer()
    db.execute(
        "UPDATE cronbase.jobs SET status = 'succeeded', finished_at = now() WHERE id = %s",
        (first,),
    )
    assert daily_report.defer() == first
    db.execute("UPDATE cronbase.jobs SET status = 'cancelled' WHERE id = %s", (first,))
    second = daily_report.defer()
    assert second != first
    assert db.execute(
        "SELECT count(*) FROM cronbase.jobs_all WHERE unique_for_key IS NOT NULL"
    ).fetchone() == (2,)


def test_unique_for_input_is_checked(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    for options, message in [
        ({"unique_for": 0.5}, "unique_for must be at least one second, got datetime.timedelta"),
        ({"unique_for": timedelta(0)}, "unique_for must be at least one second"),
        ({"unique_key": "{a}"}, "unique_key='{a}' needs unique_for"),
        ({"unique_for": timedelta(hours=1), "unique_key": "{a[0]}"}, "must name a payload field"),
    ]:
        with pytest.raises(cronbase.ConfigurationError, match=message.replace("[", r"\[")):
            app.task(**options)(lambda a=0: None)

    @app.task(unique_for=timedelta(hours=1), unique_key="{account}")
    def keyed(account: int = 0, **rest: Any) -> None: ...

    with pytest.raises(
        cronbase.PayloadError, match=re.escape("unique_key '{account}' names 'account'")
    ):
        keyed.defer(other=1)
    with pytest.raises(cronbase.CronbaseError, match="defer its jobs one by one"):
        keyed.defer_many([{"account": 1}])
    assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (0,)
