"""Fixtures of the dashboard tests: a real ``cronbase dashboard`` process on the test database,
headless Chromium (Debian's, driven by Playwright), and the test app with burst workers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
import uvicorn
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

import cronbase
from tests.browser import dashboard_app
from tests.conftest import wait_for
from tests.e2e.harness import after_inherited

REPO = Path(__file__).resolve().parents[2]
CRONBASE = Path(sys.executable).with_name("cronbase")
APP = "tests.browser.dashboard_app:app"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 20_000

expect.set_options(timeout=TIMEOUT_MS)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cli_env(database_url: str, **extra: str) -> dict[str, str]:
    drop = ("DATABASE_URL", "CRONBASE_APP")
    env = {
        k: v for k, v in os.environ.items() if k not in drop and not k.startswith("CRONBASE_DASH")
    }
    env.update(CRONBASE_DATABASE_URL=database_url, PYTHONPATH=after_inherited(str(REPO)), **extra)
    return env


@dataclass
class Dashboard:
    url: str
    process: subprocess.Popen[str]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def running_dashboard(database_url: str, log: Path, *args: str, **env: str) -> Iterator[Dashboard]:
    """``cronbase dashboard`` on a free loopback port, ready to answer; stopped with SIGTERM.

    With ``--certfile`` among ``args`` it serves HTTPS (its readiness is asked unverified)."""
    assert CRONBASE.exists(), f"console script missing: {CRONBASE}"
    port = free_port()
    command = [str(CRONBASE), "--app", APP, "dashboard", "--port", str(port), *args]
    out: IO[str]
    with open(log, "w") as out:
        process = subprocess.Popen(
            command,
            env=cli_env(database_url, **env),
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    scheme = "https" if "--certfile" in args else "http"
    dashboard = Dashboard(f"{scheme}://127.0.0.1:{port}", process, log)

    def is_up() -> bool:
        if process.poll() is not None:
            pytest.fail(f"the dashboard exited with {process.returncode}:\n{dashboard.output()}")
        try:
            httpx.get(dashboard.url + "/static/dashboard.css", timeout=5, verify=False)
        except httpx.TransportError:
            return False
        return True

    try:
        wait_for(is_up, timeout=60, what="the dashboard to answer")
        yield dashboard
        process.terminate()
        assert process.wait(30) == 0, f"SIGTERM: exit {process.returncode}, not 0"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
        print(f"---- dashboard (exit {process.returncode}) ----\n{dashboard.output()}")


@pytest.fixture(scope="session")
def dashboard(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """The dashboard without credentials, on loopback (the default bind)."""
    log = tmp_path_factory.mktemp("dashboard") / "dashboard.log"
    with running_dashboard(database_url, log) as running:
        yield running


@contextlib.contextmanager
def serving(web: Any, app: cronbase.App, **config: Any) -> Iterator[str]:
    """``web`` (the dashboard, or an app it is mounted in) served by uvicorn on a free loopback
    port in a thread of its own, as ``uvicorn.Config(**config)`` sets it up; yields its URL and
    closes ``app``'s pools on that thread's loop when it stops."""
    port = free_port()
    options = {"lifespan": "off", "log_level": "warning", **config}
    server = uvicorn.Server(uvicorn.Config(web, host="127.0.0.1", port=port, **options))
    failures: list[BaseException] = []

    async def run() -> None:
        try:
            await server.serve()
        finally:
            await app.aclose()

    def main() -> None:
        try:
            asyncio.run(run())
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=main, daemon=True, name="test-uvicorn")
    thread.start()
    wait_for(lambda: server.started or not thread.is_alive(), timeout=30, what="uvicorn to start")
    assert server.started, failures
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        assert not thread.is_alive(), "uvicorn did not stop within 30 s"
        assert not failures, failures


def console_errors(opened: Page) -> list[str]:
    """The list that the page's console errors and uncaught exceptions are appended to."""
    errors: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    opened.on("console", on_console)
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    return errors


# Package scope, not session: Playwright's sync API keeps an event loop marked running on this
# thread until it stops, and the rest of the suite calls asyncio.run() on it.
@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the browser tests need Debian's chromium "
            "(apt-get install -y chromium)"
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, dashboard: Dashboard) -> Iterator[Page]:
    """A fresh browser context on the dashboard; confirms dialogs; fails on console errors."""
    context = browser.new_context(base_url=dashboard.url, viewport={"width": 1360, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    opened = context.new_page()
    errors = console_errors(opened)
    opened.on("dialog", lambda dialog: dialog.accept())
    yield opened
    context.close()
    # A Content-Security-Policy violation, a failed htmx request, a script error: all show here.
    assert errors == [], errors


@pytest.fixture
def test_app(database_url: str, db: Any) -> Iterator[cronbase.App]:
    """The dashboard app's tasks on the (emptied) test database."""
    dashboard_app.ALLOW_FLAKY.clear()
    dashboard_app.RELEASE_HOLD.clear()
    application = dashboard_app.make_app(database_url)
    yield application
    dashboard_app.RELEASE_HOLD.set()  # never leave a handler waiting
    application.close()


def run_burst(app: cronbase.App) -> None:
    """A burst worker, in its own thread (Playwright's sync API owns this thread's loop)."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            app.run_worker(burst=True, install_signal_handlers=False)
        except BaseException as exc:
            failures.append(exc)

    thread = start_thread(run)
    thread.join(60)
    assert not thread.is_alive(), "the burst worker did not finish within 60s"
    assert not failures, failures


def start_thread(target: Any) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True, name="test-burst-worker")
    thread.start()
    return thread


def audit_rows(db: Any) -> list[tuple[str, str, str]]:
    rows = db.execute("SELECT actor, action, target FROM cronbase.audit_log ORDER BY id")
    return [tuple(r) for r in rows.fetchall()]


def status_of(db: Any, job_id: int) -> str:
    row = db.execute("SELECT status FROM cronbase.jobs_all WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    return str(row[0])


def csrf_token(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)
