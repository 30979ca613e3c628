"""The dashboard's doors, over real HTTP (issue 21): the hosts it answers, the origin a POST needs,
trust in proxy headers, hostile input, error headers, page sizes, unused queues, TLS."""

from __future__ import annotations

import html
import re
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.types.json import Jsonb
from starlette.applications import Starlette
from starlette.routing import Mount

import cronbase
from cronbase.dashboard import Credentials, create_app
from tests.browser.conftest import (
    Dashboard,
    audit_rows,
    csrf_token,
    running_dashboard,
    serving,
)

TOKEN = "t0ken-" + "x" * 26
SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
}


def assert_page_headers(response: httpx.Response) -> None:
    """The headers every page carries, on ``response`` whatever its status."""
    where = f"{response.request.method} {response.request.url} -> {response.status_code}"
    assert "default-src 'self'" in response.headers.get("content-security-policy", ""), where
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, (where, name)
    if response.status_code >= 400:
        assert "no-store" in response.headers.get("cache-control", ""), where


def one_line(text: str) -> str:
    """The message of an error page (its <p class="error">) or of a plain-text refusal."""
    found = re.search(r'<p class="error">(.*?)</p>', text, re.DOTALL)
    message = html.unescape(found.group(1)) if found else text
    assert "\n" not in message.strip(), message
    return message.strip()


@pytest.fixture
def client(dashboard: Dashboard) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=dashboard.url, headers={"Origin": dashboard.url}, timeout=30
    ) as http:
        yield http


def form_token(client: httpx.Client) -> str:
    return csrf_token(client.get("/jobs").text)


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


# -- DNS rebinding: the Host it answers, the Origin a POST needs ----------------------------------


def test_a_request_for_a_foreign_host_is_refused(
    client: httpx.Client, dashboard: Dashboard, test_app: cronbase.App
) -> None:
    """A page whose name was rebound to 127.0.0.1 reads nothing: its Host is not ours."""
    test_app.tasks["send_email"].defer(to="secret@b.c")
    port = port_of(dashboard.url)
    refused = client.get("/jobs", headers={"Host": f"attacker.example:{port}"})
    assert refused.status_code == 400
    assert "secret@b.c" not in refused.text
    assert one_line(refused.text).startswith(
        "host 'attacker.example' is not one this dashboard is served as"
    )
    assert "--allowed-host" in refused.text
    assert_page_headers(refused)
    # A name that merely ends like a loopback one, and a suffix of ours, are other names.
    for host in ("localhost.attacker.example", "127.0.0.1.nip.io", "xlocalhost"):
        assert client.get("/", headers={"Host": f"{host}:{port}"}).status_code == 400, host
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST.:{port}", "127.0.0.1"):
        served = client.get("/jobs", headers={"Host": host})
        assert served.status_code == 200, host
        assert "secret@b.c" in served.text
    for host in ("", "a b", "[::1", "::1", "127.0.0.1:99999", "127.0.0.1:x"):
        assert client.get("/", headers={"Host": host}).status_code == 400, repr(host)


def test_allowed_hosts_add_names_to_loopback(
    database_url: str, tmp_path: Path, test_app: cronbase.App
) -> None:
    with running_dashboard(
        database_url, tmp_path / "hosts.log", "--allowed-host", "Dash.Example."
    ) as server:
        port = port_of(server.url)
        with httpx.Client(base_url=server.url, timeout=30) as http:
            assert http.get("/", headers={"Host": f"dash.example:{port}"}).status_code == 200
            assert http.get("/", headers={"Host": "dash.example"}).status_code == 200
            assert http.get("/", headers={"Host": f"[::1]:{port}"}).status_code == 200
            refused = http.get("/", headers={"Host": f"other.example:{port}"})
            assert refused.status_code == 400
            assert "(localhost and loopback addresses, dash.example)" in refused.text


def test_create_app_takes_allowed_hosts_and_refuses_a_bad_one(test_app: cronbase.App) -> None:
    with pytest.raises(cronbase.ConfigurationError, match=r"the string 'dash\.example'"):
        create_app(test_app, allowed_hosts="dash.example")  # type: ignore[arg-type]
    with pytest.raises(cronbase.ConfigurationError, match=r"'https://dash\.example' is not a host"):
        create_app(test_app, allowed_hosts=["https://dash.example"])
    web = create_app(test_app, allowed_hosts=["dash.example", "[2001:db8::1]"])
    with serving(web, test_app) as url, httpx.Client(base_url=url, timeout=30) as http:
        assert http.get("/", headers={"Host": "dash.example:8443"}).status_code == 200
        assert http.get("/", headers={"Host": "[2001:db8::1]:80"}).status_code == 200
        assert http.get("/", headers={"Host": "evil.example"}).status_code == 400


def test_a_post_from_another_origin_is_refused_and_changes_nothing(
    client: httpx.Client, dashboard: Dashboard, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    """The CSRF token and cookie are right in each request: only the origin is wrong."""
    test_app.tasks["send_email"].defer(to="a@b.c")
    data = {"queue": "emails", "csrf_token": form_token(client)}
    other_port = f"http://127.0.0.1:{port_of(dashboard.url) + 1}"
    refusals = {
        "foreign origin": {"Origin": "http://attacker.example"},
        "another port": {"Origin": other_port},
        "https": {"Origin": dashboard.url.replace("http:", "https:")},
        "null origin": {"Origin": "null"},
        "foreign referer": {"Origin": "", "Referer": "http://attacker.example/page"},
        "neither": {"Origin": ""},
    }
    for why, headers in refusals.items():
        sent = {k: v for k, v in headers.items() if v}
        # httpx sends the client's Origin unless the request names its own; "" drops it.
        with httpx.Client(base_url=dashboard.url, cookies=client.cookies, timeout=30) as bare:
            refused = bare.post("/queues/pause", data=data, headers=sent)
        assert refused.status_code == 403, why
        assert_page_headers(refused)
        message = one_line(refused.text)
        if "Origin" in sent:
            assert message.startswith(f"cross-origin POST refused: Origin {sent['Origin']!r}")
        elif "Referer" in sent:
            assert "Referer 'http://attacker.example/page' is not a page of this dashboard" in (
                message
            )
        else:
            assert message.startswith("POST refused: it has neither an Origin nor a Referer")
    assert db.execute("SELECT count(*) FROM cronbase.queues").fetchone() == (0,)
    assert audit_rows(db) == []
    # From our own pages: the Origin, or lacking it (an older browser) the Referer.
    with httpx.Client(base_url=dashboard.url, cookies=client.cookies, timeout=30) as bare:
        by_referer = bare.post(
            "/queues/resume", data=data, headers={"Referer": dashboard.url + "/"}
        )
    assert by_referer.status_code == 303
    assert client.post("/queues/pause", data=data).status_code == 303
    assert [a for _, a, _ in audit_rows(db)] == ["queue.resume", "queue.pause"]


# -- loopback trust is never taken from a header --------------------------------------------------


def test_a_client_claiming_loopback_in_a_proxy_header_is_not_trusted(
    test_app: cronbase.App,
) -> None:
    """Mounted in an app whose server believes its proxy's X-Forwarded-For (as uvicorn does from
    127.0.0.1 by default), a header naming 127.0.0.1 would make any client look local."""
    test_app.tasks["send_email"].defer(to="secret@b.c")
    outer = Starlette(routes=[Mount("/ops", create_app(test_app))])
    with (
        serving(outer, test_app, proxy_headers=True, forwarded_allow_ips="*") as url,
        httpx.Client(base_url=url, timeout=30) as http,
    ):
        assert http.get("/ops/jobs").status_code == 200  # this machine, no proxy
        for header in ("X-Forwarded-For", "X-Real-IP", "Forwarded"):
            value = "for=127.0.0.1" if header == "Forwarded" else "127.0.0.1"
            claimed = http.get("/ops/jobs", headers={header: value})
            assert claimed.status_code == 403, header
            assert "secret@b.c" not in claimed.text
            assert f"came through a proxy (its {header.lower()} header)" in claimed.text
            assert_page_headers(claimed)


def test_the_server_takes_forwarded_headers_from_a_trusted_proxy_only(
    database_url: str, tmp_path: Path, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    """The audit log's actor names the client's address: a header may name it only when it
    comes from a proxy given with --trusted-proxy (not from uvicorn's FORWARDED_ALLOW_IPS)."""
    env = {"CRONBASE_DASHBOARD_TOKEN": TOKEN, "FORWARDED_ALLOW_IPS": "*"}
    test_app.tasks["send_email"].defer(to="a@b.c")
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for args, actor in [
        ((), "token@127.0.0.1"),
        (("--trusted-proxy", "127.0.0.1"), "token@198.51.100.7"),
    ]:
        with running_dashboard(database_url, tmp_path / "proxy.log", *args, **env) as server:
            headers = {**bearer, "Origin": server.url}
            with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
                token = csrf_token(http.get("/").text)
                paused = http.post(
                    "/queues/pause",
                    data={"queue": "emails", "csrf_token": token},
                    headers={"X-Forwarded-For": "198.51.100.7"},
                )
                assert paused.status_code == 303, paused.text
        assert audit_rows(db)[-1] == (actor, "queue.pause", "queue:emails")


# -- the command's refusals ------------------------------------------------------------------------


REFUSED_STARTS = [
    pytest.param(
        ["--trusted-proxy", "10.0.0.1"],
        "error: refusing to trust proxy 10.0.0.1 without credentials: behind a proxy every "
        "client looks local;",
        id="trusted-proxy-without-credentials",
    ),
    pytest.param(
        ["--trusted-proxy", "proxy.internal", "--token", TOKEN],
        "error: trusted proxy 'proxy.internal' is not an address or a network",
        id="trusted-proxy-name",
    ),
    pytest.param(
        ["--user", "ops", "--password", "hunter2"],
        "error: dashboard password is 7 characters; use at least 16",
        id="short-password",
    ),
    pytest.param(
        ["--allowed-host", "http://dash.example/"],
        "error: allowed host 'http://dash.example/' is not a host name or an address",
        id="allowed-host-url",
    ),
    pytest.param(
        ["--keyfile", "key.pem"],
        "error: a TLS key (key.pem) needs its certificate: give --certfile",
        id="key-without-certificate",
    ),
    pytest.param(
        ["--certfile", "/nonexistent/cert.pem"],
        "error: cannot load the TLS certificate /nonexistent/cert.pem: no such file or directory",
        id="missing-certificate",
    ),
]


@pytest.mark.parametrize(("args", "message"), REFUSED_STARTS)
def test_the_command_refuses_to_start_with_one_line(
    database_url: str, args: list[str], message: str
) -> None:
    from tests.browser.conftest import CRONBASE, REPO, cli_env

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
    assert lines[0].startswith(message), lines[0]


def test_a_short_password_is_refused_as_a_short_token_is() -> None:
    with pytest.raises(cronbase.ConfigurationError, match="password is 15 characters"):
        Credentials(user="ops", password="x" * 15)
    assert Credentials(user="ops", password="x" * 16).password == "x" * 16


# -- TLS ---------------------------------------------------------------------------------------------


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (openssl, as Debian ships it)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the TLS test needs the openssl command (apt-get install -y openssl)")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return cert, key


def test_the_dashboard_serves_https_with_certfile_and_keyfile(
    database_url: str, tmp_path: Path, certificate: tuple[Path, Path], test_app: cronbase.App
) -> None:
    cert, key = certificate
    trusted = ssl.create_default_context(cafile=str(cert))
    args = ("--certfile", str(cert), "--keyfile", str(key))
    with running_dashboard(database_url, tmp_path / "tls.log", *args) as server:
        assert server.url.startswith("https://")
        with httpx.Client(base_url=server.url, verify=trusted, timeout=30) as http:
            page = http.get("/jobs")
            assert page.status_code == 200
            # The CSRF cookie is sent back over HTTPS only.
            assert "Secure" in page.headers["set-cookie"]
            paused = http.post(
                "/queues/pause",
                data={"queue": "emails", "csrf_token": csrf_token(page.text)},
                headers={"Origin": server.url},
            )
            assert paused.status_code == 303
        with pytest.raises(httpx.RemoteProtocolError):  # plain HTTP on the TLS port
            httpx.get(server.url.replace("https:", "http:") + "/", timeout=10)
    assert f"on {server.url}/ without credentials" in server.output()


# -- hostile input: a 400 (or 404) naming the value, never a 500 -----------------------------------


HOSTILE_GETS = [
    ("/jobs?q=%00", 400, "the query parameter 'q' contains a NUL character"),
    ("/jobs?queue=a%00b", 400, "the query parameter 'queue' contains a NUL character"),
    ("/jobs?task=%00", 400, "the query parameter 'task' contains a NUL character"),
    ("/dead?task=%00", 400, "the query parameter 'task' contains a NUL character"),
    ("/scheduled?queue=%00", 400, "the query parameter 'queue' contains a NUL character"),
    ("/jobs?%00=1", 400, "the query parameter '\\x00' contains a NUL character"),
    ("/jobs?page=" + "9" * 5000, 400, "page must be a whole number from 1 to 1000000, got '999"),
    ("/jobs?page=1_0", 400, "page must be a whole number from 1 to 1000000, got '1_0'"),
    ("/long-running?minutes=nan", 400, "minutes must be a number of 0 or more, got 'nan'"),
    ("/tasks?window=%E2%80%AE", 400, "window must be one of"),
    ("/jobs/" + "9" * 5000, 404, "Not Found"),
    ("/jobs/9223372036854775808", 404, "no job with id 9223372036854775808"),
    ("/jobs/9223372036854775808/live", 404, "no job with id 9223372036854775808"),
    ("/static/%00", 404, "Not Found"),
    ("/static/..%2f..%2fpyproject.toml", 404, "Not Found"),
]


def test_hostile_query_strings_and_paths_are_answered_with_one_line(
    client: httpx.Client, dashboard: Dashboard, test_app: cronbase.App
) -> None:
    test_app.tasks["send_email"].defer(to="a@b.c")
    for path, status, message in HOSTILE_GETS:
        response = client.get(path)
        assert response.status_code == status, (path, response.text[:300])
        assert_page_headers(response)
        assert message in one_line(response.text), (path, one_line(response.text)[:200])
    # A count in a notice is a figure, whatever its length.
    assert client.get("/?done=requeued&count=" + "9" * 5000).status_code == 200
    assert "Traceback" not in dashboard.output()
    assert "DataError" not in dashboard.output()


def test_hostile_form_fields_are_a_400_naming_them_and_change_nothing(
    client: httpx.Client, dashboard: Dashboard, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    job_id = test_app.tasks["send_email"].defer(to="a@b.c")
    test_app.schedules.add(
        "build_report", key="weekly:sales", cron="0 8 * * 1", payload={"team": "s"}
    )
    seeded = audit_rows(db)  # the schedule's own (actor api)
    token = form_token(client)
    posts = [
        ("/schedules/pause", {"key": "weekly\x00sales"}, "the form field 'key' contains a NUL"),
        ("/schedules/run-now", {"key": "x" * 1001}, "schedule key is 1001 characters long"),
        ("/schedules/resume", {"key": "nosuch"}, "no schedule with key 'nosuch'"),
        ("/dead/requeue", {"task": "\x00"}, "the form field 'task' contains a NUL"),
        ("/queues/pause", {"queue": "emails\x00"}, "the form field 'queue' contains a NUL"),
        ("/queues/pause", {"queue": "<script>"}, "invalid queue name '<script>'"),
        ("/queues/limit", {"queue": "emails", "max_running": "9" * 5000}, "limit '999"),
        ("/queues/limit", {"queue": "emails", "max_running": "4294967296"}, "at least 1, got"),
        ("/queues/rate", {"queue": "emails", "rate": "1/99999999999999 days"}, "out of range"),
        ("/queues/rate", {"queue": "emails", "rate": "9" * 5000 + "/minute"}, "is not a rate"),
        ("/queues/aging", {"queue": "emails", "aging": "9" * 5000}, "is not a duration"),
        ("/queues/aging", {"queue": "emails", "aging": "9" * 15 + "w"}, "longer than a duration"),
        ("/jobs/bulk", {"action": "retry", "ids": "9" * 20}, "a job id must be a whole number"),
        ("/jobs/bulk", {"action": "retry", "ids": "1_0"}, "got '1_0'"),
        ("/jobs/bulk", {"action": "retry", "ids": "-1"}, "got '-1'"),
        ("/jobs/bulk", {"action": "\x00"}, "the form field 'action' contains a NUL"),
        ("/jobs/bulk", {"action": "retry", "ids\x00": "1"}, "the form field 'ids\\x00'"),
        (f"/jobs/{'9' * 19}/retry", {}, "no job with id 9999999999999999999"),
    ]
    for path, data, message in posts:
        response = client.post(path, data={**data, "csrf_token": token})
        expected = 404 if "no job" in message or "no schedule" in message else 400
        assert response.status_code == expected, (path, data, response.text[:300])
        assert_page_headers(response)
        shown = one_line(response.text)
        assert message in shown, (path, shown[:300])
    # A body past the bound is refused before it is read.
    huge = client.post("/jobs/bulk", data={"action": "retry", "ids": "1" * 300_000})
    assert huge.status_code == 413
    assert_page_headers(huge)
    assert db.execute(
        "SELECT status FROM cronbase.jobs_all WHERE id = %s", [job_id]
    ).fetchone() == ("queued",)
    assert not test_app.schedules.get("weekly:sales").is_paused
    assert db.execute("SELECT count(*) FROM cronbase.queues").fetchone() == (0,)
    assert audit_rows(db) == seeded == [("api", "schedule.add", "schedule:weekly:sales")]
    assert "Traceback" not in dashboard.output()


# -- every error carries the headers of a page ------------------------------------------------------


def test_every_error_carries_the_headers_of_a_page(
    client: httpx.Client, test_app: cronbase.App
) -> None:
    # A 500 first: a page that fails, served as an operator would, by uvicorn. Starlette answers
    # it from its outermost layer, outside any middleware a Starlette app is given.
    async def broken(limit: int = 0) -> list[Any]:
        raise RuntimeError("the audit log is broken")

    test_app.audit.list_async = broken  # type: ignore[method-assign]
    web = create_app(test_app, auth=Credentials(token=TOKEN))
    with serving(web, test_app) as url:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        failed = httpx.get(url + "/audit", headers=bearer, timeout=30)
        unauthenticated = httpx.get(url + "/audit", timeout=30)
    assert failed.status_code == 500
    assert_page_headers(failed)
    assert one_line(failed.text).startswith("500 Internal Server Error: the dashboard failed")
    assert "broken" not in failed.text
    assert unauthenticated.status_code == 401
    assert_page_headers(unauthenticated)

    errors = {
        404: client.get("/nosuch"),
        405: client.get("/queues/pause"),
        403: client.post("/queues/pause", headers={"Origin": "http://attacker.example"}),
        400: client.get("/", headers={"Host": "attacker.example"}),
    }
    for status, response in errors.items():
        assert response.status_code == status
        assert_page_headers(response)
    assert errors[405].headers["allow"] == "POST"


# -- pages stay small ---------------------------------------------------------------------------------


def test_list_pages_show_a_bounded_preview_and_the_job_page_the_whole_payload(
    client: httpx.Client, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    big = {"to": "x" * 500_000}
    send = test_app.tasks["send_email"]
    first, second = send.defer(**big), send.defer(**big)
    later = send.configure(delay=timedelta(hours=1)).defer(**big)
    test_app.schedules.add("send_email", key="big", cron="0 8 * * 1", payload=big)
    db.execute(
        "INSERT INTO cronbase.effects (key, status, owner, job_id, result, finished_at)"
        " VALUES ('big', 'done', gen_random_uuid(), %s, %s, now())",
        [first, Jsonb(big)],
    )
    db.execute(
        "INSERT INTO cronbase.audit_log (actor, action, target, detail) VALUES"
        " ('ops', 'job.retry', 'job:1', %s)",
        [Jsonb(big)],
    )
    for path in ("/jobs", "/jobs?queue=emails", "/scheduled", "/schedules", "/effects", "/audit"):
        page = client.get(path)
        assert page.status_code == 200, path
        assert len(page.content) < 40_000, (path, len(page.content))
    listed = client.get("/jobs").text
    row = listed.split(f'data-job="{first}"')[1].split("</tr>")[0]
    assert "{&#34;to&#34;: &#34;xxxx" in row
    assert "…" in row
    assert f'data-job="{later}"' in client.get("/scheduled").text
    # The job's own page has all of it, once.
    whole = client.get(f"/jobs/{second}")
    assert whole.status_code == 200
    assert whole.text.count("x" * 500_000) == 1


def test_a_running_job_page_refreshes_only_what_changes(
    client: httpx.Client, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    job_id = test_app.tasks["send_email"].defer(to="x" * 500_000)
    db.execute(
        "UPDATE cronbase.jobs SET status = 'running', attempts = 1, locked_by = 'w',"
        " started_at = now(), locked_until = now() + interval '1 minute',"
        " lease_token = gen_random_uuid(), progress = 40, stage = 'sending' WHERE id = %s",
        (job_id,),
    )
    page = client.get(f"/jobs/{job_id}").text
    live = re.search(r'<div id="job-live" hx-get="([^"]+)" hx-trigger="every 2s"', page)
    assert live, "a running job's page polls"
    assert live.group(1) == f"/jobs/{job_id}/live"
    refreshed = client.get(live.group(1), headers={"HX-Request": "true"})
    assert refreshed.status_code == 200
    assert len(refreshed.content) < 20_000
    assert "x" * 1000 not in refreshed.text
    assert 'id="job-status"' in refreshed.text
    assert "40% · sending" in refreshed.text
    assert 'id="job-more"' in refreshed.text  # the attempts and the result, out of band
    db.execute(
        "UPDATE cronbase.jobs SET status = 'succeeded', finished_at = now(), locked_by = NULL,"
        """ locked_until = NULL, lease_token = NULL, result = '"sent"' WHERE id = %s""",
        (job_id,),
    )
    done = client.get(live.group(1)).text
    assert "hx-trigger" not in done  # finished: the polling stops
    assert "&#34;sent&#34;" in done


# -- a queue nothing uses -------------------------------------------------------------------------------


def test_the_dashboard_refuses_a_queue_nothing_uses_as_the_command_does(
    client: httpx.Client, test_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    token = form_token(client)
    for path, extra in [
        ("/queues/pause", {}),
        ("/queues/resume", {}),
        ("/queues/limit", {"max_running": "5"}),
        ("/queues/rate", {"rate": "10/minute"}),
        ("/queues/aging", {"aging": "5m"}),
    ]:
        refused = client.post(path, data={"queue": "emials", "csrf_token": token, **extra})
        assert refused.status_code == 400, path
        message = one_line(refused.text)
        assert message.startswith(
            "no task, job or worker uses queue 'emials' (known queues: default, emails, "
            "reports, slow); the dashboard sets up no queue ahead"
        ), message
    assert db.execute("SELECT count(*) FROM cronbase.queues").fetchone() == (0,)
    assert audit_rows(db) == []
    # A queue of the app's tasks, of a job, or of a worker is one to act on.
    db.execute(
        "INSERT INTO cronbase.workers (id, hostname, pid, queues, concurrency, last_seen_at)"
        " VALUES ('w1', 'web-1', 1, ARRAY['imports'], 1, now())"
    )
    test_app.tasks["send_email"].configure(queue="bulk").defer(to="a@b.c")
    for queue in ("reports", "imports", "bulk"):
        done = client.post("/queues/pause", data={"queue": queue, "csrf_token": token})
        assert done.status_code == 303, (queue, done.text)
    assert [t for _, _, t in audit_rows(db)] == ["queue:reports", "queue:imports", "queue:bulk"]
