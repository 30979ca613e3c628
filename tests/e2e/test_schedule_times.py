"""A schedule's last and next run, in the command's list and on the dashboard, to the second when
it fires on seconds (``*/10 * * * * *``), to the minute otherwise."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest

import cronbase
from cronbase.dashboard import create_app
from tests.browser.conftest import serving
from tests.e2e.test_cli import cronbase as run_cli
from tests.e2e.test_cli import ok

LAST = datetime(2026, 11, 23, 10, 20, 30, tzinfo=UTC)  # a slot with seconds


@pytest.fixture
def schedules(app: cronbase.App, db: psycopg.Connection[Any]) -> cronbase.App:
    @app.task
    def poll() -> None: ...

    app.schedules.add("poll", cron="*/10 * * * * *", key="every-10s")
    app.schedules.add("poll", cron="0 3 * * *", key="nightly")
    db.execute("UPDATE cronbase.schedules SET last_fired_at = %s", [LAST])
    return app


def row_of(text: str, key: str) -> str:
    (line,) = [line for line in text.splitlines() if key in line]
    return line


def test_the_list_shows_seconds_for_a_schedule_that_fires_on_seconds(
    database_url: str, schedules: cronbase.App
) -> None:
    shown = ok(run_cli(database_url, "schedules", "list"))
    fast, nightly = row_of(shown, "every-10s"), row_of(shown, "nightly")
    assert "2026-11-23 10:20:30 UTC" in fast
    # The next run, to the second; "(in 4s)", or "(now)" when the command ran as a slot came
    # due (a loaded machine took longer than the 10 s since the schedule was added).
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d0 UTC \((in |now)", fast), fast
    assert "2026-11-23 10:20 UTC" in nightly
    assert not re.search(r"\d\d:\d\d:\d\d", nightly), nightly


def test_the_dashboard_shows_seconds_for_a_schedule_that_fires_on_seconds(
    schedules: cronbase.App,
) -> None:
    with serving(create_app(schedules), schedules) as url:
        page = httpx.get(f"{url}/schedules", timeout=30).text
    rows = dict(re.findall(r'<tr data-schedule="([^"]+)">(.*?)</tr>', page, re.DOTALL))
    times = {key: re.findall(r'<td class="time">([^<]*)', row) for key, row in rows.items()}
    assert times["every-10s"][0] == "2026-11-23 10:20:30 UTC"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d0 UTC", times["every-10s"][1].strip())
    assert times["nightly"][0] == "2026-11-23 10:20 UTC"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d 03:00 UTC", times["nightly"][1].strip())
