"""The dashboard over plain HTTP: CSRF, authentication, the bind refusal, lists, escaping, metrics."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import re
import socket
import subprocess
from collections.abc import Coroutine, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import psycopg
import pytest
from psycopg.types.json import Jsonb
from starlette.applications import Starlette
from starlette.routing import Mount

import cronbase
from cronbase.dashboard import Credentials, create_app
from tests.browser.conftest import (
    CRONBASE,
    REPO,
    Dashboard,
    audit_rows,
    cli_env,
    csrf_token,
    run_burst,
    running_dashboard,
    status_of,
)

T = TypeVar("T")
USER, PASSWORD, TOKEN = "ops", "correct horse battery", "t0ken-" + "x" * 26


@pytest.fixture
def client(dashboard: Dashboard) -> Iterator[httpx.Client]:
    """A client that, as a browser does, names the page's origin in its POSTs."""
    with httpx.Client(
        base_url=dashboard.url, headers={"Origin": dashboard.url}, timeout=30
    ) as http:
        yield http


def dead_job(app: cronbase.App) -> int:
    job_id = app.tasks["flaky"].defer(n=1)
    run_burst(app)
    return int(job_id)


# -- CSRF ----------------------------------------------------------------------------------------


def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(
    client: httpx.Client, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    job_id = dead_job(test_app)
    page = client.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    token = csrf_token(page.text)
    assert client.cookies.get("cronbase_csrf") == token
    url = f"/jobs/{job_id}/retry"
    # The last hex digit of the signature changed (to "0", or "1" when it is "0" already: a fixed
    # "0" left the token right one time in 16).
    wrong = token[:-1] + ("1" if token.endswith("0") else "0")
    assert wrong != token
    own = {"Origin": str(client.base_url).rstrip("/")}  # past the origin check, to the token's

    refusals = {
        "no token": client.post(url),
        "wrong token": client.post(url, data={"csrf_token": wrong}),
        "wrong header": client.post(url, headers={"X-CSRF-Token": "nope"}),
        "no cookie": httpx.post(
            str(client.base_url) + url, data={"csrf_token": token}, headers=own, timeout=30
        ),
    }
    assert {why: r.status_code for why, r in refusals.items()} == dict.fromkeys(refusals, 403)
    assert "CSRF" in refusals["no token"].text
    # An unsigned cookie whose value the attacker also echoes (cookie tossing) is refused too.
    forged = "abc.def"
    tossed = httpx.post(
        str(client.base_url) + url,
        data={"csrf_token": forged},
        cookies={"cronbase_csrf": forged},
        headers=own,
        timeout=30,
    )
    assert tossed.status_code == 403
    assert status_of(db, job_id) == "dead"
    assert audit_rows(db) == []

    accepted = client.post(url, data={"csrf_token": token})  # the same request, with the token
    assert accepted.status_code == 303
    assert accepted.headers["location"] == f"/jobs/{job_id}?done=retried"
    by_header = client.post(f"/jobs/{job_id}/cancel", headers={"X-CSRF-Token": token})
    assert by_header.status_code == 303
    assert status_of(db, job_id) == "cancelled"
    assert [a for _, a, _ in audit_rows(db)] == ["job.retry", "job.cancel"]


def test_an_htmx_action_is_redirected_by_header(
    client: httpx.Client, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    test_app.tasks["send_email"].defer(to="a@b.c")
    token = csrf_token(client.get("/").text)
    done = client.post(
        "/queues/pause",
        data={"queue": "emails"},
        headers={"X-CSRF-Token": token, "HX-Request": "true"},
    )
    assert done.status_code == 204
    assert done.headers["hx-redirect"] == "/?done=queue-paused"
    refused = client.post(
        "/jobs/999999/retry", headers={"X-CSRF-Token": token, "HX-Request": "true"}
    )
    assert refused.headers["hx-retarget"] == "#flash"
    assert "no job with id 999999" in refused.text


# -- authentication ------------------------------------------------------------------------------


REFUSED_BINDS = [
    pytest.param(
        ["--host", "0.0.0.0"],
        "error: refusing to serve the dashboard on 0.0.0.0, which is not a loopback address, "
        "without credentials: set CRONBASE_DASHBOARD_TOKEN, or CRONBASE_DASHBOARD_USER and "
        "CRONBASE_DASHBOARD_PASSWORD (or bind 127.0.0.1)",
        id="any-address",
    ),
    pytest.param(
        ["--host", "dashboard.internal"],
        "error: refusing to serve the dashboard on dashboard.internal,",
        id="host-name",
    ),
    pytest.param(
        ["--host", "192.0.2.1", "--user", USER],
        "error: dashboard credentials: a user without a password;",
        id="user-without-password",
    ),
    pytest.param(
        ["--host", "0.0.0.0", "--token", "short"],
        "error: dashboard token is 5 characters; use at least 16",
        id="short-token",
    ),
]


@pytest.mark.parametrize(("args", "message"), REFUSED_BINDS)
def test_a_non_loopback_bind_without_credentials_is_refused(
    database_url: str, args: list[str], message: str
) -> None:
    result = subprocess.run(
        [str(CRONBASE), "--app", "tests.browser.dashboard_app:app", "dashboard", *args],
        env=cli_env(database_url),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(message)


def run_in_thread(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run on a loop in its own thread (Playwright's sync API owns this thread's loop)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result(60)


def asgi_get(web: Any, path: str, client: tuple[str, int]) -> httpx.Response:
    """One request straight to the ASGI app, as from ``client``."""

    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=web, client=client)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            return await http.get(path)

    return run_in_thread(get())


def test_without_credentials_only_loopback_clients_are_served(test_app: cronbase.App) -> None:
    web = create_app(test_app)
    refused = asgi_get(web, "/static/dashboard.css", ("192.0.2.7", 50000))
    assert refused.status_code == 403
    assert "loopback" in refused.text
    assert asgi_get(web, "/static/dashboard.css", ("127.0.0.1", 50000)).status_code == 200
    assert asgi_get(web, "/static/dashboard.css", ("::1", 50000)).status_code == 200
    assert asgi_get(web, "/static/dashboard.css", ("::ffff:127.0.0.1", 1)).status_code == 200
    assert asgi_get(web, "/static/dashboard.css", ("::ffff:192.0.2.7", 1)).status_code == 403


def test_mounted_under_a_prefix_in_another_app(
    test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    test_app.tasks["send_email"].defer(to="a@b.c")
    outer = Starlette(routes=[Mount("/ops", create_app(test_app), name="ops")])

    async def visit() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=outer, client=("127.0.0.1", 50000))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
                page = await http.get("/ops/")
                css = await http.get("/ops/static/dashboard.css")
                paused = await http.post(
                    "/ops/queues/pause",
                    data={"queue": "emails", "csrf_token": csrf_token(page.text)},
                    headers={"Origin": "http://localhost", "Referer": "http://localhost/ops/"},
                )
                return page, css, paused
        finally:
            await test_app.aclose()

    page, css, paused = run_in_thread(visit())
    assert page.status_code == 200
    assert 'href="/ops/queue?name=emails"' in page.text
    assert 'href="/ops/static/dashboard.css"' in page.text
    assert "Path=/ops/" in page.headers["set-cookie"]
    assert css.status_code == 200
    assert (paused.status_code, paused.headers["location"]) == (303, "/ops/?done=queue-paused")
    assert audit_rows(db) == [("dashboard@127.0.0.1", "queue.pause", "queue:emails")]


def basic(user: str, password: str) -> dict[str, str]:
    encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {encoded}"}


def test_credentials_are_required_and_name_the_actor(
    database_url: str, tmp_path: Path, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    env = {
        "CRONBASE_DASHBOARD_USER": USER,
        "CRONBASE_DASHBOARD_PASSWORD": PASSWORD,
        "CRONBASE_DASHBOARD_TOKEN": TOKEN,
    }
    job_id = dead_job(test_app)
    with (
        running_dashboard(database_url, tmp_path / "auth.log", **env) as server,
        httpx.Client(base_url=server.url, headers={"Origin": server.url}, timeout=30) as http,
    ):
        anonymous = http.get("/")
        assert anonymous.status_code == 401
        assert anonymous.headers["www-authenticate"].startswith("Basic ")
        assert http.get("/", headers=basic(USER, "wrong")).status_code == 401
        assert http.get("/", headers=basic("eve", PASSWORD)).status_code == 401
        assert http.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert http.get("/metrics").status_code == 401

        assert http.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert http.get("/", headers=basic("anyone", TOKEN)).status_code == 200  # browsers
        page = http.get(f"/jobs/{job_id}", headers=basic(USER, PASSWORD))
        assert page.status_code == 200
        assert USER in page.text
        retried = http.post(
            f"/jobs/{job_id}/retry",
            headers={**basic(USER, PASSWORD), "X-CSRF-Token": csrf_token(page.text)},
        )
        assert retried.status_code == 303
    assert audit_rows(db) == [(USER, "job.retry", f"job:{job_id}")]


def test_credentials_are_checked_when_given() -> None:
    with pytest.raises(cronbase.ConfigurationError, match="a user without a password"):
        Credentials(user=USER)
    with pytest.raises(cronbase.ConfigurationError, match="at least 16"):
        Credentials(token="short")
    assert Credentials.from_env({}) is None
    found = Credentials.from_env({"CRONBASE_DASHBOARD_TOKEN": TOKEN})
    assert found == Credentials(token=TOKEN)


# -- pages ---------------------------------------------------------------------------------------


def test_job_list_filters_searches_and_pages(client: httpx.Client, test_app: cronbase.App) -> None:
    ids = test_app.tasks["send_email"].defer_many([{"to": f"u{n}@x.org"} for n in range(55)])
    keyed = test_app.tasks["build_report"].configure(idempotency_key="report:2026-10:sales")
    report = keyed.defer(team="sales")

    def listed(path: str) -> list[int]:
        response = client.get(path)
        assert response.status_code == 200, response.text
        return [int(i) for i in re.findall(r'<td><a href="/jobs/(\d+)">', response.text)]

    first = listed("/jobs?queue=emails")
    assert first == sorted(ids, reverse=True)[:50]  # newest first, one page
    assert "older →" in client.get("/jobs?queue=emails").text
    assert listed("/jobs?queue=emails&page=2") == sorted(ids, reverse=True)[50:]
    assert listed(f"/jobs?q={ids[3]}") == [ids[3]]
    assert listed("/jobs?q=report:2026-10") == [report]  # a key prefix
    assert listed("/jobs?task=build_report&status=queued") == [report]
    assert listed("/jobs?status=dead") == []
    assert client.get("/jobs?status=bogus").status_code == 400
    assert client.get("/jobs?page=0").status_code == 400
    assert client.get("/jobs?page=%C2%B2").status_code == 400  # a digit, but not 0-9
    assert client.get("/jobs/999999").status_code == 404
    assert client.get(f"/jobs/{2**64}").status_code == 404  # beyond bigint


def test_everything_shown_is_escaped(
    client: httpx.Client, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    hostile = "<script>alert('x')</script>"
    # defer refuses such a queue name; a row written by other SQL can still carry one.
    row = db.execute(
        "INSERT INTO cronbase.jobs (task, queue, payload) VALUES ('send_email', %s, %s)"
        " RETURNING id",
        [hostile, Jsonb({"to": hostile})],
    ).fetchone()
    assert row is not None
    job_id = row[0]
    for path in ("/", f"/jobs/{job_id}", "/jobs", f"/queue?name={quote(hostile)}"):
        html = client.get(path).text
        assert "<script>alert" not in html, path
        assert "&lt;script&gt;alert(" in html, path


def test_every_page_answers(client: httpx.Client, test_app: cronbase.App) -> None:
    test_app.tasks["send_email"].defer(to="a@b.c")
    for path in ("/", "/jobs", "/dead", "/long-running", "/schedules", "/effects", "/audit"):
        response = client.get(path)
        assert response.status_code == 200, (path, response.text)
        assert "default-src 'self'" in response.headers["content-security-policy"]
    assert "no-store" in response.headers["cache-control"]  # live figures
    assert "no-store" not in client.get("/static/htmx.min.js").headers.get("cache-control", "")
    assert client.get("/?done=requeued&count=%C2%B2").status_code == 200
    assert client.get("/long-running?minutes=-1").status_code == 400
    assert client.get("/effects?status=nope").status_code == 400


def test_metrics(client: httpx.Client, test_app: cronbase.App) -> None:
    test_app.tasks["send_email"].defer(to="a@b.c")
    test_app.tasks["send_email"].configure(delay=timedelta(hours=1)).defer(to="later@b.c")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert 'cronbase_queue_jobs{queue="emails",status="queued"} 2.0' in response.text
    assert 'cronbase_queue_scheduled_jobs{queue="emails"} 1.0' in response.text
    assert "cronbase_database_up 1.0" in response.text


def test_vendored_htmx_matches_its_readme() -> None:
    static = REPO / "src" / "cronbase" / "dashboard" / "static"
    readme = (static / "README.md").read_text()
    digest = hashlib.sha256((static / "htmx.min.js").read_bytes()).hexdigest()
    assert f"sha256: {digest}" in readme, "update static/README.md after changing htmx.min.js"
    version = re.search(r"htmx (2\.\d+\.\d+)", readme)
    assert version, "static/README.md names no htmx 2 version"
    assert f'version:"{version.group(1)}"' in (static / "htmx.min.js").read_text()


# -- workers ---------------------------------------------------------------------------------------


def test_the_overview_names_due_jobs_no_live_worker_registers(
    client: httpx.Client, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    assert "Waiting for a worker" not in client.get("/").text
    # Deferred by another project (or a newer deploy) on the same schema.
    db.execute(
        "INSERT INTO cronbase.jobs (task, queue, payload) VALUES ('renamed_task', 'q1', '{}')"
    )
    page = client.get("/")
    assert page.status_code == 200
    assert "Waiting for a worker" in page.text
    assert "1 due jobs of task <code>renamed_task</code>" in page.text
    assert "<code>q1</code>: no live worker registers that task" in page.text


# -- queue limits ----------------------------------------------------------------------------------


def test_queue_limits_are_set_and_shown_from_the_overview(
    client: httpx.Client, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    test_app.tasks["send_email"].defer(to="a@b.c")
    token = csrf_token(client.get("/").text)
    for path, data, notice in [
        ("/queues/limit", {"queue": "emails", "max_running": "5"}, "queue-limited"),
        ("/queues/rate", {"queue": "emails", "rate": "100/minute"}, "queue-rated"),
        ("/queues/aging", {"queue": "emails", "aging": "5m"}, "queue-aged"),
    ]:
        done = client.post(path, data={**data, "csrf_token": token})
        assert (done.status_code, done.headers["location"]) == (303, f"/?done={notice}")
    page = client.get("/").text
    assert 'name="max_running" size="4" value="5"' in page
    assert 'name="rate" size="10" value="100/minute"' in page
    assert 'name="aging" size="5" value="5m"' in page
    assert db.execute(
        "SELECT max_running, rate_n, aging_every, aging_step FROM cronbase.queues"
        " WHERE name = 'emails'"
    ).fetchone() == (5, 100, timedelta(minutes=5), 10)
    # A bad value is bad input (400), refused with its one-line reason, and changes nothing.
    for data, message in [
        ({"queue": "emails", "max_running": "lots"}, "limit &#39;lots&#39; is not a whole number"),
        ({"queue": "emails", "max_running": "0"}, "must be a whole number of at least 1, got 0"),
    ]:
        refused = client.post("/queues/limit", data={**data, "csrf_token": token})
        assert refused.status_code == 400
        assert message in refused.text
    refused = client.post(
        "/queues/rate", data={"queue": "emails", "rate": "fast", "csrf_token": token}
    )
    assert refused.status_code == 400
    assert "is not a rate" in refused.text
    for value, message in [
        ("soon", "&#39;soon&#39; is not a duration; use e.g. 30s, 5m"),
        ("0.5s", "aging interval must be at least 1 second"),
    ]:
        data = {"queue": "emails", "aging": value, "csrf_token": token}
        refused = client.post("/queues/aging", data=data)
        assert refused.status_code == 400
        assert message in refused.text
    # Empty removes a limit.
    client.post("/queues/limit", data={"queue": "emails", "max_running": "", "csrf_token": token})
    assert db.execute(
        "SELECT max_running, rate_n FROM cronbase.queues WHERE name = 'emails'"
    ).fetchone() == (None, 100)
    assert [a for _, a, _ in audit_rows(db)] == [
        "queue.limit",
        "queue.rate",
        "queue.aging",
        "queue.limit",
    ]


def test_the_overview_shows_the_busiest_fair_keys(
    client: httpx.Client, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    assert "Fair share" not in client.get("/").text
    # Jobs of a fair_key task (db/sql/fair.sql), as another deploy's defer writes them.
    db.execute(
        "INSERT INTO cronbase.jobs (task, queue, payload, flow_key, status, lease_token)"
        " SELECT 'import_row', 'imports', '{}', 'fair:imports|' || t, s,"
        "        CASE WHEN s = 'running' THEN gen_random_uuid() END"
        " FROM (VALUES ('acme', 'queued'), ('acme', 'queued'), ('acme', 'running'),"
        "              ('zeta', 'running')) v(t, s)"
    )
    test_app.queues.set_weight("imports", "zeta", 3)
    page = client.get("/").text
    assert "Fair share" in page
    acme = page.split('data-fair-key="acme"')[1].split("</tr>")[0]
    cells = re.findall(r'<td class="num">([^<]*)</td>', acme)
    assert cells == ["2", "1", "50%", "1", "0"]
    zeta = page.split('data-fair-key="zeta"')[1].split("</tr>")[0]
    assert re.findall(r'<td class="num">([^<]*)</td>', zeta) == ["0", "1", "50%", "3", "0"]


def test_the_job_page_shows_the_result(
    client: httpx.Client, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    job_id = test_app.tasks["send_email"].defer(to="a@b.c")
    db.execute(
        "UPDATE cronbase.jobs SET status = 'succeeded', finished_at = now(), snoozes = 3, "
        """result = '{"sent": true, "id": "<msg-1>"}' WHERE id = %s""",
        (job_id,),
    )
    page = client.get(f"/jobs/{job_id}").text
    assert "snoozed 3 times" in page
    assert " · version" not in page  # an unversioned job's page names no version
    db.execute("UPDATE cronbase.jobs SET task_version = 3 WHERE id = %s", (job_id,))
    assert " · version 3</td>" in client.get(f"/jobs/{job_id}").text
    assert '<pre class="payload" id="job-result">' in page
    assert "&lt;msg-1&gt;" in page  # escaped


def test_the_job_page_draws_its_workflow(
    client: httpx.Client, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    send = test_app.tasks["send_email"]
    members = [send.s(to=f"u{n}@b.c") for n in range(12)]
    last = cronbase.chain(send.s(to="first@b.c"), cronbase.group(members), send.s(to="x@b.c"))
    callback = last.defer()
    first = callback - 13
    db.execute(
        "UPDATE cronbase.jobs SET status = 'succeeded', finished_at = now(), result = '\"ok\"' "
        "WHERE id = %s",
        (first,),
    )
    page = client.get(f"/jobs/{callback}").text
    assert f"Workflow {callback}" in page
    assert "14 jobs" in page
    # The first level one by one (with its result), the group of 12 summed up, then the callback
    # (pending on all 12 members), marked as the page's own job.
    assert f'data-job="{first}"' in page
    assert "<code>&#34;ok&#34;</code>" in page
    assert "12 jobs of send_email:" in page
    assert "waits for 12 of 12" in page
    assert 'class="node current"' in page
    actions = page.split('id="job-live"')[0]
    assert "Retry now" not in actions  # a pending job waits for its parents
    assert ">Cancel<" in actions


def test_the_workers_page_shows_who_is_alive_and_what_they_hold(
    client: httpx.Client, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    assert "no workers registered" in client.get("/workers").text
    db.execute(
        "INSERT INTO cronbase.workers (id, hostname, pid, queues, concurrency, tasks, last_seen_at,"
        " version, schema_version)"
        " VALUES ('w-live', 'web-1', 101, NULL, 8, ARRAY['send_email'], now(), '0.1.0', 18),"
        " ('w-gone', 'web-2', 202, ARRAY['emails'], 2, NULL, now() - interval '10 minutes',"
        " NULL, NULL)"
    )
    held = test_app.tasks["send_email"].defer(to="a@b.c")
    db.execute(
        "UPDATE cronbase.jobs SET status = 'running', locked_by = 'w-gone', started_at = now(),"
        " locked_until = now() + interval '1 minute', lease_token = gen_random_uuid()"
        " WHERE id = %s",
        (held,),
    )
    page = client.get("/workers").text
    assert "1 alive · 0 of 8 slots busy" in page
    live = page.split('data-worker="w-live"')[1].split("</tr>")[0]
    gone = page.split('data-worker="w-gone"')[1].split("</tr>")[0]
    assert ">alive<" in live
    assert "0 / 8" in live
    assert "1 tasks" in live
    # The code each runs: the package version and newest migration; "older" before 0016.
    assert '0.1.0 <small title="the newest migration its code knows">m18</small>' in live
    assert ">older</span>" in gone
    assert ">gone<" in gone
    assert "1 / 2" in gone
    assert f'href="/jobs/{held}">#{held}</a> send_email' in gone
    assert page.index('data-worker="w-live"') < page.index('data-worker="w-gone"')
    assert 'href="/workers" class="current"' in page


def test_the_workers_page_groups_a_supervisors_processes_under_it(
    client: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    db.execute(
        "INSERT INTO cronbase.workers (id, hostname, pid, supervisor, concurrency, last_seen_at)"
        " VALUES ('w-alone', 'web-1', 5, NULL, 10, now()),"
        " ('w-a', 'web-1', 21, 'web-1:20', 4, now()),"
        " ('w-b', 'web-1', 22, 'web-1:20', 4, now() - interval '10 minutes'),"
        " ('w-c', 'web-2', 31, 'web-2:30', 4, now())"
    )
    page = client.get("/workers").text
    assert page.count('<tr class="group"') == 2  # one per supervisor; none for w-alone
    group = page.split('<tr class="group" data-supervisor="web-1:20">')[1].split("</tr>")[0]
    assert "supervisor <code>web-1:20</code> on web-1: 2 worker processes, 1 alive" in group
    order = [
        page.index(marker)
        for marker in (
            'data-worker="w-alone"',
            'data-supervisor="web-1:20"><th',
            'data-worker="w-a"',
            'data-supervisor="web-2:30"><th',
            'data-worker="w-c"',
            # Gone, so folded below the live ones (and counted in its supervisor's line).
            'data-worker="w-b"',
        )
    ]
    assert order == sorted(order)


def test_queued_jobs_split_into_due_and_scheduled_and_the_scheduled_view(
    client: httpx.Client, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    send = test_app.tasks["send_email"]
    due = send.defer(to="now@b.c")
    soon = send.configure(delay=timedelta(minutes=5)).defer(to="soon@b.c")
    later = send.configure(delay=timedelta(hours=2)).defer(to="later@b.c")
    overview = client.get("/").text
    row = overview.split('data-queue="emails"')[1].split("</tr>")[0]
    cells = [c.split("</td>")[0].strip() for c in row.split('<td class="num"')[1:]]
    # Columns: pending, queued (due), scheduled, ...
    assert cells[1].endswith(">1</a>")  # one due
    assert cells[2].startswith('data-scheduled="2"')
    assert "queued (due)" in overview
    assert '<a class="total" id="total-scheduled" href="/scheduled">' in overview
    page = client.get("/scheduled").text
    assert page.index(f'data-job="{soon}"') < page.index(f'data-job="{later}"')  # soonest first
    assert f'data-job="{due}"' not in page
    soon_row = page.split(f'data-job="{soon}"')[1].split("</tr>")[0]
    assert "in 4 min" in soon_row
    assert "Run now" in soon_row
    assert "soon@b.c" in soon_row
    filtered = client.get("/scheduled?task=nosuch").text
    assert "nothing scheduled for this filter" in filtered


def test_the_header_names_the_database_and_schema(client: httpx.Client) -> None:
    page = client.get("/workers").text
    header = page.split('id="where">')[1].split("</span>")[0]
    assert header.startswith("schema cronbase · database cronbase_test_")
    assert "password" not in header
    assert "@" not in header


def test_pages_say_the_database_is_unreachable_and_retry_by_themselves() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down = cronbase.App(f"postgresql://nobody:secret@127.0.0.1:{port}/shop?connect_timeout=2")
    web = create_app(down)
    for path in ("/", "/jobs", "/workers", "/scheduled"):
        page = asgi_get(web, path, ("127.0.0.1", 50000))
        assert page.status_code == 503, path
        assert "Database unreachable, retrying" in page.text
        assert 'hx-trigger="every 5s"' in page.text
        assert "Internal Server Error" not in page.text
        assert "secret" not in page.text
        assert f"database shop on 127.0.0.1:{port}" in page.text
    down.close()


def test_the_jobs_table_shows_times_relative_durations_progress_and_payload(
    client: httpx.Client, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    send = test_app.tasks["send_email"]
    done, running = send.defer(to="done@b.c"), send.defer(to="busy@b.c")
    db.execute(
        "UPDATE cronbase.jobs SET status = 'succeeded', attempts = 1,"
        " started_at = now() - interval '3 minutes', finished_at = now() - interval '1 minute'"
        " WHERE id = %s",
        (done,),
    )
    db.execute(
        "UPDATE cronbase.jobs SET status = 'running', attempts = 1, locked_by = 'w',"
        " started_at = now() - interval '30 seconds', locked_until = now() + interval '1 minute',"
        " lease_token = gen_random_uuid(), progress = 40, stage = 'rendering' WHERE id = %s",
        (running,),
    )
    page = client.get("/jobs").text
    done_row = page.split(f'data-job="{done}"')[1].split("</tr>")[0]
    cells = [c.split("</td>")[0] for c in done_row.split("<td")[2:]]  # after the checkbox
    # id, task, queue, status, attempts, run at, finished, took, progress, payload, last error
    assert cells[6].endswith(">1 min ago")
    assert ' UTC"' in cells[6]  # the absolute time on hover
    assert cells[7].endswith(">2 min 00 s")
    assert "done@b.c" in cells[9]
    busy = page.split(f'data-job="{running}"')[1].split("</tr>")[0]
    assert '<progress max="100" value="40.0" title="40% · rendering">' in busy
    assert "30." in busy or "31." in busy  # running for about 30 s so far


def test_bulk_actions_refuse_bad_forms_with_one_line(
    client: httpx.Client, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    token = csrf_token(client.get("/jobs").text)
    job_id = test_app.tasks["send_email"].defer(to="a@b.c")
    for data, message in [
        ({"action": "retry"}, "select at least one job"),
        ({"action": "explode", "ids": str(job_id)}, "unknown bulk action &#39;explode&#39;"),
        ({"action": "retry", "ids": "12x"}, "a job id must be a whole number from 1 to"),
        ({"action": "cancel", "ids": [str(n) for n in range(501)]}, "at most 500 jobs at once"),
    ]:
        refused = client.post("/jobs/bulk", data={**data, "csrf_token": token})
        assert refused.status_code == 400, data
        assert message in refused.text
    assert db.execute("SELECT status FROM cronbase.jobs_all").fetchall() == [("queued",)]
    assert audit_rows(db) == []


def visit(app: cronbase.App, *paths: str) -> list[str]:
    """Pages of the dashboard of ``app``, in-process (so a test can spy on the library), on one
    loop that closes ``app``'s async pools after."""
    web = create_app(app)

    async def get_all() -> list[str]:
        transport = httpx.ASGITransport(app=web, client=("127.0.0.1", 50000))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
                answers = [await http.get(path) for path in paths]
        finally:
            await app.aclose()
        for path, answer in zip(paths, answers, strict=True):
            assert answer.status_code == 200, (path, answer.text[:300])
        return [answer.text for answer in answers]

    return run_in_thread(get_all())


def test_the_job_list_counts_its_matches_bounded_and_reads_no_ids_until_asked(
    test_app: cronbase.App, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from cronbase.dashboard import pages
    from cronbase.operations import search

    def no_ids(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a page read the ids of every match only to count them")

    monkeypatch.setattr(search, "search_job_ids_async", no_ids)
    monkeypatch.setattr(pages, "SELECT_ALL_MAX", 5)  # acts on 5 at most; counts 6 at most
    counted: list[int] = []
    count = search.count_search_jobs_async

    async def spy(db: Any, **filters: Any) -> int:
        counted.append(found := await count(db, **filters))
        return found

    monkeypatch.setattr(search, "count_search_jobs_async", spy)
    for n in range(4):
        test_app.tasks["send_email"].configure(queue="few").defer(to=f"u{n}@x.y")
    for n in range(9):
        test_app.tasks["send_email"].configure(queue="many").defer(to=f"v{n}@x.y")
    few, many, exactly = visit(test_app, "/jobs?queue=few", "/jobs?queue=many", "/jobs?q=u3@")
    assert "select all 4 jobs matching this filter" in few
    assert "select all more than 5 jobs matching this filter" in many
    assert "narrow the filter" in many
    assert "select all 1 jobs matching this filter" in exactly
    # The 9 of "many" were counted to one past the bound, no further.
    assert counted == [4, 6, 1]


def test_the_dead_page_counts_each_tasks_dead_jobs_from_the_error_groups(
    test_app: cronbase.App, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from cronbase.operations import search

    flaky = test_app.tasks["flaky"]
    ids = [flaky.defer(n=n) for n in range(6)]
    run_burst(test_app)
    assert {status_of(db, i) for i in ids} == {"dead"}
    # Two tasks, three errors: flaky's refusal (3) and its timeout (1), send_email's (2).
    db.execute(
        "UPDATE cronbase.jobs_history SET error_type = 'TimeoutError',"
        " last_error = 'TimeoutError: payment service timed out' WHERE id = %s",
        [ids[0]],
    )
    db.execute(
        "UPDATE cronbase.jobs_history SET task = 'send_email', error_type = 'SMTPError',"
        " last_error = 'SMTPError: mailbox full' WHERE id = ANY(%s)",
        [ids[1:3]],
    )
    limits: list[int] = []
    rows = search.search_jobs_async

    async def spy_rows(db: Any, **filters: Any) -> Any:
        limits.append(filters["limit"])
        return await rows(db, **filters)

    by_task: list[str] = []
    count_by_task = search.count_error_scan_by_task_async

    async def spy_count(*args: Any) -> dict[str, int]:
        by_task.append("counted")
        return await count_by_task(*args)

    monkeypatch.setattr(search, "search_jobs_async", spy_rows)
    monkeypatch.setattr(search, "count_error_scan_by_task_async", spy_count)

    def per_task(page: str) -> dict[str, int]:
        table = page.split('<section class="requeue">')[1].split("</section>")[0]
        found = re.findall(r'<tr data-task="([^"]+)">.*?<td class="num">(\d+)</td>', table, re.S)
        return {task: int(n) for task, n in found}

    expected = {"flaky": 4, "send_email": 2}
    [page] = visit(test_app, "/dead")
    assert per_task(page) == expected
    # The groups gave them: no whole rows but the page's own, and no count by task.
    assert limits == [51]
    assert by_task == []
    # When the groups returned leave some out (more than error_groups returns: 2 here), a
    # count by task over the same scan gives them, as exactly.
    monkeypatch.setattr(search, "GROUPS_SHOWN", 2)
    [page] = visit(test_app, "/dead")
    assert per_task(page) == expected
    assert by_task == ["counted"]


def test_the_tasks_page_shows_rates_failures_and_durations_per_window(
    client: httpx.Client, db: psycopg.Connection[Any]
) -> None:
    from tests.e2e.test_cli_operator import seed_task_history

    seed_task_history(db)
    page = client.get("/tasks").text
    record = page.split('data-task="record"')[1].split("</tr>")[0]
    cells = [c.split("</td>")[0].rsplit(">", 1)[-1] for c in record.split("<td")[3:]]
    assert cells == ["4", "0", "0.0%", "0.07", "2.5 s", "8.9 s"]
    explode = page.split('data-task="explode"')[1].split("</tr>")[0]
    assert "100.0%" in explode
    week = client.get("/tasks?window=7d").text
    assert 'aria-current="true">7d</a>' in week
    assert week.split('data-task="record"')[1].split("</tr>")[0].count(">5</td>") == 1
    assert client.get("/tasks?window=3h").status_code == 400


# -- one operator surface --------------------------------------------------------------------------


def test_a_retry_from_the_command_and_from_the_dashboard_leave_the_same_audit_row(
    client: httpx.Client,
    test_app: cronbase.App,
    db: psycopg.Connection[Any],
    database_url: str,
) -> None:
    """Both front ends call the library's action, which writes the row: one vocabulary, and
    only the actor tells them apart."""
    from_cli, from_dashboard = dead_job(test_app), dead_job(test_app)
    done = subprocess.run(
        [str(CRONBASE), "jobs", "retry", str(from_cli)],
        env=cli_env(database_url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    page = client.get(f"/jobs/{from_dashboard}")
    retried = client.post(
        f"/jobs/{from_dashboard}/retry", data={"csrf_token": csrf_token(page.text)}
    )
    assert retried.status_code == 303
    rows = db.execute(
        "SELECT actor, action, target, detail FROM cronbase.audit_log ORDER BY id"
    ).fetchall()
    assert [(action, target) for _, action, target, _ in rows] == [
        ("job.retry", f"job:{from_cli}"),
        ("job.retry", f"job:{from_dashboard}"),
    ]
    (cli_actor, *_, cli_detail), (web_actor, *_, web_detail) = rows
    assert cli_detail == web_detail == {"task": "flaky", "queue": "default", "attempts": 1}
    assert cli_actor.startswith("cli:")
    assert web_actor == "dashboard@127.0.0.1"
