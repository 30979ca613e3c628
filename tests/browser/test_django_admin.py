"""cronbase in the Django admin, in Chromium: the example project (examples/django_tasks, Django 6)
served by ``manage.py runserver`` on the test database, a superuser and a view-only user.

Lists, filters, search, a job's page with its attempts, schedules and workers; the retry, cancel
and requeue-dead actions through the library; and their audit rows beside the dashboard's for the
same actions (the dashboard runs on the same database: tests/browser/conftest.py).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import TIMEOUT_MS, Dashboard, csrf_token, free_port
from tests.conftest import wait_for
from tests.integration.test_django_tasks import EXAMPLE, clean_env, django6_python

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SEED = Path(__file__).with_name("django_admin_seed.py")
PASSWORD = "a-long-test-password"
CRM = "newsletter.tasks.sync_to_crm"


@pytest.fixture(scope="module")
def site(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The example project on the session's test database (migrated for Django's own tables),
    served by runserver; its URL."""
    python = django6_python()
    env = clean_env(DATABASE_URL=database_url, DJANGO_SETTINGS_MODULE="tasksite.settings")
    migrated = subprocess.run(
        [python, "manage.py", "migrate"],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert migrated.returncode == 0, migrated.stderr
    port = free_port()
    log = tmp_path_factory.mktemp("django") / "runserver.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [python, "manage.py", "runserver", "--noreload", "--insecure", f"127.0.0.1:{port}"],
            cwd=EXAMPLE,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"

        def is_up() -> bool:
            try:
                return httpx.get(f"{url}/admin/login/", timeout=2).status_code == 200
            except httpx.HTTPError:
                return server.poll() is not None

        try:
            wait_for(is_up, timeout=60, what="runserver to answer")
            assert server.poll() is None, log.read_text()
            yield url
        finally:
            server.terminate()
            server.wait(30)


@pytest.fixture
def seeded(site: str, database_url: str, db: psycopg.Connection[Any]) -> dict[str, int]:
    """Users, and jobs: two dead (three failed attempts each), one succeeded, one scheduled an
    hour ahead, one with an idempotency key; on the emptied test database."""
    env = clean_env(DATABASE_URL=database_url, DJANGO_SETTINGS_MODULE="tasksite.settings")
    seeded = subprocess.run(
        [django6_python(), str(SEED)],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert seeded.returncode == 0, seeded.stderr
    ids: dict[str, int] = json.loads(seeded.stdout.splitlines()[-1])
    # The schedule OPTIONS declare, as a worker or a tick declares it when it starts.
    ticked = subprocess.run(
        [django6_python(), "manage.py", "cronbase", "tick", "--no-run"],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ticked.returncode == 0, ticked.stderr
    return ids


@pytest.fixture
def client(dashboard: Dashboard) -> Iterator[httpx.Client]:
    """The dashboard's client, naming the page's origin in its POSTs as a browser does."""
    with httpx.Client(
        base_url=dashboard.url, headers={"Origin": dashboard.url}, timeout=30
    ) as http:
        yield http


def logged_in(browser: Browser, site: str, user: str) -> Page:
    context = browser.new_context(base_url=site, viewport={"width": 1360, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", user)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("#site-name")).to_be_visible()
    return page


def rows(page: Page) -> list[str]:
    return [text.strip() for text in page.locator("#result_list tbody th").all_inner_texts()]


def audit(db: psycopg.Connection[Any]) -> list[tuple[str, str, str, dict[str, Any]]]:
    found = db.execute("SELECT actor, action, target, detail FROM cronbase.audit_log ORDER BY id")
    return [tuple(row) for row in found.fetchall()]  # type: ignore[misc]


def test_the_admin_lists_filters_and_searches_jobs_and_shows_their_attempts(
    browser: Browser,
    site: str,
    seeded: dict[str, int],
    database_url: str,
    db: psycopg.Connection[Any],
) -> None:
    page = logged_in(browser, site, "ops")
    page.click("text=Jobs")
    expect(page.locator("#result_list")).to_be_visible()
    assert sorted(rows(page), key=int) == sorted(str(i) for i in seeded.values())

    page.locator("#changelist-filter").get_by_role("link", name="dead", exact=True).click()
    page.wait_for_url("**status__exact=dead**")
    assert sorted(rows(page)) == sorted([str(seeded["dead"]), str(seeded["dead_too"])])
    expect(page.locator("#result_list .cronbase-status").first).to_have_text("dead")

    for term, expected in (("digest:", "keyed"), (str(seeded["succeeded"]), "succeeded")):
        page.goto("/admin/cronbase/job/")
        page.fill("#searchbar", term)
        page.press("#searchbar", "Enter")
        page.wait_for_url("**q=**")
        assert rows(page) == [str(seeded[expected])], term

    page.goto(f"/admin/cronbase/job/{seeded['dead']}/change/")
    expect(page.locator(".cronbase-status")).to_have_text("dead")
    # Its attempts, each with its error (the traceback folded under it).
    errors = page.locator(".inline-related details summary")
    expect(errors).to_have_count(3)
    expect(errors.last).to_have_text("CrmUnavailable: CRM unreachable (attempt 3)")
    attempts = page.locator(".inline-related tbody tr")
    expect(attempts.filter(has_text="failed")).to_have_count(2)
    expect(attempts.filter(has_text="dead")).to_have_count(1)
    expect(page.locator(".cronbase-json").first).to_contain_text('"failures": 9')

    page.goto("/admin/cronbase/schedule/")
    expect(page.locator("#result_list")).to_contain_text("newsletter.tasks.purge_unconfirmed")
    expect(page.locator("#result_list")).to_contain_text("At 03:00 (Europe/Berlin)")
    # A worker of the emails queue (none of the seeded jobs is in it: they stay as they are).
    env = clean_env(DATABASE_URL=database_url, DJANGO_SETTINGS_MODULE="tasksite.settings")
    worker = subprocess.Popen(
        [django6_python(), "manage.py", "cronbase", "worker", "--queue", "emails"],
        cwd=EXAMPLE,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(
            lambda: db.execute("SELECT count(*) FROM cronbase.workers").fetchone() == (1,),
            timeout=60,
            what="the worker to register",
        )
        page.goto("/admin/cronbase/worker/")
        listed = page.locator("#result_list tbody tr")
        expect(listed).to_have_count(1)
        expect(listed).to_contain_text("emails")
        expect(listed.locator("img[alt=True]")).to_be_visible()  # alive
        listed.get_by_role("link", name="running jobs").click()
        page.wait_for_url("**locked_by=**")
        expect(page.locator("#result_list")).to_have_count(0)  # none: "0 jobs"
    finally:
        worker.terminate()
        worker.wait(60)
    page.context.close()


def test_admin_actions_go_through_the_library_and_are_audited_as_the_dashboards(
    browser: Browser,
    site: str,
    seeded: dict[str, int],
    client: httpx.Client,
    db: psycopg.Connection[Any],
) -> None:
    page = logged_in(browser, site, "ops")
    dead = seeded["dead"]

    # A job's page: Retry now.
    page.goto(f"/admin/cronbase/job/{dead}/change/")
    page.get_by_role("button", name="Retry now").click()
    expect(page.locator(".messagelist")).to_contain_text(
        f"Job {dead} retried"
    )  # capfirst, as Django shows messages
    expect(page.locator(".cronbase-status")).to_have_text("queued")

    # The changelist: cancel two jobs, one of which is finished (refused, and said so).
    page.goto("/admin/cronbase/job/")
    for job_id in (seeded["scheduled"], seeded["succeeded"]):
        page.locator(f"input.action-select[value='{job_id}']").check()
    page.select_option("select[name=action]", "cancel_jobs")
    page.click("button[name=index]")
    expect(page.locator(".messagelist .success")).to_have_text("1 job cancelled")
    expect(page.locator(".messagelist .warning")).to_contain_text(
        f"Job {seeded['succeeded']}: cannot cancel job {seeded['succeeded']}: it is succeeded"
    )

    # Requeue every dead job of the selected one's task.
    page.locator(f"input.action-select[value='{seeded['dead_too']}']").check()
    page.select_option("select[name=action]", "requeue_dead_of_tasks")
    page.click("button[name=index]")
    expect(page.locator(".messagelist")).to_contain_text(f"1 dead job of {CRM} requeued")
    page.context.close()

    admin_rows = audit(db)
    assert [(actor, action, target) for actor, action, target, _ in admin_rows] == [
        ("django:ops", "job.retry", f"job:{dead}"),
        ("django:ops", "jobs.bulk_cancel", "jobs:2"),
        ("django:ops", "dead.requeue", f"task:{CRM}"),
    ]
    assert admin_rows[0][3] == {"task": CRM, "queue": "default", "attempts": 3}
    refusal = f"cannot cancel job {seeded['succeeded']}: it is succeeded"
    assert admin_rows[1][3]["job_ids"] == [seeded["scheduled"]]
    assert admin_rows[2][3] == {"count": 1, "job_ids": [seeded["dead_too"]]}

    # The same actions through the dashboard, on the same jobs: the same rows but the actor.
    token = csrf_token(client.get(f"/jobs/{dead}").text)
    assert client.post(f"/jobs/{dead}/retry", data={"csrf_token": token}).status_code == 303
    ids = [str(seeded["scheduled"]), str(seeded["succeeded"])]
    bulk = client.post("/jobs/bulk", data={"action": "cancel", "ids": ids, "csrf_token": token})
    assert bulk.status_code == 303
    requeue = client.post("/dead/requeue", data={"task": CRM, "csrf_token": token})
    assert requeue.status_code == 303
    dashboard_rows = audit(db)[3:]
    for ours, theirs in zip(admin_rows, dashboard_rows, strict=True):
        assert ours[1:3] == theirs[1:3]  # action and target
        assert ours[3].keys() == theirs[3].keys()
    assert dashboard_rows[0][3] == admin_rows[0][3]  # the queued job retried again: same detail
    assert dashboard_rows[1][3]["refused"][str(seeded["succeeded"])].startswith(refusal)
    assert admin_rows[1][3]["refused"][str(seeded["succeeded"])].startswith(refusal)
    assert {actor for actor, *_ in dashboard_rows} == {"dashboard@127.0.0.1"}


def test_a_user_who_may_only_view_sees_no_action(
    browser: Browser, site: str, seeded: dict[str, int], db: psycopg.Connection[Any]
) -> None:
    page = logged_in(browser, site, "viewer")
    page.goto("/admin/cronbase/job/")
    assert len(rows(page)) == len(seeded)
    expect(page.locator("select[name=action]")).to_have_count(0)
    page.goto(f"/admin/cronbase/job/{seeded['dead']}/change/")
    expect(page.get_by_role("button", name="Retry now")).to_have_count(0)
    # Not by a crafted POST either: the view checks the permission itself.
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    crafted = page.request.post(
        f"{site}/admin/cronbase/job/{seeded['dead']}/retry/",
        form={"csrfmiddlewaretoken": csrf},
        headers={"Referer": f"{site}/admin/cronbase/job/{seeded['dead']}/change/"},
    )
    assert crafted.status == 403
    page.context.close()
    assert audit(db) == []


def test_the_admin_is_read_only(browser: Browser, site: str, seeded: dict[str, int]) -> None:
    page = logged_in(browser, site, "ops")
    page.goto(f"/admin/cronbase/job/{seeded['keyed']}/change/")
    expect(page.locator(".cronbase-status")).to_have_text("queued")
    expect(page.locator("input[name=_save]")).to_have_count(0)
    expect(page.locator("a.deletelink")).to_have_count(0)
    added = page.goto("/admin/cronbase/job/add/")
    assert added is not None
    assert added.status == 403
    page.context.close()
