"""With no database configured, the App starts the embedded server, migrates it, and says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import cronbase


def test_app_without_url_uses_the_embedded_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CRONBASE_DATABASE_URL", "DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    data = tmp_path / "data"
    # A child process, so the server it starts stops when it exits (pgserver's own bookkeeping).
    code = "\n".join(
        [
            "import logging, cronbase",
            "logging.basicConfig(level=logging.INFO)",
            "app = cronbase.App()",
            "noop = app.task(lambda: None, name='noop')",
            "job_id = noop.defer()",
            "print('job', job_id, app.jobs.get(job_id).status.value)",
        ]
    )
    env = {"CRONBASE_DATA_DIR": str(data), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr
    assert "job 1 queued" in done.stdout
    assert (data / "PG_VERSION").exists()
    lines = [line for line in done.stderr.splitlines() if "using the embedded PostgreSQL" in line]
    assert len(lines) == 1, done.stderr
    assert str(data) in lines[0]


def test_app_with_url_never_starts_a_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CRONBASE_DATA_DIR", str(tmp_path / "never"))
    app = cronbase.App(database_url="postgresql://nobody@/nodb?host=/nonexistent-dir")
    assert not app.is_embedded
    with pytest.raises(cronbase.DatabaseURLError, match="cannot connect to database"):
        app.jobs.get(1)
    assert not (tmp_path / "never").exists()
