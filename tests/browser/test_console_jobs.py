"""The jobs and dead pages in headless Chromium: dead jobs grouped by error and acted on by
group, "select all jobs matching this filter", search in payloads and errors, the list's live
refresh (which keeps ticked boxes), and long errors that keep the table inside the page."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import psycopg
from playwright.sync_api import Page, expect

import cronbase
from tests.browser.conftest import audit_rows, run_burst, status_of

LOOPBACK_ACTOR = "dashboard@127.0.0.1"


def statuses(db: psycopg.Connection[Any], ids: list[int]) -> set[str]:
    return {status_of(db, i) for i in ids}


def remaining(db: psycopg.Connection[Any], ids: list[int]) -> list[int]:
    rows = db.execute("SELECT id FROM cronbase.jobs_all WHERE id = ANY(%s) ORDER BY id", [ids])
    return [r[0] for r in rows.fetchall()]


def test_dead_jobs_grouped_by_error_are_retried_and_deleted_by_group(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    flaky = test_app.tasks["flaky"]
    refused = [flaky.defer(n=n) for n in (1, 2, 3)]  # one error (its request number aside)
    other = [flaky.defer(n=4) for _ in range(2)]
    run_burst(test_app)
    assert statuses(db, refused + other) == {"dead"}
    # Another error for two of them, as an older release (or other SQL) may have written it.
    db.execute(
        "UPDATE cronbase.jobs_history SET error_type = 'TimeoutError',"
        " last_error = 'TimeoutError: payment service timed out' WHERE id = ANY(%s)",
        [other],
    )
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))  # the fixture accepts

    page.goto("/dead")
    groups = page.locator("section.error-groups tbody tr")
    expect(groups).to_have_count(2)
    first = groups.filter(has_text="refused request <n>: <n> Service Unavailable")
    expect(first.locator("td.num")).to_have_text("3")
    expect(groups.filter(has_text="timed out").locator("td.num")).to_have_text("2")
    first.get_by_role("button", name="Retry all").click()
    expect(page.locator("#flash")).to_contain_text("3 job(s) queued again; 0 refused")
    assert dialogs[-1].startswith("Retry all 3 dead job(s) of task flaky")
    assert statuses(db, refused) == {"queued"}
    assert statuses(db, other) == {"dead"}
    assert audit_rows(db) == [(LOOPBACK_ACTOR, "jobs.bulk_retry", "jobs:3")]

    expect(groups).to_have_count(1)
    groups.first.get_by_role("button", name="Delete all").click()
    expect(page.locator("#flash")).to_contain_text("2 job(s) deleted; 0 refused")
    assert dialogs[-1].startswith("Delete all 2 dead job(s) of task flaky")
    assert remaining(db, other) == []
    assert remaining(db, refused) == refused
    assert audit_rows(db)[-1] == (LOOPBACK_ACTOR, "jobs.bulk_delete", "jobs:2")
    expect(page.locator("section.error-groups")).to_contain_text("no dead jobs")


def test_failed_jobs_are_grouped_on_the_jobs_page_too(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    job_id = test_app.tasks["send_email"].defer(to="a@b.c")
    db.execute(
        "UPDATE cronbase.jobs SET status = 'failed', attempts = 1, last_error = %s,"
        " error_type = 'SMTPError', run_at = now() + interval '1 hour' WHERE id = %s",
        ["SMTPError: mailbox full\nmore", job_id],
    )
    page.goto("/jobs?status=failed")
    row = page.locator("section.error-groups tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("SMTPError: mailbox full")
    row.get_by_role("button", name="Retry all").click()
    expect(page.locator("#flash")).to_contain_text("1 job(s) queued again")
    assert status_of(db, job_id) == "queued"


def test_select_all_matching_acts_on_every_job_of_the_filter_and_no_other(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    later = timedelta(hours=1)
    emails = [
        test_app.tasks["send_email"].configure(delay=later).defer(to=f"u{n}@x.y")
        for n in range(55)  # more than a page (50)
    ]
    reports = [test_app.tasks["build_report"].configure(delay=later).defer(team="t")]
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))

    page.goto("/jobs?task=send_email")
    expect(page.locator("table.jobs tbody tr")).to_have_count(50)
    choice = page.locator("details.select-all")
    expect(choice.locator("summary")).to_have_text("select all 55 jobs matching this filter")
    choice.locator("summary").click()
    choice.get_by_role("button", name="Cancel all matching").click()
    expect(page.locator("#flash")).to_contain_text("55 job(s) cancelled; 0 refused")
    assert dialogs[-1] == "Cancel all 55 jobs matching this filter?"
    assert statuses(db, emails) == {"cancelled"}
    assert statuses(db, reports) == {"queued"}
    [(actor, action, target)] = audit_rows(db)
    assert (actor, action, target) == (LOOPBACK_ACTOR, "jobs.bulk_cancel", "jobs:55")
    expect(page).to_have_url(re.compile(r"/jobs\?.*task=send_email"))


def test_select_all_refuses_more_than_ten_thousand_with_one_line(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    db.execute(
        "INSERT INTO cronbase.jobs (task, queue, payload, run_at)"
        " SELECT 'send_email', 'bulk', '{}'::jsonb, now() + interval '1 hour'"
        " FROM generate_series(1, 10001)"
    )
    page.goto("/jobs?queue=bulk")
    summary = page.locator("details.select-all summary")
    expect(summary).to_have_text("select all more than 10,000 jobs matching this filter")
    summary.click()
    expect(page.locator("details.select-all")).to_contain_text("narrow the filter")
    expect(page.get_by_role("button", name="Retry all matching")).to_have_count(0)
    # A crafted post gets the one-line refusal, and nothing changes.
    token = page.locator("form#bulk input[name=csrf_token]").get_attribute("value")
    answer = page.request.post(
        "/jobs/bulk",
        form={
            "csrf_token": token or "",
            "scope": "filter",
            "list": "jobs",
            "queue": "bulk",
            "action": "cancel",
        },
        headers={"Origin": page.url.split("/jobs")[0]},
    )
    assert answer.status == 400
    assert "more than 10,000 jobs" in answer.text()
    count = db.execute("SELECT count(*) FROM cronbase.jobs WHERE status = 'queued'").fetchone()
    assert count == (10001,)


def test_search_finds_jobs_by_payload_and_by_error_text(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    zebra = test_app.tasks["send_email"].defer(to="Zebra.Crossing@example.org")
    test_app.tasks["send_email"].defer(to="lion@example.org")
    dead = test_app.tasks["flaky"].defer(n=4242)
    run_burst(test_app)
    page.goto("/jobs")
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(3)
    search = page.get_by_label("search")
    search.fill("zebra.crossing")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-job", str(zebra))
    search.fill("refused REQUEST 4242")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-job", str(dead))
    search.fill("zebra%")  # a LIKE wildcard is literal
    expect(page.locator("table.jobs td.empty")).to_have_text("no jobs match")


def test_a_search_too_long_or_with_a_nul_is_a_clear_400(page: Page) -> None:
    # Asked beside the page (a 400 loaded in it would be a console error, which fails the test).
    answer = page.request.get("/jobs?q=" + "x" * 10_000)
    assert answer.status == 400
    assert "the search is 10000 characters, more than 200" in answer.text()
    answer = page.request.get("/dead?q=" + quote("a\x00b"))
    assert answer.status == 400
    assert "contains a NUL character" in answer.text()


def test_the_list_refreshes_live_but_not_while_a_box_is_ticked(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    later = timedelta(hours=1)
    kept = test_app.tasks["send_email"].configure(delay=later).defer(to="a@x.y")
    moving = test_app.tasks["send_email"].configure(delay=later).defer(to="b@x.y")
    page.goto("/jobs")
    moving_status = page.locator(f"tr[data-job='{moving}'] .status")
    expect(moving_status).to_have_text("queued")

    def start(job_id: int) -> None:
        db.execute(
            "UPDATE cronbase.jobs SET status = 'running', attempts = 1, started_at = now(),"
            " lease_token = gen_random_uuid(), locked_until = now() + interval '1 hour'"
            " WHERE id = %s",
            [job_id],
        )

    start(moving)
    expect(moving_status).to_have_text("running")  # no reload: the poll brought it

    # Ticked: the polls that come are skipped (counted as they are asked), the box stays.
    box = page.get_by_label(f"select job {kept}")
    box.check()
    page.evaluate(
        "document.body.dataset.polls = 0; document.addEventListener('htmx:beforeRequest',"
        " (e) => { if (e.detail.elt.id === 'results') document.body.dataset.polls++; })"
    )
    db.execute(
        "UPDATE cronbase.jobs SET status = 'queued', attempts = 0, started_at = NULL,"
        " lease_token = NULL, locked_until = NULL WHERE id = %s",
        [moving],
    )
    # Two refreshes asked (and skipped) since the change.
    expect(page.locator("body")).to_have_attribute("data-polls", re.compile(r"^([2-9]|\d\d+)$"))
    expect(box).to_be_checked()
    expect(moving_status).to_have_text("running")  # not refreshed while ticked
    box.uncheck()
    expect(moving_status).to_have_text("queued")


def test_a_long_error_stays_on_one_line_inside_the_page(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    job_id = test_app.tasks["flaky"].defer(n=1)
    run_burst(test_app)
    long_error = "RuntimeError: " + " ".join(f"word{n}" for n in range(2000))
    db.execute(
        "UPDATE cronbase.jobs_history SET last_error = %s WHERE id = %s", [long_error, job_id]
    )
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto("/dead")
    cell = page.locator(f"tr[data-job='{job_id}'] td.error-text .one-line")
    expect(cell).to_have_attribute("title", long_error[:999] + "…")
    box = cell.bounding_box()
    assert box is not None
    assert box["height"] < 40
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    table = page.locator("table.jobs").bounding_box()
    assert table is not None
    assert table["x"] + table["width"] <= 1280


def test_bad_bulk_forms_get_one_line_400s(page: Page, test_app: cronbase.App) -> None:
    test_app.tasks["send_email"].configure(delay=timedelta(hours=1)).defer(to="a@b.c")
    page.goto("/jobs")
    token = page.locator("form#bulk input[name=csrf_token]").get_attribute("value") or ""
    origin = page.url.split("/jobs")[0]
    cases = {
        "unknown scope 'everything'": {"scope": "everything"},
        "unknown status 'zombie'": {"scope": "filter", "status": "zombie"},
        "unknown list 'graveyard'": {"scope": "filter", "list": "graveyard"},
        "no job matches this filter": {"scope": "filter", "task": "no_such_task"},
        "the search is 300 characters": {"scope": "filter", "q": "y" * 300},
        "dead or failed jobs only": {"scope": "group", "status": "queued", "task": "x"},
        "no job is in this group any more": {
            "scope": "group",
            "status": "dead",
            "task": "flaky",
            "error_type": "RuntimeError",
            "message": "nothing like it",
        },
    }
    for expected, fields in cases.items():
        answer = page.request.post(
            "/jobs/bulk",
            form={"csrf_token": token, "action": "retry", **fields},
            headers={"Origin": origin},
        )
        assert answer.status == 400, (expected, answer.status)
        assert expected in html.unescape(answer.text()), expected
