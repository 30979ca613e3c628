"""The documentation site as a reader meets it: built strictly, served, opened in Chromium.

The front page leads to the tutorial, the guides, the reference and the explanation; a
reference page shows docstrings rendered by mkdocstrings and the command reference by
mkdocs-click; search finds a guide; llms.txt lists the pages. With
``CRONBASE_SCREENSHOTS=docs/screenshots`` (``make screenshots``) the front page and a
reference page are saved there.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import REPO, console_errors

TIMEOUT_MS = 30_000


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # the base names it format
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The site built by mkdocs (strict, as make docs builds it), served on a free port."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    mkdocs = Path(sys.executable).with_name("mkdocs")
    built = subprocess.run(
        [str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(out)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(30)


@pytest.fixture
def reader(browser: Browser, site: str) -> Iterator[Page]:
    context = browser.new_context(base_url=site, viewport={"width": 1360, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    opened = context.new_page()
    errors = console_errors(opened)
    yield opened
    context.close()
    assert errors == [], errors


def save(page: Page, name: str) -> None:
    folder = os.environ.get("CRONBASE_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(REPO / folder / name), full_page=False)


def test_front_page_leads_everywhere(reader: Page) -> None:
    reader.goto("/")
    expect(reader).to_have_title("cronbase")
    nav = reader.locator("nav.md-nav--primary")
    for section in ("Tutorial", "How-to guides", "Reference", "Explanation"):
        expect(nav.get_by_text(section, exact=True).first).to_be_attached()
    save(reader, "site-front-page.png")
    reader.get_by_role("link", name="The tutorial").first.click()
    expect(reader.locator("h1")).to_contain_text("Tutorial")
    # The tutorial's code is the example file, highlighted, with a copy button.
    expect(reader.locator("pre code", has_text="import cronbase").first).to_be_visible()


def test_reference_pages_are_generated(reader: Page) -> None:
    reader.goto("/reference/api/")
    # mkdocstrings rendered the App's docstring and its methods' signatures.
    expect(reader.locator('[id="cronbase.App"]')).to_be_attached()
    expect(reader.locator('[id="cronbase.App.task"]')).to_be_attached()
    save(reader, "site-reference-api.png")
    reader.goto("/reference/cli/")
    # mkdocs-click wrote a section per command, with its options.
    expect(reader.get_by_text("--shutdown-grace").first).to_be_attached()
    expect(reader.get_by_text("cronbase schedules run-now").first).to_be_attached()


def test_search_finds_a_guide(reader: Page) -> None:
    reader.goto("/")
    reader.locator("label.md-search__icon, .md-search__input").first.click()
    # Material builds its index in a web worker and drops a query typed before the worker
    # answers (on a busy machine that is seconds), and it searches on key events, which
    # fill() does not send: wait for its ready message, then type as a reader does.
    expect(reader.locator(".md-search-result__meta")).to_have_text(
        "Type to start searching", timeout=60_000
    )
    reader.locator("input.md-search__input").press_sequentially("transaction pooler")
    results = reader.locator(".md-search-result__item")
    expect(results.first).to_be_visible()
    expect(reader.locator(".md-search-result")).to_contain_text("Poolers")


def test_llms_txt_indexes_the_site(site: str) -> None:
    import urllib.request

    with urllib.request.urlopen(f"{site}/llms.txt", timeout=30) as response:
        index = response.read().decode()
    assert index.startswith("# cronbase"), index[:200]
    for page in ("tutorial", "guides/from-celery", "reference/cli", "explanation/how-jobs-run"):
        assert f"/{page}/" in index or f"/{page}.md" in index, page
    with urllib.request.urlopen(f"{site}/llms-full.txt", timeout=30) as response:
        full = response.read().decode()
    assert "idempotency_key" in full
