"""The queue page in Chromium: a queue's depth, running jobs, pickup waits and attempts started
over the last hour and day, from the minutes a roll-up wrote on the real database."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from playwright.sync_api import Page, expect

import cronbase
from tests.integration.test_queue_minutes import load, rolled, the_minute


def test_the_queue_page_charts_the_rolled_up_minutes(
    page: Page, app: cronbase.App, db: psycopg.Connection[Any], database_url: str
) -> None:
    minute = the_minute(db)
    load(app, db, minute)
    # In a thread of its own: Playwright's sync API owns this thread's event loop.
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(rolled, app, database_url).result(timeout=60) == minute

    page.goto("/")
    page.locator("tr[data-queue=mail] td").first.get_by_role("link", name="mail").click()
    expect(page.locator("h1")).to_contain_text("Queue mail")
    summary = page.locator("#queue-summary")
    expect(summary).to_contain_text("3 jobs due, 2 running")
    expect(summary).to_contain_text("5 attempts started")
    charts = page.locator(".queue-charts svg.chart")
    expect(charts).to_have_count(3)
    # One minute rolled up: each line is a single point (a dot), the waits' p95 among them.
    expect(charts.nth(0).locator("circle.line.due")).to_have_count(1)
    expect(charts.nth(1).locator("circle.line.p95")).to_have_count(1)
    expect(charts.nth(1)).to_contain_text("1 h")  # the wait scale, in people's units
    # Every label inside its picture (the layout test's rule for the overview's chart).
    for i in range(3):
        box = charts.nth(i).bounding_box()
        assert box is not None
        for label in charts.nth(i).locator("text").all():
            inner = label.bounding_box()
            assert inner is not None
            assert box["x"] - 1 <= inner["x"]
            assert inner["x"] + inner["width"] <= box["x"] + box["width"] + 1

    page.get_by_role("link", name="last day").click()
    expect(page).to_have_url(re.compile(r"/queue\?name=mail&span=1d$"))
    expect(page.locator("#queue-summary")).to_contain_text("Over the day: 5 attempts started")

    page.get_by_role("link", name="its jobs").click()
    expect(page.locator("table.jobs tbody tr").first).to_be_visible()


def test_a_queue_without_minutes_says_so_and_a_bad_name_is_refused(
    page: Page, app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    page.goto("/queue?name=quiet")
    expect(page.locator("#queue-summary")).to_contain_text("No minutes rolled up")
    response = page.request.get("/queue?name=bad%00name")
    assert response.status == 400
    assert "NUL character" in response.text()
    response = page.request.get("/queue?name=" + "q" * 1001)
    assert response.status == 400
    assert "1001 characters long" in response.text()
    response = page.request.get("/queue?name=mail&span=1y")
    assert response.status == 400
    assert "got &#39;1y&#39;" in response.text()
