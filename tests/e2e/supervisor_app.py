"""The app the supervisor tests run: ``cronbase --app tests.e2e.supervisor_app:app worker
--processes N``.

worker_app's tasks, and ``exit_process`` (its worker process exits with the status given). While
the file named by ``SUPERVISOR_TEST_CRASH`` exists, a process that imports this module exits at
once with the status the file holds: a worker process that crashes at every start. The supervisor
imports it too, at its own start, before a test writes the file.
"""

from __future__ import annotations

import os
from pathlib import Path

import cronbase
from tests.e2e.worker_app import make_app

CRASH_FILE = "SUPERVISOR_TEST_CRASH"

_crash = os.environ.get(CRASH_FILE)
if _crash and Path(_crash).exists():
    os._exit(int(Path(_crash).read_text()))


def make_supervised_app(database_url: str | None = None) -> cronbase.App:
    """worker_app's tasks and ``exit_process`` (its database from the environment unless given)."""
    app = make_app(database_url)

    @app.task(max_attempts=1)
    def exit_process(status: int) -> None:
        """Ends its worker process at once, as a crash would (nothing handed back or written)."""
        os._exit(status)

    return app


app = make_supervised_app()
