"""The console's look at a laptop's width (1280 px) and a phone's (390 px), on real data: the nav
on one line, no page wider than the screen (wide tables scroll in their own box), the chart's
labels inside its picture, and a running job's page counting its time."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, ViewportSize, expect

import cronbase
from tests.browser.conftest import TIMEOUT_MS, Dashboard, console_errors
from tests.browser.test_screenshots import LAPTOP, PHONE, populate


@pytest.fixture
def opened(browser: Browser, dashboard: Dashboard) -> Iterator[Callable[[ViewportSize], Page]]:
    """Opens a page at a viewport; at the end, fails on any of their console errors."""
    contexts: list[BrowserContext] = []
    errors: list[list[str]] = []

    def at(viewport: ViewportSize) -> Page:
        context = browser.new_context(base_url=dashboard.url, viewport=viewport)
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        errors.append(console_errors(page))
        return page

    yield at
    for context in contexts:
        context.close()
    assert [e for found in errors for e in found] == []


def page_overflow(page: Page) -> tuple[int, int]:
    """The page's scroll width and its viewport's width."""
    widths = page.evaluate(
        "() => [document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth]"
    )
    return int(widths[0]), int(widths[1])


def too_wide(page: Page) -> list[str]:
    """The outermost elements that reach past the right edge of the viewport (for the message)."""
    found = page.evaluate(
        """() => {
          const width = document.scrollingElement.clientWidth;
          const clipped = e => {
            for (let up = e.parentElement; up; up = up.parentElement) {
              if (getComputedStyle(up).overflowX !== 'visible') return true;
            }
            return false;
          };
          const wide = [...document.body.querySelectorAll('*')]
            .filter(e => e.getBoundingClientRect().right > width + .5 && !clipped(e));
          return wide.filter(e => !wide.includes(e.parentElement)).slice(0, 5)
            .map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')
              + (e.className && typeof e.className === 'string' ? '.' + e.className : '')
              + ' ' + Math.round(e.getBoundingClientRect().right));
        }"""
    )
    return [str(e) for e in found]


def nav_rows(page: Page) -> set[float]:
    """The distinct tops of the nav's links (one line: one top)."""
    tops = page.evaluate(
        "() => [...document.querySelectorAll('header nav a')]"
        ".map(a => Math.round(a.getBoundingClientRect().top))"
    )
    assert len(tops) >= 10
    return set(tops)


def labels_outside_the_chart(page: Page) -> list[str]:
    """The chart's texts that reach outside the drawn ``<svg>`` (half a pixel allowed)."""
    found = page.evaluate(
        """() => {
          const svg = document.querySelector('svg.chart');
          const box = svg.getBoundingClientRect();
          return [...svg.querySelectorAll('text')].filter(t => {
            const r = t.getBoundingClientRect();
            return r.left < box.left - .5 || r.right > box.right + .5
              || r.top < box.top - .5 || r.bottom > box.bottom + .5;
          }).map(t => t.textContent);
        }"""
    )
    return [str(text) for text in found]


def hold_running(test_app: cronbase.App, db: psycopg.Connection[Any]) -> int:
    """A job shown running for 5 minutes, its lease far ahead (no worker runs it)."""
    job_id = test_app.tasks["send_email"].defer(to="held@example.com")
    db.execute(
        "INSERT INTO cronbase.workers (id, hostname, pid, queues, concurrency, tasks, last_seen_at)"
        " VALUES ('layout-1:1:aa', 'layout-1', 1, NULL, 1, NULL, now())"
        " ON CONFLICT (id) DO NOTHING"
    )
    db.execute(
        "UPDATE cronbase.jobs SET status = 'running', locked_by = 'layout-1:1:aa',"
        " run_at = now() - interval '5 minutes 3 seconds',"
        " started_at = now() - interval '5 minutes', locked_until = now() + interval '1 hour',"
        " lease_token = gen_random_uuid(), attempts = 1 WHERE id = %s",
        (job_id,),
    )
    return int(job_id)


def test_every_main_page_fits_a_laptop_and_a_phone(
    opened: Callable[[ViewportSize], Page], test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    dead_id, _ = populate(test_app, db)
    running_id = hold_running(test_app, db)
    paths = ["/", "/jobs", "/dead", "/workers", f"/jobs/{dead_id}", f"/jobs/{running_id}"]
    for viewport in (LAPTOP, PHONE):
        page = opened(viewport)
        for path in paths:
            page.goto(path)
            expect(page.locator("h1")).to_be_visible()
            where = f"{path} at {viewport['width']} px"
            scroll_width, client_width = page_overflow(page)
            assert scroll_width <= client_width, f"{where}: scrolls sideways: {too_wide(page)}"
            assert len(nav_rows(page)) == 1, f"{where}: the nav wraps"
            if viewport is LAPTOP:  # every link in sight, the nav not scrolled
                assert page.evaluate(
                    "() => { const n = document.querySelector('header nav');"
                    " return n.scrollWidth <= n.clientWidth; }"
                ), f"{where}: the nav does not fit"
            if path == "/":
                assert labels_outside_the_chart(page) == [], where
                box = page.locator("svg.chart").bounding_box()
                assert box is not None, where
                assert box["width"] <= viewport["width"], where
                scale = page.locator("svg.chart text[text-anchor=end]").all_text_contents()
                assert all(re.fullmatch(r"\d+", label) for label in scale), scale


def test_a_running_jobs_page_counts_its_time(
    opened: Callable[[ViewportSize], Page], test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    job_id = hold_running(test_app, db)
    page = opened(LAPTOP)
    page.goto(f"/jobs/{job_id}")
    expect(page.locator("#job-status")).to_have_text("running")
    elapsed = page.locator("#job-elapsed")
    expect(elapsed).to_contain_text(re.compile(r"running for 5 min \d\d s"))
    expect(elapsed).to_contain_text("waited 3.0 s before it started")
    first = elapsed.inner_text()
    expect(elapsed).not_to_have_text(first)  # refreshed every 2 seconds: it ticks
    expect(elapsed).to_contain_text("running for 5 min")
