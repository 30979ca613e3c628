"""The front ends (the command, the dashboard, Django's admin) act through the library: no
statement run by them, no audit row written by them. import-linter forbids importing the
statements and the audit writer (pyproject.toml); this checks they reach neither through an App
either (``app.queries.x``, ``app.db.fetch_all(...)``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import cronbase

PACKAGE = Path(cronbase.__file__).parent
FRONT_ENDS = ("cli", "dashboard", "contrib")
# What only the library uses: the named statements, running them, writing audit rows.
FORBIDDEN = {"queries", "fetch_all", "fetch_one", "fetch_all_async", "fetch_one_async", "rows",
             "rows_async", "insert_audit", "record", "record_async"}  # fmt: skip
# Not a front end acting: Django's Database adapter, whose reads go through Django's connection
# inside atomic() (it overrides Database.fetch_all).
ADAPTERS = {"contrib/django/database.py"}
# Names that mean something else there: OpenTelemetry's Histogram.record, not the audit writer.
HOMONYMS = {("contrib/opentelemetry_metrics.py", "record")}


def attributes(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    return [(n.lineno, n.attr) for n in ast.walk(tree) if isinstance(n, ast.Attribute)]


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_front_ends_run_no_statement_and_write_no_audit_row(front_end: str) -> None:
    files = [
        path
        for path in sorted((PACKAGE / front_end).rglob("*.py"))
        if str(path.relative_to(PACKAGE)) not in ADAPTERS
    ]
    assert files
    found = [
        f"{path.relative_to(PACKAGE)}:{line} .{name}"
        for path in files
        for line, name in attributes(path)
        if name in FORBIDDEN and (str(path.relative_to(PACKAGE)), name) not in HOMONYMS
    ]
    assert found == [], "front ends act through the library's calls:\n" + "\n".join(found)
