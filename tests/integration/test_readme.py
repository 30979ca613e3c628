"""The README's promises, run: its opening commands, its blocks, its links into the site.

The README is the front door (at most ~200 lines); the site in docs/ is the house, its blocks
run by test_docs.py. Markers before a block work as there (``doc_blocks.py``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg

from tests.integration.doc_blocks import REPO, Block, blocks, check, run_commands, run_script

README = REPO / "README.md"


def run(language: str) -> list[Block]:
    return [b for b in blocks(README) if b.marker is None and b.language == language]


def test_readme_opens_with_the_two_commands_and_ci_runs_the_test_one() -> None:
    text = README.read_text("utf-8")
    first = blocks(README)[0]
    title, *tagline = text[: text.index("```")].strip().splitlines()
    assert title == "# cronbase"
    assert len(" ".join(tagline)) <= 120, tagline  # one sentence, then the commands
    assert (first.marker, first.language) == (None, "sh")
    commands = [line.partition("#")[0].strip() for line in first.body.splitlines()]
    assert commands == ["make demo", "make test"]
    makefile = (REPO / "Makefile").read_text("utf-8")
    for target in ("demo", "test", "docs", "docs-serve"):
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), target
    ci = (REPO / ".ci" / "run").read_text("utf-8")
    runs = [line for line in ci.splitlines() if line.rstrip().endswith(" make test")]
    assert len(runs) == 2, runs  # on the embedded PostgreSQL, then on Debian's PostgreSQL 15


def test_readme_is_a_front_door() -> None:
    assert len(README.read_text("utf-8").splitlines()) <= 200


def test_readme_links_resolve() -> None:
    text = README.read_text("utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if not link.startswith("http")]
    assert any(link.startswith("docs/") for link in local)
    missing = [link for link in local if not (REPO / link).exists()]
    assert not missing, missing


def test_every_block_but_the_two_commands_is_run_or_checked() -> None:
    for block in blocks(README)[1:]:
        check(block)


def test_python_blocks_run(database_url: str, db: psycopg.Connection[Any], tmp_path: Path) -> None:
    printed = run_script(run("python"), database_url, tmp_path)
    # The handler's line, then what the comment says the print shows.
    assert printed.splitlines() == ["sending invoice 812", "succeeded"]
    assert db.execute("SELECT task, status FROM cronbase.jobs_all").fetchall() == [
        ("send_invoice", "succeeded")
    ]


def test_command_block_runs(database_url: str, db: psycopg.Connection[Any]) -> None:
    run_commands(run("console"), database_url)
    assert db.execute("SELECT status FROM cronbase.jobs_all").fetchall() == [("cancelled",)]
