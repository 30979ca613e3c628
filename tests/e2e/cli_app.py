"""A small app for the CLI tests: ``cronbase --app tests.e2e.cli_app:app ...``."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import cronbase

app = cronbase.App()  # the database from CRONBASE_DATABASE_URL, which the tests set


@app.task
def record(n: int) -> None:
    """Appends ``n`` to the file named by CLI_TEST_RECORD, so a test sees what ran."""
    with open(os.environ["CLI_TEST_RECORD"], "a") as out:
        out.write(f"{n}\n")


@app.task(max_attempts=1)
def explode(message: str) -> None:
    raise RuntimeError(message)


@app.task
def stubborn(marker: str) -> None:
    """A sync handler that ignores shutdown: it runs on after the worker has stopped."""
    Path(marker).touch()
    threading.Event().wait(600)
