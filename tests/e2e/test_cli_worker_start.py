"""How ``cronbase worker`` starts, as a user runs it: the line that says it started names the
database in use (never its password), a connection flag the app's own App(...) overrides is said
once, and a metrics port that is taken fails the command before the worker starts."""

from __future__ import annotations

import socket
from typing import Any

import psycopg

from cronbase.db import pool
from tests.e2e.test_cli import APP, cronbase, job_rows, ok

ELSEWHERE = "postgresql://someone:secret@127.0.0.1:1/elsewhere"
OWN_APP = "tests.e2e.own_url_app:app"


def test_the_start_line_names_the_database_and_an_overridden_flag_is_said_once(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    own = {"CLI_OWN_DATABASE_URL": database_url}
    flags = ["--database-url", ELSEWHERE, "--app", OWN_APP]
    job_id = int(ok(cronbase(database_url, *flags, "enqueue", "ping", **own)))
    result = cronbase(database_url, *flags, "worker", "--burst", **own)
    ok(result)

    where = pool.describe(database_url)
    assert where.endswith("/" + str(db.info.dbname))
    said = [line for line in result.stderr.splitlines() if "--database-url" in line]
    assert len(said) == 1, result.stderr
    assert said[0].endswith(
        f"--database-url is ignored: app '{OWN_APP}' passes its own database_url to App(...), "
        f"so it uses {where}"
    )
    assert f" started on {where}: " in result.stderr
    assert "secret" not in result.stderr
    assert job_rows(db) == [(job_id, "ping", "succeeded", 1)]  # ran where the app said


def test_a_flag_the_app_does_not_override_is_not_mentioned(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    result = cronbase(
        database_url, "--database-url", database_url, "--app", APP, "worker", "--burst"
    )
    ok(result)
    assert "ignored" not in result.stderr
    assert f" started on {pool.describe(database_url)}: " in result.stderr


def test_a_busy_metrics_port_is_refused_before_the_worker_starts(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cronbase(database_url, "--app", APP, "worker", "--metrics-port", str(port))
    assert result.returncode == 2, result
    assert result.stderr.strip() == (
        f"error: cannot serve metrics on 127.0.0.1:{port}: Address already in use; pick another "
        "metrics port (--metrics-port / metrics_port), or stop what listens there"
    )
    assert db.execute("SELECT count(*) FROM cronbase.workers").fetchone() == (0,)
