"""cronbase.defer() (migration 0023, docs/reference/sql.md): a job deferred from SQL is the row
Python's defer writes, with the same checks and the same NOTIFY; deferred from psql and from a
Node script (examples/node/defer.mjs), it is run by the Python worker."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

import cronbase
from cronbase.db.grants import INTERFACE_PRIVILEGES

REPO = Path(__file__).resolve().parents[2]
NODE_EXAMPLES = REPO / "examples" / "node"
# The columns a defer writes (the rest are the engine's own: ids, times, ready_xid).
WRITTEN = (
    "task, queue, payload, status, priority, max_attempts, lease, idempotency_key, dedupe_key,"
    " task_version, attempts, metadata, flow_key"
)


def run_burst(app: cronbase.App) -> None:
    worker = app.worker(burst=True, install_signal_handlers=False, schedule=False, retention=None)
    asyncio.run(worker.run())


def row(db: psycopg.Connection[Any], job_id: int) -> tuple[Any, ...]:
    found = db.execute(f"SELECT {WRITTEN} FROM cronbase.jobs WHERE id = %s", [job_id]).fetchone()
    assert found is not None, f"no job {job_id}"
    return tuple(found)


def sql_defer(db: psycopg.Connection[Any], call: str, *params: Any) -> int:
    found = db.execute(f"SELECT cronbase.defer({call})", params).fetchone()
    assert found is not None
    return int(found[0])


def test_a_job_deferred_from_sql_is_the_row_python_writes(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def send_email(to: str, cc: list[str] | None = None) -> None:
        pass

    args = {"to": "a@example.com", "cc": ["b@example.com"]}
    options = {"queue": "emails", "priority": 5, "max_attempts": 3, "lease": timedelta(minutes=5)}
    from_python = send_email.configure(**options).defer(**args)
    from_sql = sql_defer(
        db,
        "%s, %s::jsonb, queue => 'emails', priority => 5, max_attempts => 3,"
        " lease => interval '5 minutes'",
        send_email.name,
        json.dumps(args),
    )
    assert row(db, from_sql) == row(db, from_python)
    # The defaults are a task's defaults: queue default, priority 100, 20 attempts, 1 minute.
    plain_python = send_email.defer(to="c@example.com")
    plain_sql = sql_defer(db, '%s, \'{"to": "c@example.com"}\'', send_email.name)
    assert row(db, plain_sql) == row(db, plain_python)
    # Later: run_at, or delay, in the database's clock.
    later = sql_defer(db, "%s, delay => interval '1 hour'", send_email.name)
    ahead = db.execute(
        "SELECT run_at - now() BETWEEN interval '59 minutes' AND interval '61 minutes'"
        " FROM cronbase.jobs WHERE id = %s",
        [later],
    ).fetchone()
    assert ahead == (True,)


def test_keys_are_shared_with_python(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    @app.task
    def charge(order: int) -> None:
        pass

    first = sql_defer(db, "%s, '{\"order\": 7}', idempotency_key => 'charge:7'", charge.name)
    assert charge.configure(idempotency_key="charge:7").defer(order=7) == first
    held = charge.configure(dedupe_key="charge:8").defer(order=8)
    assert sql_defer(db, "%s, '{\"order\": 8}', dedupe_key => 'charge:8'", charge.name) == held
    (count,) = db.execute("SELECT count(*) FROM cronbase.jobs").fetchone() or (0,)
    assert count == 2


def test_a_due_job_wakes_the_workers_as_pythons_defer_does(db: psycopg.Connection[Any]) -> None:
    db.execute("LISTEN cronbase_jobs")
    sql_defer(db, "'send_email', queue => 'emails'")
    sql_defer(db, "'send_email', queue => 'later', delay => interval '1 hour'")  # no NOTIFY
    sql_defer(db, "'send_email', queue => 'keyed', idempotency_key => 'k'")
    heard = [n.payload for n in db.notifies(timeout=5, stop_after=2)]
    assert heard == ["emails", "keyed"]
    assert list(db.notifies(timeout=0.5)) == []


# Each bad input as SQL arguments and as Python's defer gets it, and the words both refusals
# share: the bad value named.
REFUSED = [
    ("'bad name'", lambda t, a: a.task(name="bad name")(print), "'bad name'"),
    (
        "%(task)s, queue => 'no such'",
        lambda t, a: t.configure(queue="no such").defer(),
        "'no such'",
    ),
    ("%(task)s, '[1, 2]'", None, "must be a JSON object"),
    ("%(task)s, priority => 40000", lambda t, a: t.configure(priority=40000).defer(), "40000"),
    ("%(task)s, max_attempts => 0", lambda t, a: t.configure(max_attempts=0).defer(), "got 0"),
    (
        "%(task)s, run_at => now(), delay => interval '1 second'",
        None,
        "give run_at or delay, not both",
    ),
    ("%(task)s, delay => interval '-1 second'", None, "must be"),
    ("%(task)s, idempotency_key => ''", lambda t, a: t.configure(idempotency_key="").defer(), ""),
    ("%(task)s, task_version => 0", None, "task_version must be a whole number from 1 to 1000"),
    ("%(task)s, lease => interval '0'", lambda t, a: t.configure(lease=0).defer(), "lease must"),
]


@pytest.mark.parametrize(("call", "python", "named"), REFUSED)
def test_bad_input_is_refused_naming_it_and_writes_nothing(
    app: cronbase.App, db: psycopg.Connection[Any], call: str, python: Any, named: str
) -> None:
    @app.task
    def work() -> None:
        pass

    with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
        db.execute(f"SELECT cronbase.defer({call})", {"task": work.name})
    message = str(refused.value).splitlines()[0]
    assert named in message, message
    if python is not None:
        with pytest.raises((cronbase.ConfigurationError, ValueError)) as too:
            python(work, app)
        assert named in str(too.value), (message, str(too.value))
    assert db.execute("SELECT count(*) FROM cronbase.jobs").fetchone() == (0,)


def test_payloads_too_deep_or_too_big_are_refused_as_python_refuses_them(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def work(a: Any) -> None:
        pass

    def nested(levels: int) -> Any:
        value: Any = []
        for _ in range(levels - 1):
            value = [value]
        return value

    # The payload object is level 1: 99 levels of lists under it is 100, the most.
    deepest = {"a": nested(99)}
    assert sql_defer(db, "%s, %s::jsonb", work.name, json.dumps(deepest)) > 0
    assert work.defer(a=deepest["a"]) > 0
    deeper = json.dumps({"a": nested(100)})
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="deeper than 100 levels"):
        sql_defer(db, "%s, %s::jsonb", work.name, deeper)
    with pytest.raises(cronbase.PayloadError, match="100"):
        work.defer(a=nested(100))
    big = json.dumps({"a": "x" * (1024 * 1024)})
    with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="more than the 1,048,576"):
        sql_defer(db, "%s, %s::jsonb", work.name, big)
    with pytest.raises(cronbase.PayloadError, match="more than the 1,048,576 allowed"):
        work.defer(a="x" * (1024 * 1024))


def test_a_job_deferred_from_psql_is_run_by_the_python_worker(
    app: cronbase.App, database_url: str
) -> None:
    seen: list[str] = []

    @app.task(name="send_email", queue="emails")
    def send_email(to: str) -> None:
        seen.append(to)

    psql = shutil.which("psql")
    assert psql is not None, "psql is missing: make test installs postgresql-15's client"
    done = subprocess.run(
        [
            psql,
            database_url,
            "-X",
            "-v",
            "ON_ERROR_STOP=1",
            "-At",
            "-c",
            "SELECT cronbase.defer('send_email', '{\"to\": \"psql@example.com\"}',"
            " queue => 'emails')",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout.strip())
    run_burst(app)
    assert seen == ["psql@example.com"]
    assert app.jobs.get(job_id).status is cronbase.JobStatus.SUCCEEDED


def node(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("node")
    assert binary is not None, "node is missing: make test installs Debian's nodejs"
    assert (NODE_EXAMPLES / "node_modules" / "pg").is_dir(), (
        "examples/node has no node_modules: make test installs them (npm ci in examples/node)"
    )
    # libpq's variables, which node-postgres reads as psql does: the embedded server's URL
    # names a Unix socket's folder as a query parameter, which its URL parser does not take.
    given = conninfo_to_dict(database_url)
    names = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "dbname": "PGDATABASE"}
    env = {var: str(given[key]) for key, var in names.items() if given.get(key)}
    if given.get("password"):
        env["PGPASSWORD"] = str(given["password"])
    return subprocess.run(
        [binary, str(NODE_EXAMPLES / "defer.mjs"), *args],
        env={**env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_job_deferred_from_node_is_run_by_the_python_worker(
    app: cronbase.App, database_url: str
) -> None:
    seen: list[dict[str, Any]] = []

    @app.task(name="send_email", queue="emails")
    def send_email(to: str, cc: list[str]) -> None:
        seen.append({"to": to, "cc": cc})

    args = {"to": "node@example.com", "cc": ["x@example.com"]}
    done = node(database_url, "send_email", json.dumps(args), "emails")
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout.split()[-1])
    run_burst(app)
    assert seen == [args]
    assert app.jobs.get(job_id).status is cronbase.JobStatus.SUCCEEDED
    # A refusal reaches Node's caller with the value named, and writes nothing.
    refused = node(database_url, "bad name")
    assert refused.returncode == 1
    assert "invalid task name 'bad name'" in refused.stderr
    assert "SQLSTATE 22023" in refused.stderr


def test_the_interface_keeps_its_signature(db: psycopg.Connection[Any]) -> None:
    """What other languages call is versioned by its signature: a later migration may add a
    function, or an overload with more arguments, never change or drop this one (the reference
    page lists it, and the grant names it)."""
    found = db.execute(
        "SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',"
        " pg_get_function_result(p.oid), p.prosecdef"
        " FROM pg_proc p WHERE p.pronamespace = 'cronbase'::regnamespace"
        "  AND p.proname = 'defer'"
    ).fetchall()
    assert found == [
        (
            "defer(task text, args jsonb, queue text, priority integer, run_at timestamp with time"
            " zone, delay interval, max_attempts integer, lease interval, idempotency_key text,"
            " dedupe_key text, task_version integer)",
            "bigint",
            True,
        )
    ]
    # The other functions of the interface (migration 0024): test_sql_worker pins them.
    (granted,) = [name for name in INTERFACE_PRIVILEGES if name.startswith("defer(")]
    callable_as = db.execute("SELECT %s::regprocedure::text", [f"cronbase.{granted}"]).fetchone()
    assert callable_as is not None
    assert callable_as[0].startswith("cronbase.defer(text,jsonb,text,integer")
