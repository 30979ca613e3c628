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
from playwright.sync_api import Browser, Page, ViewportSize, expect

import cronbase
from tests.browser import dashboard_app
from tests.browser.conftest import REPO, Dashboard, run_burst

LAPTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 390, "height": 844}


def populate(app: cronbase.App, db: psycopg.Connection[Any]) -> tuple[int, int]:
    """Jobs in every state over a few queues, schedules, effects, a workflow, workers; returns
    a dead job's id and the workflow's."""
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
    # Backdate the successes (job rows, and history) so the chart spreads over the hour.
    db.execute(
        "UPDATE cronbase.job_attempts SET finished_at = finished_at - (job_id % 40) * "
        "interval '1 minute' WHERE outcome = 'succeeded'"
    )
    # A finished job's row is in jobs_history (partitioned by day, with a default partition).
    for table in ("jobs", "jobs_history"):
        db.execute(
            f"UPDATE cronbase.{table} SET"
            " finished_at = finished_at - (id * 7 % 55) * interval '1 minute',"
            " started_at = started_at - (id * 7 % 55) * interval '1 minute'"
            "   - (id % 5 + 1) * interval '300 milliseconds',"
            " run_at = run_at - (id * 7 % 55) * interval '1 minute' - interval '2 seconds',"
            " created_at = created_at - (id * 7 % 55) * interval '1 minute' - interval '2 seconds'"
            " WHERE status = 'succeeded'"
        )
    # The queue page's hour, as the workers' roll-up writes it (a minute at a time; written
    # here for the hour at once): a backlog that builds and drains, waits that follow it.
    db.execute(
        "INSERT INTO cronbase.queue_minutes (queue, minute, due, running, started, waits)"
        " SELECT q, date_trunc('minute', now()) - make_interval(mins => m),"
        "  CASE WHEN q = '' THEN 0 ELSE greatest(0, (400 * sin(m / 9.0))::int) END,"
        "  CASE WHEN q = '' THEN 0 ELSE 8 + m % 3 END,"
        "  CASE WHEN q = '' THEN 0 ELSE 180 + (40 * cos(m / 5.0))::int END,"
        "  CASE WHEN q = '' THEN '{}'::int[] ELSE ARRAY[60, 50, 30, 20, 10, 5,"
        "   (greatest(0, 400 * sin(m / 9.0)) / 20)::int, (greatest(0, 400 * sin(m / 9.0)) / 40)::int,"
        "   0, 0, 0, 0, 0, 0] END"
        " FROM generate_series(2, 62) m, (VALUES (''), ('emails')) v(q)"
        # A worker of the bursts above may have rolled up a minute already.
        " ON CONFLICT (minute, queue) DO NOTHING"
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
    # A workflow waiting on its first job; two workers, one of them gone with a job in hand.
    board = cronbase.chain(
        tasks["build_report"].s(team="board"),
        cronbase.group([tasks["send_email"].s(to=f"director{n}@example.com") for n in range(12)]),
        tasks["build_report"].s(team="board-summary"),
    ).defer()
    db.execute(
        "INSERT INTO cronbase.workers (id, hostname, pid, queues, concurrency, tasks, last_seen_at)"
        " VALUES ('web-1:4242:9f1c', 'web-1', 4242, NULL, 10, %s, now()),"
        " ('web-2:777:0b3e', 'web-2', 777, ARRAY['emails'], 4, NULL,"
        "  now() - interval '7 minutes')",
        (sorted(app.tasks),),
    )
    held = tasks["send_email"].defer(to="held@example.com")
    db.execute(
        "UPDATE cronbase.jobs SET status = 'running', locked_by = 'web-2:777:0b3e',"
        " started_at = now() - interval '8 minutes', locked_until = now() + interval '1 minute',"
        " lease_token = gen_random_uuid(), attempts = 1 WHERE id = %s",
        (held,),
    )
    return int(dead[0]), board


def test_screenshots_of_the_main_pages(
    page: Page,
    browser: Browser,
    dashboard: Dashboard,
    test_app: cronbase.App,
    db: psycopg.Connection[Any],
    tmp_path: Path,
) -> None:
    wanted = os.environ.get("CRONBASE_SCREENSHOTS")
    shots = REPO / wanted if wanted else tmp_path
    dead_id, workflow_id = populate(test_app, db)
    assert not dashboard_app.ALLOW_FLAKY.is_set()
    shots.mkdir(parents=True, exist_ok=True)

    page.goto("/")
    expect(page.locator("tr[data-queue=emails]")).to_be_visible()
    page.screenshot(path=shots / "overview.png", full_page=True)

    page.goto("/jobs")
    expect(page.locator("table.jobs tbody tr")).to_have_count(49)
    page.screenshot(path=shots / "jobs.png", full_page=True)

    page.goto(f"/jobs/{dead_id}")
    expect(page.locator("article.attempt")).to_have_count(2)
    page.screenshot(path=shots / "job.png", full_page=True)

    page.goto("/dead")
    expect(page.locator("table.jobs tbody tr")).to_have_count(3)
    page.screenshot(path=shots / "dead.png", full_page=True)

    page.goto("/queue?name=emails")
    expect(page.locator(".queue-charts svg.chart")).to_have_count(3)
    page.screenshot(path=shots / "queue.png", full_page=True)

    page.goto("/schedules")
    expect(page.locator("tr[data-schedule='weekly:sales']")).to_be_visible()
    page.screenshot(path=shots / "schedules.png", full_page=True)

    page.goto(f"/jobs/{workflow_id}")
    expect(page.locator("#job-graph li")).to_have_count(3)
    page.screenshot(path=shots / "workflow.png", full_page=True)

    page.goto("/workers")
    expect(page.locator("tr[data-worker='web-1:4242:9f1c']")).to_be_visible()
    page.screenshot(path=shots / "workers.png", full_page=True)

    page.goto("/scheduled")
    expect(page.locator("table#scheduled tbody tr")).to_have_count(1)
    page.screenshot(path=shots / "scheduled.png", full_page=True)

    # The same console on a laptop (1280 px) and on a phone (390 x 844), as issue 37 asked.
    for name, viewport, path, ready in (
        ("overview-1280", LAPTOP, "/", "tr[data-queue=emails]"),
        ("overview-phone", PHONE, "/", "tr[data-queue=emails]"),
        ("jobs-phone", PHONE, "/jobs", "table.jobs tbody tr >> nth=48"),
    ):
        context = browser.new_context(base_url=dashboard.url, viewport=viewport)
        try:
            sized = context.new_page()
            sized.goto(path)
            expect(sized.locator(ready)).to_be_visible()
            sized.screenshot(path=shots / f"{name}.png", full_page=True)
        finally:
            context.close()

    names = ["overview", "jobs", "job", "schedules", "workflow", "workers", "scheduled"]
    names += ["overview-1280", "overview-phone", "jobs-phone"]
    for name in names:
        assert (shots / f"{name}.png").stat().st_size > 10_000, name
