"""examples/steering.py runs as its guide says."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.e2e.harness import run_example
from tests.e2e.test_cli import cli_env


def test_the_steering_example_ends_each_job_as_it_says(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    result = run_example("steering", cli_env(database_url))
    assert result.stdout.splitlines() == [
        # jsonb keeps keys in its own order (shorter first), not the handler's.
        "export: succeeded, result {'rows': 1204, 'report_id': 7}, attempts 1, snoozes 2",
        "charge: cancelled, order 812 was refunded",
        "lookup: dead after 1 attempt, ValueError: not an email address: 'nobody'",
    ]
