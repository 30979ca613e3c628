"""examples/flow_control.py runs as its guide says, and its limits held."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.e2e.harness import run_example
from tests.e2e.test_cli import cli_env


def test_the_flow_control_example_keeps_its_limits(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    result = run_example("flow_control", cli_env(database_url))
    assert result.stdout.splitlines() == [
        "digests: at most 1 at once",
        "exports: at most 3 at once",
        "tenant 1: at most 1 at once",
        "tenant 2: at most 1 at once",
        "tenant 3: at most 1 at once",
        "api calls: 25, at most 10 in any second",
        "took at least 2 s: True",
    ]
    assert db.execute(
        "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'succeeded'"
    ).fetchone() == (15 + 12 + 25 + 1,)
