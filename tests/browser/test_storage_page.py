"""The dashboard's Storage page and the storage metrics, over plain HTTP."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import psycopg
import pytest

import cronbase
from tests.browser.conftest import Dashboard, run_burst


@pytest.fixture
def client(dashboard: Dashboard) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=dashboard.url, timeout=30) as http:
        yield http


def test_the_storage_page_shows_every_table_and_what_holds_vacuum_back(
    client: httpx.Client, test_app: cronbase.App, database_url: str
) -> None:
    test_app.tasks["send_email"].defer(to="a@b.c")
    run_burst(test_app)
    page = client.get("/storage")
    assert page.status_code == 200, page.text
    for table in ("jobs", "jobs_history", "job_attempts", "job_keys", "workers"):
        assert f'<tr data-table="{table}">' in page.text
    assert re.search(r"<code>jobs_history</code> <small>\d+ partitions</small>", page.text)
    assert "<code>jobs</code> <small>" not in page.text  # the live table is not partitioned
    assert 'href="/storage"' in page.text  # in the navigation

    # A report left open under REPEATABLE READ keeps its snapshot, and vacuum's horizon with it.
    with psycopg.connect(database_url, application_name="<b>nightly-report</b>") as held:
        held.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        held.execute("SELECT count(*) FROM cronbase.jobs_all")
        page = client.get("/storage")
        row = re.search(r'<tr data-kind="session" class="oldest">(.*?)</tr>', page.text, re.S)
        assert row, page.text
        assert f">{held.info.backend_pid}<" in row.group(1)
        assert "&lt;b&gt;nightly-report&lt;/b&gt;" in row.group(1)  # escaped
        assert "idle in transaction" in row.group(1)
        metrics = client.get("/metrics").text
        age = re.search(r"^cronbase_oldest_xmin_age_seconds (\S+)$", metrics, re.M)
        assert age
        assert float(age.group(1)) > 0
        held.rollback()
    assert re.search(r'^cronbase_table_bytes\{part="heap",table="jobs_history"\} \d', metrics, re.M)
    assert re.search(r'^cronbase_table_rows\{state="dead",table="jobs"\} \d', metrics, re.M)
    assert "Nothing holds vacuum back." in client.get("/storage").text
