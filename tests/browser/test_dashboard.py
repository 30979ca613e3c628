"""The dashboard in headless Chromium: what an operator sees and does, on the real database."""

from __future__ import annotations

import re
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from playwright.sync_api import Browser, Page, expect

import cronbase
from tests.browser import dashboard_app
from tests.browser.conftest import (
    audit_rows,
    run_burst,
    running_dashboard,
    start_thread,
    status_of,
)
from tests.conftest import wait_for

LOOPBACK_ACTOR = "dashboard@127.0.0.1"


def test_filter_to_dead_open_one_retry_now_and_see_it_succeed(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    tasks = test_app.tasks
    for n in range(3):
        tasks["send_email"].defer(to=f"user{n}@example.com")
    dead_id = tasks["flaky"].defer(n=812)
    run_burst(test_app)
    assert status_of(db, dead_id) == "dead"

    page.goto("/")
    expect(page.locator("tr[data-queue=default]")).to_contain_text("1")
    expect(page.locator("tr[data-queue=emails]")).to_be_visible()
    expect(page.locator("svg.chart")).to_be_visible()

    page.get_by_role("link", name="Jobs", exact=True).click()
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(4)
    page.get_by_label("search").fill(str(dead_id))  # searched as you type
    expect(rows).to_have_count(1)
    page.get_by_label("search").fill("")
    expect(rows).to_have_count(4)
    page.get_by_label("status").select_option("dead")
    expect(page.locator("table.jobs tbody tr")).to_have_count(1)
    expect(page).to_have_url(re.compile(r"/jobs\?.*status=dead"))

    page.get_by_role("link", name=str(dead_id), exact=True).click()
    expect(page.locator("h1")).to_contain_text(f"Job {dead_id}")
    expect(page.locator("#job-status")).to_have_text("dead")
    attempt = page.locator("article.attempt").first
    expect(attempt).to_contain_text("RuntimeError: payment service refused request 812")
    expect(attempt.locator("pre.traceback")).to_contain_text("in call_service")
    expect(page.locator("pre.payload")).to_contain_text('"n": 812')

    dashboard_app.ALLOW_FLAKY.set()
    page.get_by_role("button", name="Retry now").click()
    expect(page.locator("#flash")).to_contain_text("Job queued again")
    expect(page.locator("#job-status")).to_have_text("queued")
    worker = start_thread(lambda: test_app.run_worker(burst=True, install_signal_handlers=False))
    # The page reloads its live part while the job can change: it shows the run's outcome.
    expect(page.locator("#job-status")).to_have_text("succeeded")
    expect(page.locator("article.attempt")).to_have_count(2)
    worker.join(60)
    assert status_of(db, dead_id) == "succeeded"
    assert audit_rows(db) == [(LOOPBACK_ACTOR, "job.retry", f"job:{dead_id}")]

    page.get_by_role("link", name="Audit log").click()
    row = page.locator("tr[data-action='job.retry']")
    expect(row).to_contain_text(LOOPBACK_ACTOR)
    expect(row.get_by_role("link", name=f"job:{dead_id}")).to_be_visible()


def test_pausing_a_queue_stops_workers_taking_its_jobs(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    report = test_app.tasks["build_report"].defer(team="sales")
    page.goto("/")
    row = page.locator("tr[data-queue=reports]")
    row.get_by_role("button", name="Pause").click()  # confirmed by the page fixture
    expect(page.locator("#flash")).to_contain_text("Queue paused")
    expect(row.locator(".badge.paused")).to_have_text("paused")
    paused = db.execute("SELECT is_paused, paused_by FROM cronbase.queues WHERE name = 'reports'")
    assert paused.fetchone() == (True, LOOPBACK_ACTOR)

    email = test_app.tasks["send_email"].defer(to="ana@example.com")
    run_burst(test_app)
    assert status_of(db, report) == "queued"  # its queue is paused
    assert status_of(db, email) == "succeeded"  # other queues run as usual

    row.get_by_role("button", name="Resume").click()
    expect(page.locator("#flash")).to_contain_text("Queue resumed")
    expect(row.locator(".badge.paused")).to_have_count(0)
    run_burst(test_app)
    assert status_of(db, report) == "succeeded"
    assert audit_rows(db) == [
        (LOOPBACK_ACTOR, "queue.pause", "queue:reports"),
        (LOOPBACK_ACTOR, "queue.resume", "queue:reports"),
    ]


def test_dead_page_requeues_every_dead_job_of_a_task(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    ids = [test_app.tasks["flaky"].defer(n=n) for n in range(3)]
    run_burst(test_app)
    page.goto("/dead")
    row = page.locator("section.requeue tr[data-task=flaky]")
    expect(row).to_contain_text("3")
    expect(page.locator("table.jobs tbody tr")).to_have_count(3)
    row.get_by_role("button", name="Requeue all").click()
    expect(page.locator("#flash")).to_contain_text("3 dead job(s) queued again")
    expect(page.locator("section.requeue")).to_contain_text("no dead jobs")
    assert {status_of(db, i) for i in ids} == {"queued"}
    assert audit_rows(db) == [(LOOPBACK_ACTOR, "dead.requeue", "task:flaky")]


def test_long_running_job_shows_and_can_be_cancelled(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    job_id = test_app.tasks["hold"].defer(n=1)
    worker = start_thread(lambda: test_app.run_worker(burst=True, install_signal_handlers=False))
    wait_for(lambda: status_of(db, job_id) == "running", what="the hold job to run")

    page.goto("/long-running")  # the default threshold: ten minutes
    expect(page.locator("table.jobs")).to_contain_text("no job has been running longer than")
    page.get_by_label("started more than").fill("0")
    page.get_by_role("button", name="Show").click()
    row = page.locator(f"tr[data-job='{job_id}']")
    expect(row).to_contain_text("hold")
    row.get_by_role("button", name="Cancel").click()
    expect(page.locator("#job-status")).to_have_text("cancelled")
    dashboard_app.RELEASE_HOLD.set()
    worker.join(60)
    assert status_of(db, job_id) == "cancelled"
    assert audit_rows(db) == [(LOOPBACK_ACTOR, "job.cancel", f"job:{job_id}")]


def test_schedules_show_their_zone_and_pause_and_resume(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    test_app.schedules.add(
        "build_report",
        cron="0 8 * * MON",
        tz="Europe/Berlin",
        payload={"team": "sales"},
        key="weekly:sales",
    )
    page.goto("/schedules")
    row = page.locator("tr[data-schedule='weekly:sales']")
    expect(row).to_contain_text("Europe/Berlin")
    expect(row).to_contain_text(re.compile(r"\d{4}-\d\d-\d\d 08:00 CES?T"))
    row.get_by_role("button", name="Pause").click()
    expect(page.locator("#flash")).to_contain_text("Schedule paused")
    expect(row.locator(".badge.paused")).to_be_visible()
    assert test_app.schedules.get("weekly:sales").is_paused
    row.get_by_role("button", name="Resume").click()
    expect(row).to_contain_text(re.compile(r"08:00 CES?T"))
    assert not test_app.schedules.get("weekly:sales").is_paused
    assert audit_rows(db) == [
        ("api", "schedule.add", "schedule:weekly:sales"),  # test_app's, above
        (LOOPBACK_ACTOR, "schedule.pause", "schedule:weekly:sales"),
        (LOOPBACK_ACTOR, "schedule.resume", "schedule:weekly:sales"),
    ]


def test_effects_ledger(page: Page, test_app: cronbase.App) -> None:
    with test_app.effects.once("invoice:812:email") as effect:
        effect.record(message_id="msg-42")
    try:
        with test_app.effects.once("invoice:813:charge"):
            raise ValueError("card declined")
    except ValueError:
        pass
    page.goto("/effects")
    expect(page.locator("tr[data-effect='invoice:812:email']")).to_contain_text("msg-42")
    expect(page.locator("tr[data-effect='invoice:813:charge']")).to_contain_text("card declined")
    page.get_by_label("status").select_option("failed")
    expect(page.locator("table.effects tbody tr")).to_have_count(1)
    expect(page).to_have_url(re.compile(r"/effects\?status=failed"))


def test_a_refused_action_says_why(page: Page, test_app: cronbase.App) -> None:
    job_id = test_app.tasks["send_email"].configure(delay=timedelta(hours=1)).defer(to="x@y.z")
    page.goto(f"/jobs/{job_id}")
    test_app.jobs.cancel(job_id)  # meanwhile, someone else cancels it
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("#flash .error")).to_contain_text(f"cannot cancel job {job_id}")


def test_workers_page_shows_a_live_worker_with_the_job_in_its_hands(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    job_id = test_app.tasks["hold"].defer(n=2)
    worker = start_thread(lambda: test_app.run_worker(burst=True, install_signal_handlers=False))
    wait_for(lambda: status_of(db, job_id) == "running", what="the hold job to run")
    page.goto("/")
    page.get_by_role("link", name="Workers", exact=True).click()
    expect(page.locator("h1")).to_contain_text("1 alive")
    row = page.locator("table#workers tbody tr").first
    expect(row).to_contain_text("alive")
    expect(row).to_contain_text("1 / 10")
    expect(row.get_by_role("link", name=f"#{job_id}")).to_be_visible()
    dashboard_app.RELEASE_HOLD.set()
    worker.join(60)
    # The page refreshes itself: once the burst worker unregistered, it is gone from the list.
    expect(page.locator("table#workers")).to_contain_text("no workers registered", timeout=15_000)


def test_a_running_jobs_page_polls_its_changing_parts_without_the_payload(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    job_id = test_app.tasks["hold"].defer(n=4242)
    worker = start_thread(lambda: test_app.run_worker(burst=True, install_signal_handlers=False))
    wait_for(lambda: status_of(db, job_id) == "running", what="the hold job to run")
    page.goto(f"/jobs/{job_id}")
    expect(page.locator("#job-status")).to_have_text("running")
    with page.expect_response(lambda r: r.url.endswith(f"/jobs/{job_id}/live")) as polled:
        pass  # the page asks every 2 seconds
    assert polled.value.status == 200
    assert '"n": 4242' not in polled.value.text()  # the payload is not sent again
    dashboard_app.RELEASE_HOLD.set()
    worker.join(60)
    expect(page.locator("#job-status")).to_have_text("succeeded")
    expect(page.locator("article.attempt")).to_have_count(1)  # swapped out of band
    expect(page.locator("pre.payload")).to_have_count(1)
    expect(page.locator("pre.payload")).to_contain_text('"n": 4242')


def test_scheduled_view_runs_a_future_job_now(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    later = test_app.tasks["send_email"].configure(delay=timedelta(hours=3)).defer(to="l@x.y")
    test_app.tasks["send_email"].defer(to="now@x.y")
    page.goto("/")
    expect(page.locator("#total-scheduled")).to_contain_text("1")
    page.locator("#total-scheduled").click()
    row = page.locator(f"tr[data-job='{later}']")
    expect(row).to_contain_text("in 2 h 59 min")
    row.get_by_role("button", name="Run now").click()
    expect(page.locator("#job-status")).to_have_text("queued")
    page.goto("/scheduled")
    expect(page.locator("table#scheduled")).to_contain_text("nothing scheduled")
    assert audit_rows(db) == [(LOOPBACK_ACTOR, "job.retry", f"job:{later}")]


def test_a_schedule_reads_in_words_shows_overdue_and_runs_now(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    test_app.schedules.add(
        "build_report",
        cron="0 8 * * 1-5",
        tz="Europe/Berlin",
        payload={"team": "ops"},
        key="weekday:ops",
    )
    db.execute("UPDATE cronbase.schedules SET next_fire_at = now() - interval '10 minutes'")
    page.goto("/schedules")  # the page fixture accepts the confirmation
    row = page.locator("tr[data-schedule='weekday:ops']")
    expect(row).to_contain_text("At 08:00, Monday through Friday (Europe/Berlin)")
    expect(row.locator(".badge.overdue")).to_be_visible()
    row.get_by_role("button", name="Run now").click()
    expect(page.locator("#flash")).to_contain_text("The schedule's job was enqueued to run now")
    expect(page.locator("h1")).to_contain_text("build_report")
    expect(page.locator("pre.payload").first).to_contain_text('"team": "ops"')
    [added, (actor, action, target)] = audit_rows(db)
    assert added == ("api", "schedule.add", "schedule:weekday:ops")  # test_app's, above
    assert (actor, action, target) == (LOOPBACK_ACTOR, "schedule.run_now", "schedule:weekday:ops")
    assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (1,)


def test_bulk_retry_and_delete_selected_jobs_with_confirmation_and_audit(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    dead = [test_app.tasks["flaky"].defer(n=n) for n in (1, 2)]
    run_burst(test_app)
    parent = test_app.tasks["send_email"].configure(queue="nobody").defer(to="p@x.y")
    waiting = test_app.tasks["send_email"].configure(after=[parent]).defer(to="w@x.y")
    assert [status_of(db, j) for j in dead] == ["dead", "dead"]
    page.goto("/jobs")  # the page fixture accepts each confirmation
    for job_id in (*dead, waiting):
        page.get_by_label(f"select job {job_id}").check()
    page.get_by_role("button", name="Retry", exact=True).click()
    expect(page.locator("#flash")).to_contain_text("2 job(s) queued again; 1 refused")
    assert [status_of(db, j) for j in dead] == ["queued", "queued"]
    [(actor, action, target)] = audit_rows(db)
    assert (actor, action, target) == (LOOPBACK_ACTOR, "jobs.bulk_retry", "jobs:3")
    detail = db.execute("SELECT detail FROM cronbase.audit_log").fetchone()
    assert detail is not None
    assert detail[0]["job_ids"] == dead
    assert "it is pending" in detail[0]["refused"][str(waiting)]

    test_app.jobs.cancel(dead[0])
    page.goto("/jobs")
    page.get_by_label(f"select job {dead[0]}").check()
    page.get_by_label(f"select job {dead[1]}").check()
    page.get_by_role("button", name="Delete", exact=True).click()
    expect(page.locator("#flash")).to_contain_text("1 job(s) deleted; 1 refused")
    assert db.execute(
        "SELECT id FROM cronbase.jobs_all WHERE id = ANY(%s)", (dead,)
    ).fetchall() == [(dead[1],)]


def test_tasks_page_switches_windows_and_the_header_names_the_database(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    for n in range(3):
        test_app.tasks["send_email"].defer(to=f"u{n}@x.y")
    test_app.tasks["flaky"].defer(n=7)
    run_burst(test_app)
    page.goto("/")
    expect(page.locator("#where")).to_contain_text("schema cronbase · database cronbase_test_")
    page.get_by_role("link", name="Tasks", exact=True).click()
    emails = page.locator("tr[data-task='send_email']")
    expect(emails).to_contain_text("3")
    expect(emails).to_contain_text("0.0%")
    flaky = page.locator("tr[data-task='flaky']")
    expect(flaky).to_contain_text("100.0%")
    page.get_by_role("link", name="7d", exact=True).click()
    expect(page).to_have_url(re.compile(r"/tasks\?window=7d"))
    expect(page.locator("h1")).to_contain_text("in the last 7d")
    expect(page.locator("tr[data-task='send_email']")).to_contain_text("3")


def test_jobs_table_reads_relative_times_with_the_absolute_on_hover(
    page: Page, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    job_id = test_app.tasks["send_email"].defer(to="a@x.y")
    db.execute(
        "UPDATE cronbase.jobs SET status = 'succeeded', attempts = 1,"
        " started_at = now() - interval '5 minutes', finished_at = now() - interval '2 minutes'"
        " WHERE id = %s",
        (job_id,),
    )
    page.goto("/jobs")
    cells = page.locator(f"tr[data-job='{job_id}'] td")
    finished = cells.nth(7)  # checkbox, id, task, queue, status, attempts, run at, finished
    expect(finished).to_have_text("2 min ago")
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", finished.get_attribute("title") or ""
    )
    expect(cells.nth(8)).to_have_text("3 min 00 s")
    expect(cells.nth(10)).to_contain_text("a@x.y")


def test_a_dashboard_whose_database_is_down_says_so_and_keeps_retrying(
    browser: Browser, tmp_path: Path
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        down_port = probe.getsockname()[1]
    url = f"postgresql://app:secret@127.0.0.1:{down_port}/shop?connect_timeout=2"
    with running_dashboard(url, tmp_path / "down.log") as down:
        context = browser.new_context(base_url=down.url)
        opened = context.new_page()
        response = opened.goto("/workers")
        assert response is not None
        assert response.status == 503
        expect(opened.locator("h1")).to_have_text("Database unreachable, retrying")
        expect(opened.locator("#where")).to_contain_text(f"database shop on 127.0.0.1:{down_port}")
        expect(opened.locator("#unreachable")).to_have_attribute("hx-trigger", "every 5s")
        assert "secret" not in opened.content()
        # Its retry answers too (a flash message, the page kept) rather than an error page.
        expect(opened.locator("#flash")).to_contain_text(
            "database unreachable, retrying", timeout=15_000
        )
        context.close()
