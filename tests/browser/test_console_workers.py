"""The Workers page in headless Chromium: gone workers folded away below the live ones (and kept
folded or open across its polls), pruned by ``cronbase workers prune`` while the page is open,
human heartbeat ages, and each worker's jobs done and attempts failed."""

from __future__ import annotations

import asyncio
import re
import subprocess
from datetime import timedelta
from typing import Any

import psycopg
from playwright.sync_api import Page, expect

import cronbase
from tests.browser.conftest import CRONBASE, REPO, cli_env, start_thread, status_of
from tests.conftest import wait_for

WORKERS = """
INSERT INTO cronbase.workers (id, hostname, pid, concurrency, started_at, last_seen_at) VALUES
  ('w-live', 'web-1', 101, 8, now() - interval '2 hours', now()),
  ('w-gone', 'web-2', 202, 4, now() - interval '3 hours', now() - interval '10 minutes')
"""


def test_gone_workers_are_folded_away_and_a_prune_takes_them_off_the_open_page(
    page: Page, db: psycopg.Connection[Any], database_url: str
) -> None:
    db.execute(WORKERS)
    loads: list[str] = []
    page.on("load", lambda: loads.append(page.url))
    page.goto("/workers")
    live = page.locator("table#workers")
    expect(live.locator("tr[data-worker='w-live']")).to_be_visible()
    expect(live.locator("tr[data-worker='w-gone']")).to_have_count(0)  # not in the main table
    summary = page.locator("#gone-workers > summary")
    count = summary.locator(".gone-count")
    expect(count).to_have_text("1 gone worker")
    gone_row = page.locator("#gone-workers-table tr[data-worker='w-gone']")
    expect(gone_row).to_be_hidden()  # folded
    summary.click()
    expect(gone_row).to_be_visible()
    expect(gone_row).to_contain_text("gone")
    # When it was last seen, in words (the exact time in the title); started, likewise.
    expect(gone_row.locator("td.heartbeat")).to_have_text(re.compile(r"^10 min \d\d s ago$"))
    expect(gone_row.locator("td.heartbeat")).to_have_attribute("title", re.compile(r" UTC$"))
    expect(gone_row.locator("td.time")).to_have_text(re.compile(r"^3 h 0\d min ago$"))
    expect(gone_row.locator("td.time")).to_have_attribute("title", re.compile(r"^\d{4}-.* UTC$"))
    expect(live.locator("tr[data-worker='w-live'] td.heartbeat")).to_have_text(
        re.compile(r"^(now|\d+ s ago)$")
    )

    # Another worker dies: the next poll counts it, and the section stays open.
    db.execute(
        "INSERT INTO cronbase.workers (id, hostname, pid, concurrency, last_seen_at)"
        " VALUES ('w-gone-2', 'web-2', 203, 4, now() - interval '20 minutes')"
    )
    expect(count).to_have_text("2 gone workers")
    expect(page.locator("#gone-workers-table tr[data-worker='w-gone-2']")).to_be_visible()
    expect(page.locator("details#gone-workers")).to_have_attribute("open", "")

    done = subprocess.run(
        [str(CRONBASE), "workers", "prune", "--older-than", "5m"],
        env=cli_env(database_url),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "pruned 2 workers gone for more than 5m: w-gone, w-gone-2" in done.stdout
    # The page's next poll, not a reload, takes them away; the live worker stays.
    expect(page.locator("#gone-workers-table tr")).to_have_count(1)  # its header row only
    expect(page.locator("details#gone-workers")).to_be_hidden()
    expect(live.locator("tr[data-worker='w-live']")).to_be_visible()
    assert len(loads) == 1, loads


def test_each_worker_shows_its_jobs_done_and_attempts_failed(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    send_email, flaky = test_app.tasks["send_email"], test_app.tasks["flaky"]
    sent = [send_email.defer(to=f"user{n}@example.com") for n in range(4)]
    failing = [flaky.defer(n=n) for n in range(2)]  # one attempt each (max_attempts=1): dead
    worker = test_app.worker(
        install_signal_handlers=False,
        retention=None,
        schedule=False,
        poll_interval=timedelta(milliseconds=200),
    )
    thread = start_thread(lambda: asyncio.run(worker.run()))
    try:
        wait_for(
            lambda: [status_of(db, j) for j in sent + failing] == ["succeeded"] * 4 + ["dead"] * 2,
            timeout=60,
            what="the jobs to end",
        )
        page.goto("/workers")
        row = page.locator(f"table#workers tr[data-worker='{worker.id}']")
        expect(row).to_contain_text("alive")
        # Written with its next heartbeat (every 10 s when idle); the page polls every 5 s.
        expect(row.locator("td.succeeded-jobs")).to_have_text("4", timeout=40_000)
        expect(row.locator("td.failed-attempts")).to_have_text("2")
        expect(page.locator("table#workers thead")).to_contain_text("jobs done")
        expect(page.locator("table#workers thead")).to_contain_text("attempts failed")
    finally:
        worker.stop()
        thread.join(60)
    assert not thread.is_alive(), "the worker did not stop within 60 s"
