"""Statements you can read: docs/statements.sql is every statement as PostgreSQL receives it,
and stays current; ``cronbase sql`` prints them for a schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from cronbase.cli import main
from cronbase.operations.statements import as_file, rendered

REPO = Path(__file__).resolve().parents[2]


def test_the_checked_in_statements_are_current() -> None:
    written = (REPO / "docs" / "statements.sql").read_text("utf-8")
    assert written == as_file(), (
        "docs/statements.sql is stale: python -m cronbase.operations.statements --write "
        "docs/statements.sql"
    )
    # Final text: no fragment left to include, no variant marker, the schema written in.
    assert "/* include:" not in written
    assert "/* in_queues */" not in written
    assert "{schema}" not in written
    assert '"cronbase".claim_tickets(%(worker)s' in rendered()["claim_jobs"]


def test_cronbase_sql_prints_a_statement_for_the_schema(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--schema", "other", "sql", "claim_fair_jobs_in_queues"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("-- name: claim_fair_jobs_in_queues\n")
    assert '"other".jobs' in out
    assert "= ANY (%(queues)s::text[])" in out


def test_an_unknown_statement_is_one_line_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sql", "claim_jobz"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("error: no statement 'claim_jobz'; known: ")
