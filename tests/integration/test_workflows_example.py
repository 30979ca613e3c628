"""examples/workflows.py runs as its guide says."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.e2e.harness import run_example
from tests.e2e.test_cli import cli_env


def test_the_workflows_example_ends_each_workflow_as_it_says(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    result = run_example("workflows", cli_env(database_url))
    assert result.stdout.splitlines() == [
        "report: 42 receipts for 2026-10",
        # jsonb keeps keys in its own order (shorter first), not the handler's.
        "{'rows': 100, 'total': 49500}",
        "invoice: {'paid': 120, 'charge': 'ch_812'}, charged 1 time(s), attempts 1",
    ]
    graph = db.execute(
        "SELECT count(*), count(DISTINCT workflow_id) FROM cronbase.jobs_all WHERE task = 'import_row'"
    ).fetchone()
    assert graph == (100, 1)
