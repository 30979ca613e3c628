"""The site's promises (docs/): every fenced block of every page is run or checked.

A page's Python blocks run, in order, as one script against a fresh database; its console
blocks run as commands, checking the output lines the page shows; its SQL blocks run in a
transaction rolled back; anything marked is checked as ``doc_blocks.py`` says.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cronbase.schedule.cron import Cron
from tests.integration.doc_blocks import REPO, Block, blocks, check, run_commands, run_script

DOCS = REPO / "docs"
PAGES = sorted(DOCS.rglob("*.md"))


def page_id(page: Path) -> str:
    return str(page.relative_to(DOCS))


def _ids(value: object) -> str:
    return page_id(value) if isinstance(value, Path) else ""


def runnable(language: str) -> list[tuple[Path, list[Block]]]:
    found = []
    for page in PAGES:
        run = [b for b in blocks(page) if b.marker is None and b.language == language]
        if run:
            found.append((page, run))
    return found


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_block_is_run_or_checked(page: Path) -> None:
    for block in blocks(page):
        check(block)


def test_the_pages_have_blocks_of_every_kind() -> None:
    """The checks above cannot pass vacuously: the site has excerpts, skipped blocks checked,
    and blocks run."""
    kinds = {(b.marker, b.language) for page in PAGES for b in blocks(page)}
    for kind in [("file", "python"), ("skip", "python"), ("skip", "console"), (None, "python")]:
        assert kind in kinds, kind
    for language in ("console", "sql", "crontab"):
        assert (None, language) in kinds, language


def check_tutorial(stdout: str, db: psycopg.Connection[Any]) -> None:
    printed = stdout.splitlines()
    # What the tutorial's comments say each print shows. The handlers' lines come from the burst
    # worker's threads, in any order and possibly interleaved, so they are only counted.
    assert printed[:2] == ["queued", "queued"]
    assert re.fullmatch(r"no job with id \d+", printed[2])
    statuses = [line for line in printed if line in ("queued", "succeeded", "failed")]
    assert statuses == ["queued", "queued", "succeeded", "queued", "failed", "succeeded"]
    assert "failed ConnectionError" in printed
    handled = [f"sending invoice {n}" for n in (812, 813, 814, 815, 817)] + ["refreshing prices"]
    handled += [
        f"report for sales: {s} (attempt 1)" for s in ("collecting", "rendering", "emailing")
    ]
    handled += ["charged invoice 812 (attempt 2)"]
    assert {line: stdout.count(line) for line in handled} == dict.fromkeys(handled, 1)
    assert "sending invoice 818" not in stdout  # rolled back with its transaction
    counted = db.execute("SELECT status, count(*) FROM cronbase.jobs_all GROUP BY status")
    # Still queued: the delayed invoice 816, and the two keyed jobs deferred after the worker ran.
    assert dict(counted.fetchall()) == {"succeeded": 8, "queued": 3}


def test_tutorial_shows_the_whole_example_it_runs() -> None:
    # Its commands run examples.invoices (--app examples.invoices:app): the same code.
    first = next(b for b in blocks(DOCS / "tutorial.md") if b.language == "python")
    assert first.marker is None
    assert first.body == (REPO / "examples" / "invoices.py").read_text("utf-8")


# What a page's script must have done, beyond exiting 0.
OUTCOMES: dict[str, Callable[[str, psycopg.Connection[Any]], None]] = {
    "tutorial.md": check_tutorial,
}


@pytest.mark.parametrize(("page", "run"), runnable("python"), ids=_ids)
def test_python_blocks_run(
    page: Path, run: list[Block], database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    printed = run_script(run, database_url, tmp_path)
    OUTCOMES.get(page_id(page), lambda *_: None)(printed, db)


def test_every_page_with_python_to_run_is_known() -> None:
    # A page whose blocks run should say what they do beyond exiting 0.
    assert {page_id(p) for p, _ in runnable("python")} == set(OUTCOMES)


@pytest.mark.parametrize(("page", "run"), runnable("console"), ids=_ids)
def test_console_blocks_run(
    page: Path, run: list[Block], database_url: str, db: psycopg.Connection[Any]
) -> None:
    run_commands(run, database_url)
    if page_id(page) == "tutorial.md":
        # Job 1 cancelled by the last command of step 7; the reminders' job of step 8 ran.
        rows = db.execute("SELECT id, task, status FROM cronbase.jobs_all ORDER BY id").fetchall()
        assert rows == [(1, "send_invoice", "cancelled"), (2, "send_reminders", "succeeded")]
        (declared,) = db.execute("SELECT key, cron, tz FROM cronbase.schedules").fetchall()
        assert declared == ("morning-reminders", "0 8 * * MON-FRI", "Europe/Berlin")


@pytest.mark.parametrize(("page", "run"), runnable("sql"), ids=_ids)
def test_sql_blocks_run(page: Path, run: list[Block], db: psycopg.Connection[Any]) -> None:
    for block in run:
        with db.transaction(force_rollback=True):
            db.execute(block.body.encode())


def test_crontab_line_runs_as_cron_would(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """The Schedules guide's crontab: its schedule parses, and its command runs under cron's
    bare environment."""
    ((page, (crontab,)),) = runnable("crontab")
    assert page_id(page) == "guides/schedules.md"
    lines = crontab.body.splitlines()
    variables = [line for line in lines if re.match(r"^\w+=", line)]
    jobs = [line for line in lines if line and line not in variables]
    assert [v.split("=")[0] for v in variables] == ["CRONBASE_DATABASE_URL"]
    assert len(jobs) == 1, jobs
    fields = jobs[0].split(None, 5)
    Cron.parse(" ".join(fields[:5]))
    # $HOME/cronbase is the user's project: here, links to this checkout's venv and examples.
    project = tmp_path / "cronbase"
    project.mkdir()
    (project / ".venv").symlink_to(sys.prefix)
    (project / "examples").symlink_to(REPO / "examples")
    # What cron gives a job: HOME, SHELL, a short PATH, plus the crontab's variable lines.
    env = {
        "HOME": str(tmp_path),
        "SHELL": "/bin/sh",
        "PATH": "/usr/bin:/bin",
        "CRONBASE_DATABASE_URL": database_url,
    }
    result = subprocess.run(
        ["/bin/sh", "-c", fields[5]],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    log = (tmp_path / "cronbase-tick.log").read_text()
    assert result.returncode == 0, log
    assert "tick:" in log
    declared = db.execute("SELECT key, task, tz FROM cronbase.schedules").fetchall()
    assert declared == [("nightly-cleanup", "cleanup", "Europe/Berlin")]
