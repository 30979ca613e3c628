"""Per-queue concurrency inside one worker: ``queues={"slow": 1, "fast": 3}`` (CLI
``--queue slow=1 --queue fast=3``). Long jobs of one queue cannot take the other's slots."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.cli.run import worker_queues
from tests.e2e.test_cli import cronbase as cronbase_cli


def most_at_once(spans: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = running = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


def test_each_queue_runs_at_most_its_own_number_and_a_busy_one_holds_back_no_other(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    spans: dict[str, list[tuple[float, float]]] = {"slow": [], "fast": []}
    lock = threading.Lock()
    fast_done_while_slow_ran: list[bool] = []

    def run(queue: str, seconds: float) -> None:
        start = time.monotonic()
        time.sleep(seconds)
        with lock:
            spans[queue].append((start, time.monotonic()))

    @app.task(queue="slow")
    def slow_job(n: int) -> None:
        run("slow", 0.3)

    @app.task(queue="fast")
    def fast_job(n: int) -> None:
        run("fast", 0.02)
        with lock:
            fast_done_while_slow_ran.append(len(spans["slow"]) < 4)

    slow_job.defer_many([{"n": n} for n in range(4)])
    fast_job.defer_many([{"n": n} for n in range(30)])
    app.run_worker(queues={"slow": 1, "fast": 3}, burst=True, install_signal_handlers=False)

    assert len(spans["slow"]) == 4
    assert len(spans["fast"]) == 30
    assert most_at_once(spans["slow"]) == 1
    assert most_at_once(spans["fast"]) == 3
    # The fast queue did not wait behind the slow one: all of it ran before the slow queue
    # (1.2 s of work at one at a time) was through.
    assert all(fast_done_while_slow_ran)


def test_worker_queues_from_the_command_line() -> None:
    assert worker_queues((), 10) is None
    assert worker_queues(("a", "b"), 10) == ["a", "b"]
    assert worker_queues(("a=5", "b"), 7) == {"a": 5, "b": 7}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("emails=many", "'emails=many': write a queue and its concurrency as Q=N"),
        ("emails=0", "'emails=0': a queue's concurrency is from 1 to 2,147,483,647"),
        ("bad name=2", "invalid queue name 'bad name'"),
    ],
)
def test_a_bad_queue_concurrency_is_a_one_line_error(
    database_url: str, value: str, message: str
) -> None:
    result = cronbase_cli(
        database_url, "worker", "--app", "tests.e2e.cli_app:app", "--burst", "--queue", value
    )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert message in lines[0]
