"""examples/hooks.py runs as docs/guides/hooks.md says, and prints what its comments promise."""

from __future__ import annotations

import re
from typing import Any

import psycopg

from tests.e2e.harness import run_example
from tests.e2e.test_cli import cli_env


def test_the_hooks_example_counts_outcomes_and_logs_with_the_job(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    result = run_example("hooks", cli_env(database_url))
    assert (
        result.stdout.splitlines()[-1] == "{'import_orders dead': 1, 'import_orders succeeded': 1}"
    )
    ids = dict(db.execute("SELECT payload->>'tenant', id FROM cronbase.jobs_all").fetchall())
    lines = result.stderr.splitlines()
    for tenant, day in (("acme", "2026-02-27"), ("globex", "2026-02-30")):
        expected = (
            f"shop.imports [job {ids[tenant]} attempt 1]: importing orders of {day} for {tenant}"
        )
        assert expected in lines, lines
    assert any(re.search(r"ValueError: no such day: 2026-02-30", line) for line in lines)
