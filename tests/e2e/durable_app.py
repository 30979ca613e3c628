"""The durable tasks the workflow tests run in worker processes: ``python -m
tests.e2e.durable_app --worker-id A [options]`` (options as tests/e2e/worker_app.py's).

Every step writes a ``durable_runs`` row when it starts and another when it ends (the database's
clock_timestamp()), so a test sees which steps ran, where, how often, and whether a finished
step ever started again.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from typing import Any

import cronbase
from tests.e2e.worker_app import main

DURABLE_TABLE = """
CREATE TABLE IF NOT EXISTS durable_runs (
    id serial PRIMARY KEY, job_id bigint NOT NULL, what text NOT NULL, phase text NOT NULL,
    pid integer NOT NULL, value jsonb, at timestamptz NOT NULL DEFAULT clock_timestamp());
TRUNCATE durable_runs;
"""
# How long each of five_steps' steps takes: long enough for a test to kill its worker inside.
STEP_SECONDS = 0.4
SLEEP_SECONDS = 3.0


def make_durable_app(database_url: str | None = None) -> cronbase.App:
    app = cronbase.App(database_url=database_url)

    def note(what: str, phase: str, value: Any = None) -> None:
        job = cronbase.current_job()
        with app.pool().connection() as conn:
            conn.execute(
                "INSERT INTO durable_runs (job_id, what, phase, pid, value) "
                "VALUES (%s, %s, %s, %s, %s::jsonb)",
                (job.id, what, phase, os.getpid(), None if value is None else json.dumps(value)),
            )

    def slow_step(name: str, n: int) -> int:
        note(name, "start")
        time.sleep(STEP_SECONDS)
        note(name, "end")
        return n * 10

    @app.task(lease=timedelta(seconds=2))
    def five_steps() -> int:
        job = cronbase.current_job()
        total = 0
        for n in range(1, 6):
            total += job.step(f"step{n}", slow_step, f"step{n}", n)
        return total

    @app.task(lease=timedelta(seconds=2))
    def sleeper() -> str:
        job = cronbase.current_job()
        job.step("before", note, "before", "ran")
        job.sleep(timedelta(seconds=SLEEP_SECONDS))
        job.step("after", note, "after", "ran")
        return "woke"

    @app.task(lease=timedelta(seconds=2))
    def awaits_event(key: str) -> Any:
        job = cronbase.current_job()
        job.step("before", note, "before", "ran")
        payload = job.wait_for(key, timeout=timedelta(seconds=60))
        job.step("handled", note, "handled", "ran", payload)
        return payload

    @app.task(lease=timedelta(seconds=2))
    def square(n: int) -> int:
        time.sleep(0.002)
        return n * n

    @app.task(lease=timedelta(seconds=2))
    def gather(previous: list[int]) -> int:
        note("gather", "run", previous)
        return sum(previous)

    return app


if __name__ == "__main__":
    main(sys.argv[1:], make_durable_app)
