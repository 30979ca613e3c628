"""Screenshots of the main pages, on real data.

They go to a temporary folder, so a test run leaves the checkout clean; with
``CRONBASE_SCREENSHOTS=docs/screenshots`` (what ``make screenshots`` sets) they replace the
README's pictures.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from playwright.sync_api import Page, expect

import cronbase
from tests.browser import dashboard_app
from tests.browser.conftest import REPO, run_burst


def populate(app: cronbase.App, db: psycopg.Connection[Any]) -> int:
    """Jobs in every state over a few queues, schedules, effects; returns a dead job's id."""
    tasks = app.tasks
    tasks["send_email"].defer_many([{"to": f"customer{n}@example.com"} for n in range(24)])
    for team in ("sales", "support", "finance"):
        keyed = tasks["build_report"].configure(idempotency_key=f"report:2026-10:{team}")
        keyed.defer(team=team)
    dead = [tasks["flaky"].defer(n=n) for n in (812, 813, 814)]
    run_burst(app)
    app.jobs.retry(dead[0])  # a second attempt, which fails too
    run_burst(app)
    tasks["send_email"].configure(delay=timedelta(minutes=30)).defer(to="later@example.com")
    tasks["build_report"].configure(priority=10).defer(team="ops")
    cancelled = tasks["send_email"].defer(to="nobody@example.com")
    app.jobs.cancel(cancelled)
    # Backdate a few successes so the chart spreads over the hour.
    db.execute(
        "UPDATE cronbase.job_attempts SET finished_at = finished_at - (job_id % 40) * "
        "interval '1 minute' WHERE outcome = 'succeeded'"
    )
    app.schedules.add(
        "build_report",
        cron="0 8 * * MON",
        tz="Europe/Berlin",
        payload={"team": "sales"},
        key="weekly:sales",
    )
    quarterly = app.schedules.add(
        "send_email", cron="*/15 * * * *", tz="America/New_York", payload={"to": "ops@example.com"}
    )
    # Tick at its next slot (the tick takes the time it is given), so it has a last run.
    tick = cronbase.Scheduler(app.db, app.tasks).tick(now=quarterly.next_fire_at)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert len(pool.submit(asyncio.run, tick).result(60)) == 1
    app.schedules.pause("send_email")
    with app.effects.once("invoice:812:email") as effect:
        effect.record(message_id="msg-5f2c")
    return int(dead[0])


def test_screenshots_of_the_main_pages(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    wanted = os.environ.get("CRONBASE_SCREENSHOTS")
    shots = REPO / wanted if wanted else tmp_path
    dead_id = populate(test_app, db)
    assert not dashboard_app.ALLOW_FLAKY.is_set()
    shots.mkdir(parents=True, exist_ok=True)

    page.goto("/")
    expect(page.locator("tr[data-queue=emails]")).to_be_visible()
    page.screenshot(path=shots / "overview.png", full_page=True)

    page.goto("/jobs")
    expect(page.locator("table.jobs tbody tr")).to_have_count(34)
    page.screenshot(path=shots / "jobs.png", full_page=True)

    page.goto(f"/jobs/{dead_id}")
    expect(page.locator("article.attempt")).to_have_count(2)
    page.screenshot(path=shots / "job.png", full_page=True)

    page.goto("/schedules")
    expect(page.locator("tr[data-schedule='weekly:sales']")).to_be_visible()
    page.screenshot(path=shots / "schedules.png", full_page=True)

    for name in ("overview", "jobs", "job", "schedules"):
        assert (shots / f"{name}.png").stat().st_size > 10_000, name
