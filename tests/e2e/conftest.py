"""Fixtures of the tests that run worker processes (tests/e2e/worker_app.py)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import cronbase
from tests.e2e.harness import WorkerProcesses, processes_of, reset_test_tables
from tests.e2e.worker_app import make_app


@pytest.fixture
def workers(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> Iterator[WorkerProcesses]:
    reset_test_tables(db)
    with WorkerProcesses(database_url, tmp_path) as processes:
        yield processes


@pytest.fixture
def tasks(database_url: str, db: psycopg.Connection[Any]) -> Iterator[cronbase.App]:
    """The worker processes' app, on the test database, for deferring its tasks."""
    app = make_app(database_url)
    yield app
    app.close()


@pytest.fixture
def supervisors(workers: WorkerProcesses) -> Iterator[WorkerProcesses]:
    """``workers``, and at the end no worker process of theirs left behind (SIGKILL)."""
    yield workers
    for process in workers.started:
        for pid in processes_of(process.pid):
            os.kill(pid, signal.SIGKILL)
