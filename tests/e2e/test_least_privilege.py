"""Least privilege, as a deployment runs it: an ``owner`` role migrates, ``cronbase grants app
--apply`` gives the ``app`` role what the library's statements need, and ``app`` enqueues, runs
workers, ticks schedules, takes effects, prunes, reads stats and serves the dashboard, but cannot
migrate, drop or truncate.

The second test proves the grants table (cronbase.db.grants) statement by statement: with the
grants every named statement of db/sql/*.sql passes PostgreSQL's permission checks (EXPLAIN runs
them without running the statement), and without any one of them some statement fails.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql

import cronbase as cronbase_api
from cronbase.db import migrate
from cronbase.db.grants import (
    FUNCTION_PRIVILEGES,
    SEQUENCE_PRIVILEGES,
    TABLE_PRIVILEGES,
    apply_grants,
    render_grants,
)
from cronbase.db.queries import Queries
from cronbase.operations.retention import Retention
from tests.conftest import wait_for
from tests.e2e.harness import (
    WorkerProcesses,
    is_registered,
    reset_test_tables,
    retention_round,
)
from tests.e2e.test_cli import CRONBASE, cli_env, ok
from tests.e2e.worker_app import make_app
from tests.servers import PostgresCluster, free_port
from tests.servers import make_cluster as make_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SCHEMA = "cronbase"
DATABASE = "least_privilege"
CLI_APP = "tests.e2e.cli_app:app"
# The worker processes' tables (tests/e2e/harness.py), created by the owner, used by app.
TEST_TABLES = ("test_events", "test_flags", "test_executions")
TEST_SEQUENCES = ("test_events_id_seq", "test_executions_id_seq")
DASHBOARD_PAGES = ("/", "/jobs", "/dead", "/long-running", "/schedules", "/effects", "/audit")


@dataclass
class Roles:
    """One database owned by ``owner``; ``app`` may connect and nothing else (yet)."""

    cluster: PostgresCluster
    owner_url: str
    app_url: str


def role_url(cluster: PostgresCluster, user: str, dbname: str = DATABASE) -> str:
    return f"postgresql://{user}@127.0.0.1:{cluster.port}/{dbname}"


def superuser_run(cluster: PostgresCluster, dbname: str, *statements: sql.Composable) -> None:
    with psycopg.connect(role_url(cluster, "postgres", dbname), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


@pytest.fixture
def roles(make_cluster: Callable[[], PostgresCluster]) -> Roles:
    cluster = make_cluster()
    owner, app, database = (sql.Identifier(n) for n in ("owner", "app", DATABASE))
    superuser_run(
        cluster,
        "postgres",
        sql.SQL("CREATE ROLE {} LOGIN").format(owner),
        sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE").format(app),
        sql.SQL("CREATE DATABASE {} OWNER {}").format(database, owner),
        # PUBLIC keeps no TEMP (nor CREATE) on the database: app may only connect.
        sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(database),
        sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(database, app),
    )
    # PostgreSQL 15 no longer grants CREATE on the public schema to PUBLIC; older ones do.
    superuser_run(cluster, DATABASE, sql.SQL("REVOKE CREATE ON SCHEMA public FROM PUBLIC"))
    return Roles(cluster, role_url(cluster, "owner"), role_url(cluster, "app"))


def cronbase(url: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """The console script as ``url``'s role (CRONBASE_DATABASE_URL)."""
    return subprocess.run(
        [str(CRONBASE), *args],
        env=cli_env(url, **extra),
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def fails(result: subprocess.CompletedProcess[str], code: int | None = None) -> str:
    """stderr of a command that must fail (with ``code``, when given)."""
    assert result.returncode != 0, f"exit 0\n{result.stdout}\n{result.stderr}"
    if code is not None:
        assert result.returncode == code, f"exit {result.returncode}\n{result.stderr}"
    return result.stderr


def migrate_as_owner_with_test_tables(roles: Roles) -> None:
    out = ok(cronbase(roles.owner_url, "migrate"))
    assert f"migrated to version {migrate.LATEST_VERSION}" in out
    with psycopg.connect(roles.owner_url, autocommit=True) as conn:
        reset_test_tables(conn)
        conn.execute(
            sql.SQL("GRANT SELECT, INSERT ON {} TO app").format(
                sql.SQL(", ").join(map(sql.Identifier, TEST_TABLES))
            )
        )
        conn.execute(
            sql.SQL("GRANT USAGE ON SEQUENCE {} TO app").format(
                sql.SQL(", ").join(map(sql.Identifier, TEST_SEQUENCES))
            )
        )


def scalar(url: str, query: str) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def table_grants(url: str, role: str) -> dict[str, set[str]]:
    """Every privilege ``role`` holds on each table of the schema (TRUNCATE included)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.relname, a.privilege_type FROM pg_class c"
            " CROSS JOIN LATERAL aclexplode(c.relacl) a"
            " WHERE c.relnamespace = %s::regnamespace AND a.grantee = %s::regrole",
            [SCHEMA, role],
        ).fetchall()
    found: dict[str, set[str]] = {}
    for table, privilege in rows:
        found.setdefault(table, set()).add(privilege)
    return found


def schema_snapshot(url: str) -> list[Any]:
    """What a migration could change: the schema's objects, their columns, the applied versions,
    the namespaces of the database."""
    with psycopg.connect(url, autocommit=True) as conn:
        return [
            conn.execute(
                "SELECT c.relname, c.relkind, c.relowner::regrole::text, c.relacl::text[],"
                " array_agg(a.attname || ':' || a.atttypid::regtype::text ORDER BY a.attnum)"
                " FROM pg_class c LEFT JOIN pg_attribute a ON a.attrelid = c.oid"
                " AND a.attnum > 0 AND NOT a.attisdropped"
                " WHERE c.relnamespace = %s::regnamespace GROUP BY 1, 2, 3, 4 ORDER BY 1",
                [SCHEMA],
            ).fetchall(),
            conn.execute("SELECT version, name FROM cronbase.migrations ORDER BY 1").fetchall(),
            conn.execute("SELECT nspname FROM pg_namespace ORDER BY 1").fetchall(),
        ]


def statuses(url: str) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT status, count(*) FROM cronbase.jobs_all GROUP BY 1").fetchall()
    return dict(rows)


@dataclass
class Dashboard:
    url: str
    process: subprocess.Popen[str]
    log: Path


@pytest.fixture
def dashboard_as_app(roles: Roles, tmp_path: Path) -> Iterator[Callable[[], Dashboard]]:
    """Starts ``cronbase dashboard`` as app on a free loopback port when called."""
    started: list[Dashboard] = []

    def start() -> Dashboard:
        port = free_port()
        log = tmp_path / "dashboard.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                [str(CRONBASE), "dashboard", "--port", str(port)],
                env=cli_env(roles.app_url),
                cwd=Path(__file__).resolve().parents[2],
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
        dashboard = Dashboard(f"http://127.0.0.1:{port}", process, log)
        started.append(dashboard)

        def answers() -> bool:
            if process.poll() is not None:
                pytest.fail(f"the dashboard exited {process.returncode}:\n{log.read_text()}")
            try:
                httpx.get(dashboard.url + "/static/dashboard.css", timeout=5)
            except httpx.TransportError:
                return False
            return True

        wait_for(answers, timeout=60, what="the dashboard to answer")
        return dashboard

    yield start
    for dashboard in started:
        if dashboard.process.poll() is None:
            dashboard.process.terminate()
            try:
                dashboard.process.wait(30)
            except subprocess.TimeoutExpired:
                dashboard.process.kill()
                dashboard.process.wait(30)
        print(f"---- dashboard (exit {dashboard.process.returncode}) ----")
        print(dashboard.log.read_text(errors="replace"))


def test_the_app_role_runs_everything_with_the_grants_and_cannot_migrate_drop_or_truncate(
    roles: Roles, tmp_path: Path, dashboard_as_app: Callable[[], Dashboard]
) -> None:
    owner_url, app_url = roles.owner_url, roles.app_url
    migrate_as_owner_with_test_tables(roles)

    # Before the grants, app can reach nothing of the schema.
    assert "permission denied for schema cronbase" in fails(cronbase(app_url, "stats"), 1)

    # -- cronbase grants ------------------------------------------------------------------------
    printed = ok(cronbase(owner_url, "grants", "app")).splitlines()
    assert printed == render_grants(SCHEMA, "app")
    assert printed[0] == 'GRANT USAGE ON SCHEMA "cronbase" TO "app";'
    assert 'GRANT SELECT, INSERT ON TABLE "cronbase"."audit_log" TO "app";' in printed
    # The one sequence: insert_graph draws a workflow's ids with nextval (the run below proves
    # it is needed: EXPLAIN checks no sequence rights).
    assert 'GRANT USAGE ON SEQUENCE "cronbase"."jobs_id_seq" TO "app";' in printed
    assert all(
        re.fullmatch(r'GRANT [A-Z, ]+ ON (SCHEMA|TABLE|SEQUENCE|FUNCTION) [^;]+ TO "app";', p)
        for p in printed
    )
    for word in ("TRUNCATE", "CREATE", "ALL", "DEFAULT", "OWNER"):
        assert word not in " ".join(printed)
    # The functions: EXECUTE on the partition functions, the claim and rotation (SECURITY
    # DEFINER), nothing else.
    assert [p for p in printed if " ON FUNCTION " in p] == [
        'GRANT EXECUTE ON FUNCTION "cronbase"."create_history_days"(date, date) TO "app";',
        'GRANT EXECUTE ON FUNCTION "cronbase"."drop_history_days"(text, timestamptz) TO "app";',
        'GRANT EXECUTE ON FUNCTION "cronbase"."claim_tickets"(text, integer, text[], text[]) '
        'TO "app";',
        'GRANT EXECUTE ON FUNCTION "cronbase"."reseal_attempts"(bigint[], bigint[], text[], '
        'text[], text[], text[]) TO "app";',
    ]
    assert table_grants(owner_url, "app") == {}, "printing must grant nothing"

    for args in (("grants", "nobody"), ("grants", "nobody", "--apply")):
        error = fails(cronbase(owner_url, *args), 2)
        assert error.splitlines() == [error.strip()], error  # one line
        assert error.startswith("error: role 'nobody' does not exist"), error

    applied = ok(cronbase(owner_url, "grants", "app", "--apply"))
    assert [line.removeprefix("granted: ") for line in applied.splitlines()[:-1]] == printed
    assert "role 'app' may now run workers" in applied.splitlines()[-1]
    # Again (after an upgrade's migrations, say): the same grants, no error.
    ok(cronbase(owner_url, "grants", "app", "--apply"))
    expected = {table: set(privileges) for table, privileges in TABLE_PRIVILEGES.items()}
    expected |= {name: set(usages) for name, usages in SEQUENCE_PRIVILEGES.items()}
    assert table_grants(owner_url, "app") == expected
    assert scalar(owner_url, "SELECT has_schema_privilege('app', 'cronbase', 'USAGE')") is True
    assert scalar(owner_url, "SELECT has_schema_privilege('app', 'cronbase', 'CREATE')") is False

    # Only the owner may apply them: another role's GRANT gives nothing (PostgreSQL only warns),
    # so the command refuses, naming the owner; not even app to itself.
    superuser_run(roles.cluster, "postgres", sql.SQL("CREATE ROLE app2 LOGIN"))
    for grantee in ("app2", "app"):
        error = fails(cronbase(app_url, "grants", grantee, "--apply"), 2)
        assert error.startswith("error: role 'app' cannot grant on schema 'cronbase'"), error
        assert "schema's owner, 'owner'" in error, error
    assert table_grants(owner_url, "app2") == {}

    # -- as app: enqueue (sync, async, keyed, from the command line) ---------------------------
    tasks = make_app(app_url)
    execute_once = tasks.get_task("execute_once")
    ids = execute_once.defer_many([{"n": n} for n in range(40)])
    ids.append(execute_once.defer(n=40))
    keyed = execute_once.configure(idempotency_key="one")
    ids.append(keyed.defer(n=41))
    assert keyed.defer(n=41) == ids[-1]
    replaced = execute_once.configure(dedupe_key="debounce", on_duplicate="replace")
    ids.append(replaced.defer(n=42))
    replaced_id = ids[-1]
    assert replaced.defer(n=43) == replaced_id  # the waiting job got the new payload

    async def enqueue_async() -> list[int]:
        try:
            return [
                await execute_once.defer_async(n=44),
                *await execute_once.defer_many_async([{"n": 45}, {"n": 46}]),
            ]
        finally:
            await tasks.aclose()

    ids += asyncio.run(enqueue_async())
    # Workflows (insert_graph: nextval on jobs_id_seq) and a dependent job, which the trigger
    # releases with the rights of the worker that ends its parent.
    first = cronbase_api.group([execute_once.s(n=47), execute_once.s(n=48)]).defer()
    ids += [first, first + 1]
    ids.append(execute_once.configure(after=[first]).defer(n=49))
    tasks.close()
    explode_id = int(
        ok(
            cronbase(
                app_url, "--app", CLI_APP, "enqueue", "explode", "--payload", '{"message": "boom"}'
            )
        )
    )

    # -- as app: worker processes drain the jobs, exactly once ---------------------------------
    with psycopg.connect(owner_url, autocommit=True) as owner:
        with WorkerProcesses(app_url, tmp_path) as workers:
            processes = [workers.start(name, "--concurrency", "4") for name in ("A", "B")]
            for name in ("A", "B"):
                wait_for(partial(is_registered, owner, name), timeout=60, what=f"worker {name}")
            wait_for(
                lambda: statuses(owner_url).get("succeeded") == len(ids),
                timeout=120,
                what=f"{len(ids)} jobs to succeed",
            )
            executions = owner.execute("SELECT job_id, n FROM test_executions").fetchall()
            assert sorted(job_id for job_id, _ in executions) == sorted(ids)
            assert (replaced_id, 43) in executions  # the replaced payload
            for process in processes:
                process.send(signal.SIGTERM)
            assert [p.wait_exit(timeout=60) for p in processes] == [0, 0]
            for process in processes:
                assert "permission denied" not in process.log(), process.log()
        # A clean stop deletes the worker's row (unregister_worker).
        assert owner.execute("SELECT count(*) FROM cronbase.workers").fetchone() == (0,)

        # A burst worker from the command line: a dead job writes its history row.
        record = tmp_path / "record.txt"
        ran = cronbase(app_url, "--app", CLI_APP, "worker", "--burst", CLI_TEST_RECORD=str(record))
        assert "permission denied" not in ok(ran) + ran.stderr
        assert owner.execute(
            "SELECT status FROM cronbase.jobs_all WHERE id = %s", [explode_id]
        ).fetchone() == ("dead",)
        assert owner.execute(
            "SELECT outcome FROM cronbase.job_attempts_all WHERE job_id = %s", [explode_id]
        ).fetchall() == [("dead",)]

        # -- as app: schedules, fired by `cronbase tick` ----------------------------------------
        ok(
            cronbase(
                app_url,
                *("--app", CLI_APP, "schedules", "add", "record", "--cron", "* * * * *"),
                *("--key", "every-minute", "--payload", '{"n": 7}'),
            )
        )
        owner.execute(
            "UPDATE cronbase.schedules SET next_fire_at = now() - interval '1 minute'"
            " WHERE key = 'every-minute'"
        )
        ok(cronbase(app_url, "--app", CLI_APP, "tick", CLI_TEST_RECORD=str(record)))
        assert record.read_text().split() == ["7"]
        for action in ("pause", "resume", "remove"):
            ok(cronbase(app_url, "schedules", action, "every-minute"))
        assert owner.execute("SELECT count(*) FROM cronbase.schedules").fetchone() == (0,)

        # -- as app: operator commands ----------------------------------------------------------
        assert "queued again" in ok(cronbase(app_url, "jobs", "retry", str(explode_id)))
        assert "cancelled" in ok(cronbase(app_url, "jobs", "cancel", str(explode_id)))
        ok(cronbase(app_url, "queues", "pause", "reports", "--force"))
        ok(cronbase(app_url, "queues", "resume", "reports"))
        assert "last hour:" in ok(cronbase(app_url, "stats"))
        overview = json.loads(ok(cronbase(app_url, "stats", "--json")))
        counts = {q["queue"]: q["counts"] for q in overview["queues"]}
        assert counts["default"]["succeeded"] == len(ids) + 1  # and the schedule's slot job
        assert ok(cronbase(app_url, "check", "--max-dead", "0")).strip() == "ok"
        ok(cronbase(app_url, "jobs", "show", str(explode_id)))
        audit = owner.execute("SELECT action FROM cronbase.audit_log ORDER BY id").fetchall()
        assert ("role.grant",) in audit  # the owner's `grants --apply`, twice
        assert ("queue.pause",) in audit
        assert ("queue.resume",) in audit

        # -- as app: effects --------------------------------------------------------------------
        app = make_app(app_url)
        with app.effects.once("charge:1") as effect:
            assert not effect.done
            effect.record(charge="ch_1")
        with app.effects.once("charge:1") as again:
            assert again.done
        assert [e.key for e in app.effects.list()] == ["charge:1"]
        ok(cronbase(app_url, "effects", "list"))
        app.effects.forget("charge:1")
        assert owner.execute("SELECT count(*) FROM cronbase.effects").fetchone() == (0,)

        # -- as app: retention pruning (attempts go once older than the longest-kept jobs) ------
        owner.execute(
            "UPDATE cronbase.jobs_history SET finished_at = now() - interval '30 days'"
            " WHERE finished_at IS NOT NULL"
        )
        owner.execute("UPDATE cronbase.job_attempts SET finished_at = now() - interval '31 days'")
        finished = owner.execute(
            "SELECT count(*) FROM cronbase.jobs_all WHERE finished_at IS NOT NULL"
        ).fetchone()
        assert finished == (len(ids) + 2,)  # the slot job and the cancelled one

        assert retention_round(app, Retention(succeeded=timedelta(days=7))) == len(ids) + 2
        assert owner.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (0,)
        assert owner.execute("SELECT count(*) FROM cronbase.job_attempts_all").fetchone() == (0,)
        assert "pruned 0 jobs" in ok(cronbase(app_url, "prune", "--older-than", "7d"))
        app.close()

        # Something for the dashboard to show.
        shown = make_app(app_url)
        job_id = shown.get_task("execute_once").defer(n=1)
        shown.close()

    # -- as app: the dashboard --------------------------------------------------------------------
    dashboard = dashboard_as_app()
    for page in (*DASHBOARD_PAGES, f"/jobs/{job_id}", "/metrics"):
        response = httpx.get(dashboard.url + page, timeout=30)
        assert response.status_code == 200, f"{page}: {response.status_code}\n{response.text}"
    assert f"/jobs/{job_id}" in httpx.get(dashboard.url + "/jobs", timeout=30).text
    assert "permission denied" not in dashboard.log.read_text()

    # -- what app cannot do -----------------------------------------------------------------------
    before = schema_snapshot(owner_url)
    error = fails(cronbase(app_url, "migrate"))
    assert "permission denied" in error, error
    assert schema_snapshot(owner_url) == before
    # Nor create a schema of its own to migrate.
    error = fails(cronbase(app_url, "--schema", "cronbase_mine", "migrate"))
    assert "permission denied" in error, error
    assert schema_snapshot(owner_url) == before

    forbidden = [
        "DROP TABLE cronbase.jobs",
        "TRUNCATE cronbase.jobs",
        "ALTER TABLE cronbase.jobs ADD COLUMN mine integer",
        "CREATE TABLE cronbase.mine (id integer)",
        "CREATE INDEX mine_idx ON cronbase.jobs (task)",
        "DELETE FROM cronbase.migrations",
        "INSERT INTO cronbase.migrations (version, name) VALUES (99, 'mine')",
        "UPDATE cronbase.audit_log SET actor = 'someone else'",
        "DELETE FROM cronbase.audit_log",
        # Attempts are written once: retention deletes old ones (DELETE), nobody rewrites them.
        "UPDATE cronbase.job_attempts SET error = 'rewritten'",
        "CREATE SCHEMA mine",
        "CREATE TEMP TABLE mine (id integer)",
    ]
    with psycopg.connect(app_url, autocommit=True) as conn:
        for statement in forbidden:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    assert schema_snapshot(owner_url) == before
    assert statuses(owner_url) == {"queued": 1}
    assert table_grants(owner_url, "app2") == {}


# -- the grants table, statement by statement ------------------------------------------------------

_PARAMETER = re.compile(r"%\((\w+)\)[sb]")
MIGRATIONS_CHECK = "migrate.require_current"


def permission_failures(url: str) -> dict[str, str]:
    """Each named statement (and the worker's schema check) that fails PostgreSQL's permission
    checks as ``url``'s role: {name: the error}. EXPLAIN checks them without running anything."""
    queries = Queries.for_schema(SCHEMA)
    failed = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for name, template in sorted(Queries.templates.items()):
            params = dict.fromkeys(_PARAMETER.findall(template))
            try:
                conn.execute(b"EXPLAIN " + getattr(queries, name), params)
            except psycopg.errors.InsufficientPrivilege as exc:
                failed[name] = str(exc).strip()
        try:
            migrate.require_current(conn, SCHEMA)
        except psycopg.errors.InsufficientPrivilege as exc:
            failed[MIGRATIONS_CHECK] = str(exc).strip()
    return failed


def test_every_grant_is_needed_by_a_statement_and_together_they_suffice(roles: Roles) -> None:
    ok(cronbase(roles.owner_url, "migrate"))
    with psycopg.connect(roles.owner_url, autocommit=True) as owner:
        # What the table leaves out on purpose must stay true of the schema: functions PUBLIC
        # may execute, and no sequence but identity columns' (an INSERT needs no right on
        # those; insert_graph's nextval is granted in SEQUENCE_PRIVILEGES).
        functions = owner.execute(
            "SELECT proname, has_function_privilege('app', oid, 'EXECUTE') FROM pg_proc"
            " WHERE pronamespace = %s::regnamespace ORDER BY 1",
            [SCHEMA],
        ).fetchall()
        assert functions == [
            ("bad_name", True),  # the SQL worker's name check (0024)
            ("claim", False),  # INTERFACE_PRIVILEGES (0024)
            ("claim_tickets", False),  # FUNCTION_PRIVILEGES grants them
            ("complete", False),  # INTERFACE_PRIVILEGES (0024)
            ("create_history_days", False),
            ("defer", False),  # INTERFACE_PRIVILEGES: grants ROLE --interface
            ("drop_history_days", False),
            ("fail", False),  # INTERFACE_PRIVILEGES (0024)
            ("history_settled", True),
            ("insert_keyed_job", True),  # 0015's, and 0018's (with a task version)
            ("insert_keyed_job", True),
            ("jobs_ready_again", True),  # 0020's trigger
            ("json_depth", True),  # defer's depth check (0023)
            ("notify_done", True),
            ("parents_results", True),
            ("register_worker", False),  # INTERFACE_PRIVILEGES (0024)
            ("release", False),
            ("renew", False),
            ("repend_dependents", True),
            ("reseal_attempts", False),  # FUNCTION_PRIVILEGES (0025: key rotation)
            ("resolve_dependents", True),
            ("settle_dependents", True),
            ("unregister_worker", False),  # INTERFACE_PRIVILEGES (0024)
        ], f"grant EXECUTE on {functions} in cronbase/db/grants.py"
        sequences = owner.execute(
            "SELECT c.relname, d.deptype FROM pg_class c"
            " LEFT JOIN pg_depend d ON d.objid = c.oid AND d.classid = 'pg_class'::regclass"
            "  AND d.refclassid = 'pg_class'::regclass"
            " WHERE c.relnamespace = %s::regnamespace AND c.relkind = 'S'",
            [SCHEMA],
        ).fetchall()
        assert sequences
        assert {deptype for _, deptype in sequences} == {"i"}, (
            f"a sequence that is not an identity column's needs USAGE in grants.py: {sequences}"
        )

        # Without grants, every statement on the schema fails (database_now reads no table).
        on_schema = {name for name, text in Queries.templates.items() if "{schema}" in text}
        assert set(permission_failures(roles.app_url)) == on_schema | {MIGRATIONS_CHECK}

        apply_grants(owner, SCHEMA, "app")
        assert permission_failures(roles.app_url) == {}

        # Each grant is needed: without it, some statement fails, on that table.
        for table, privileges in TABLE_PRIVILEGES.items():
            for privilege in privileges:
                revoke = sql.SQL("REVOKE {} ON {} FROM app").format(
                    sql.SQL(privilege), sql.Identifier(SCHEMA, table)
                )
                owner.execute(revoke)
                failed = permission_failures(roles.app_url)
                owner.execute(
                    sql.SQL("GRANT {} ON {} TO app").format(
                        sql.SQL(privilege), sql.Identifier(SCHEMA, table)
                    )
                )
                assert failed, f"{privilege} on {table} is granted but no statement needs it"
                for name, error in failed.items():
                    assert re.search(rf"permission denied for (table|view) {table}$", error), (
                        name,
                        error,
                    )
        for function in FUNCTION_PRIVILEGES:
            target = sql.SQL("FUNCTION {}.{}").format(sql.Identifier(SCHEMA), sql.SQL(function))
            owner.execute(sql.SQL("REVOKE EXECUTE ON {} FROM app").format(target))
            failed = permission_failures(roles.app_url)
            owner.execute(sql.SQL("GRANT EXECUTE ON {} TO app").format(target))
            assert failed, f"EXECUTE on {function} is granted but no statement needs it"
            name = function.partition("(")[0]
            for statement, error in failed.items():
                assert f"permission denied for function {name}" in error, (statement, error)
        assert permission_failures(roles.app_url) == {}


def test_a_role_of_another_language_may_defer_and_nothing_else(roles: Roles) -> None:
    """`cronbase grants ROLE --interface`: USAGE on the schema and EXECUTE on cronbase.defer,
    which runs as the owner; no right on any table, so the role reads and changes nothing else."""
    ok(cronbase(roles.owner_url, "migrate"))
    printed = ok(cronbase(roles.owner_url, "grants", "app", "--interface")).splitlines()
    assert printed == [
        'GRANT USAGE ON SCHEMA "cronbase" TO "app";',
        'GRANT EXECUTE ON FUNCTION "cronbase"."defer"(text, jsonb, text, integer, timestamptz,'
        ' interval, integer, interval, text, text, integer) TO "app";',
        'GRANT EXECUTE ON FUNCTION "cronbase"."register_worker"(text, text[], text[], text,'
        ' integer, integer) TO "app";',
        'GRANT EXECUTE ON FUNCTION "cronbase"."unregister_worker"(text) TO "app";',
        'GRANT EXECUTE ON FUNCTION "cronbase"."claim"(text, integer, text[], text[]) TO "app";',
        'GRANT EXECUTE ON FUNCTION "cronbase"."renew"(text, bigint[], uuid[]) TO "app";',
        'GRANT EXECUTE ON FUNCTION "cronbase"."complete"(text, bigint, uuid, jsonb) TO "app";',
        'GRANT EXECUTE ON FUNCTION "cronbase"."fail"(text, bigint, uuid, text, interval, text,'
        ' boolean, text) TO "app";',
        'GRANT EXECUTE ON FUNCTION "cronbase"."release"(text, bigint[], uuid[]) TO "app";',
    ]
    with (
        psycopg.connect(roles.app_url, autocommit=True) as app,
        pytest.raises(psycopg.errors.InsufficientPrivilege, match="schema cronbase"),
    ):
        app.execute("SELECT cronbase.defer('send_email')")  # not even USAGE yet
    out = ok(cronbase(roles.owner_url, "grants", "app", "--interface", "--apply"))
    assert "may now defer jobs and work queues through the SQL interface" in out
    with psycopg.connect(roles.app_url, autocommit=True) as app:
        row = app.execute(
            "SELECT cronbase.defer('send_email', '{\"to\": \"a@b.c\"}', queue => 'emails',"
            " idempotency_key => 'welcome:1')"
        ).fetchone()
        assert row is not None
        again = app.execute(
            "SELECT cronbase.defer('send_email', idempotency_key => 'welcome:1')"
        ).fetchone()
        assert again == row  # the key's holder, found through job_keys the role cannot read
        for statement in (
            "SELECT count(*) FROM cronbase.jobs",
            "SELECT count(*) FROM cronbase.jobs_all",
            "UPDATE cronbase.jobs SET priority = 0",
            "SELECT cronbase.insert_keyed_job('t', 'q', '{}', 1::smallint, now(), 1,"
            " '1 minute', NULL, NULL, 'k', NULL, NULL, NULL, 'c', NULL)",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                app.execute(statement)
        # Its checks hold as the owner's: a bad name is refused, naming it.
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="'bad name'"):
            app.execute("SELECT cronbase.defer('bad name')")
        # And it works the queue (migration 0024): register, claim, complete, unregister.
        app.execute("SELECT cronbase.defer('resize', queue => 'emails')")
        app.execute("SELECT cronbase.register_worker('node-1', NULL, ARRAY['resize'])")
        claimed = app.execute("SELECT id, lease_token FROM cronbase.claim('node-1', 10)").fetchall()
        assert len(claimed) == 1
        done = app.execute("SELECT cronbase.complete('node-1', %s, %s)", claimed[0]).fetchone()
        assert done == (True,)
        app.execute("SELECT cronbase.unregister_worker('node-1')")
    with psycopg.connect(roles.owner_url, autocommit=True) as owner:
        jobs = owner.execute("SELECT task, queue, payload FROM cronbase.jobs").fetchall()
        finished = owner.execute("SELECT task, status FROM cronbase.jobs_history").fetchall()
    assert jobs == [("send_email", "emails", {"to": "a@b.c"})]
    assert finished == [("resize", "succeeded")]
