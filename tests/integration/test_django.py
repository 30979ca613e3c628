"""cronbase.contrib.django in a real Django project (examples/django_project), on a database of its
own: ``manage.py migrate``, ``manage.py cronbase ...``, and defers inside ``transaction.atomic()``.

Django's settings are global to a process, so Django runs in subprocesses only (manage.py, and
tests/integration/django_driver.py for what runs inside the project); this process stays free of
Django and checks the database on connections of its own.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from cronbase.db import migrate
from tests.e2e.harness import after_inherited

REPO = Path(__file__).resolve().parents[2]
PROJECT = REPO / "examples" / "django_project"
DRIVER = Path(__file__).with_name("django_driver.py")
DJANGO_MIGRATIONS = REPO / "src" / "cronbase" / "contrib" / "django" / "migrations"

# Subprocesses (Django, manage.py, burst workers): slow, as tests/e2e.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def new_database(server_url: str) -> str:
    name = f"cronbase_django_{secrets.token_hex(4)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return make_conninfo(server_url, dbname=name)


def drop_database(server_url: str, url: str) -> None:
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def site(server_url: str, tmp_path: Path) -> Iterator[Site]:
    """The example project on a fresh, empty database."""
    url = new_database(server_url)
    yield Site(url, tmp_path)
    drop_database(server_url, url)


@pytest.fixture(scope="module")
def migrated_url(server_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database the project has migrated, shared by the tests that only defer (each checks
    its own jobs: the table is emptied before each)."""
    url = new_database(server_url)
    Site(url, tmp_path_factory.mktemp("site")).ok("migrate")
    yield url
    drop_database(server_url, url)


@pytest.fixture
def migrated(migrated_url: str, tmp_path: Path) -> Site:
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE cronbase.jobs, cronbase.jobs_history, shop_order, shop_summary RESTART IDENTITY CASCADE"
        )
    return Site(migrated_url, tmp_path)


class Site:
    """The example project on database ``url``; ``settings(...)`` writes a settings module that
    overrides the project's (in ``folder``, first on the subprocesses' path)."""

    def __init__(self, url: str, folder: Path) -> None:
        self.url = url
        self.folder = folder
        self.settings_module = "mysite.settings"
        self.extra_env: dict[str, str] = {}

    def settings(self, body: str) -> None:
        (self.folder / "test_settings.py").write_text(f"from mysite.settings import *\n{body}\n")
        self.settings_module = "test_settings"

    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CRONBASE_", "DJANGO_")) and k != "DATABASE_URL"
        }
        env.update(
            DATABASE_URL=self.url,
            DJANGO_SETTINGS_MODULE=self.settings_module,
            PYTHONPATH=after_inherited(str(self.folder), str(PROJECT)),
        )
        env.update(self.extra_env)
        return env

    def run(self, *args: str, script: Path | None = None) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, str(script or PROJECT / "manage.py"), *args]
        return subprocess.run(
            command,
            cwd=PROJECT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def ok(self, *args: str) -> str:
        result = self.run(*args)
        assert result.returncode == 0, f"manage.py {' '.join(args)}:\n{result.stderr}"
        return result.stdout

    def scenario(self, name: str) -> dict[str, Any]:
        result = self.run(name, script=DRIVER)
        assert result.returncode == 0, f"scenario {name}:\n{result.stderr}"
        loaded: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
        return loaded

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(query).fetchall()


def schema_versions(site: Site, schema: str = "cronbase") -> list[int]:
    return [v for (v,) in site.rows(f"SELECT version FROM {schema}.migrations ORDER BY version")]


# -- the schema ------------------------------------------------------------------------------------


def test_manage_migrate_applies_cronbase_schema_then_the_worker_runs_the_views_jobs(
    site: Site,
) -> None:
    out = site.ok("migrate")
    assert "Applying cronbase.0001_cronbase_schema... OK" in out
    assert schema_versions(site) == list(range(1, migrate.LATEST_VERSION + 1))
    assert "up to date at version" in site.ok("cronbase", "migrate")

    placed = site.scenario("view")
    assert placed["status"] == 201
    order = placed["body"]["order"]
    assert placed["after"] == [order]
    assert site.rows("SELECT status FROM shop_order") == [("placed",)]

    site.ok("cronbase", "worker", "--burst")
    # The handler used the ORM in a worker thread.
    assert site.rows("SELECT status, confirmed_at IS NOT NULL FROM shop_order") == [
        ("confirmed", True)
    ]
    assert site.rows("SELECT status FROM cronbase.jobs_all") == [("succeeded",)]


def test_manage_migrate_after_cronbase_migrate_finds_nothing_to_do(site: Site) -> None:
    assert "migrated to version" in site.ok("cronbase", "migrate")
    applied_at = site.rows("SELECT version, applied_at FROM cronbase.migrations")
    assert "Applying cronbase.0001_cronbase_schema... OK" in site.ok("migrate")
    assert site.rows("SELECT version, applied_at FROM cronbase.migrations") == applied_at
    assert "[X] 0001_cronbase_schema" in site.ok("showmigrations", "cronbase")
    # Once more changes nothing either.
    assert "No migrations to apply" in site.ok("migrate")


def test_manage_migrate_inside_a_transaction_applies_the_schema(site: Site) -> None:
    # call_command("migrate") inside atomic(): the schema cannot commit on Django's connection
    # mid-transaction, so it goes through a connection of its own, and the caller's goes on.
    assert site.scenario("migrate_in_atomic") == {"orders": 1}
    assert schema_versions(site) == list(range(1, migrate.LATEST_VERSION + 1))


def test_the_schema_goes_where_settings_say(site: Site) -> None:
    site.settings('CRONBASE = {"DATABASE": "default", "SCHEMA": "shop_jobs"}')
    site.ok("migrate")
    # The admin's models follow the schema at startup, which no migration records.
    assert "No changes detected" in site.ok("makemigrations", "--check", "--dry-run", "cronbase")
    assert schema_versions(site, "shop_jobs")[-1] == migrate.LATEST_VERSION
    assert site.rows("SELECT to_regnamespace('cronbase')") == [(None,)]
    assert site.scenario("commit")["after"]  # the driver reads the App's schema


def test_migrate_on_another_database_alias_leaves_it_alone(site: Site, server_url: str) -> None:
    other = new_database(server_url)
    try:
        fields = psycopg.conninfo.conninfo_to_dict(other)
        site.settings(
            "DATABASES = {**DATABASES, 'other': {**DATABASES['default'], "
            f"'NAME': {fields['dbname']!r}}}}}"
        )
        site.ok("migrate", "--database", "other")
        with psycopg.connect(other, autocommit=True) as conn:
            assert conn.execute("SELECT to_regnamespace('cronbase')").fetchone() == (None,)
    finally:
        drop_database(server_url, other)


def test_a_django_migration_covers_the_latest_cronbase_schema() -> None:
    versions = [
        int(match[1])
        for path in DJANGO_MIGRATIONS.glob("0*.py")
        if (match := re.search(r"^CRONBASE_VERSION = (\d+)$", path.read_text(), re.MULTILINE))
    ]
    assert max(versions) == migrate.LATEST_VERSION, (
        f"cronbase's schema is at version {migrate.LATEST_VERSION} but the newest Django "
        f"migration brings it to {max(versions)}: add one to {DJANGO_MIGRATIONS} as "
        "0001_cronbase_schema.py is (same operation), with "
        f"CRONBASE_VERSION = {migrate.LATEST_VERSION}"
    )


# -- defers inside transaction.atomic() -------------------------------------------------------------


def test_a_defer_inside_atomic_commits_with_the_block(migrated: Site) -> None:
    seen = migrated.scenario("commit")
    assert seen["inside"] == []  # written in Django's transaction: nobody else sees it yet
    order = seen["order"]
    assert seen["after"] == [order, order + 1000, order + 2000]
    assert len(seen["many"]) == 1
    assert seen["keyed"][0] == seen["keyed"][1]
    assert migrated.rows(
        "SELECT idempotency_key, run_at - created_at BETWEEN interval '4 minutes' "
        f"AND interval '6 minutes' FROM cronbase.jobs_all WHERE id = {seen['keyed'][0]}"
    ) == [("o-1", True)]
    # NOTIFY fires on commit only, and a worker then runs what is due.
    migrated.ok("cronbase", "worker", "--burst")
    assert migrated.rows("SELECT status FROM shop_order") == [("confirmed",)]
    assert migrated.rows(
        "SELECT status, count(*) FROM cronbase.jobs_all GROUP BY 1 ORDER BY 1"
    ) == [
        ("queued", 1),
        ("succeeded", 2),
    ]


def test_a_rolled_back_atomic_block_takes_its_job_with_it(migrated: Site) -> None:
    assert migrated.scenario("rollback") == {"orders": 0, "after": []}
    assert migrated.rows("SELECT count(*) FROM cronbase.jobs_all") == [(0,)]


def test_a_rolled_back_savepoint_drops_only_its_own_job(migrated: Site) -> None:
    assert migrated.scenario("savepoint") == {"inside": [], "after": [1, 3]}


def test_outside_atomic_the_job_commits_at_once_on_cronbases_pool(migrated: Site) -> None:
    assert migrated.scenario("outside") == {"after": [7], "django_connected": False}


def test_another_threads_defer_is_not_in_this_threads_transaction(migrated: Site) -> None:
    seen = migrated.scenario("other_thread")
    assert seen == {"thread": [9], "inside": [9], "after": [8, 9]}


# -- the worker's Django connections ----------------------------------------------------------------


def test_each_sync_handler_gets_a_fresh_django_connection_and_leaves_none(
    migrated: Site,
) -> None:
    # CONN_MAX_AGE = 0 (Django's default): closed around each job, as around each request.
    assert migrated.scenario("fresh_connections") == {
        "before": True,
        "at_start": False,
        "orders": 0,
        "during": True,
        "after": False,
        "async_ran": True,
        "async_logged": [],
    }


# -- manage.py cronbase --------------------------------------------------------------------------


def test_manage_cronbase_tick_fires_the_due_periodic_task(migrated: Site) -> None:
    out = migrated.run("cronbase", "tick")
    assert out.returncode == 0, out.stderr
    # The first tick declared the hourly schedule; make its slot due, as an hour later.
    due = migrated.rows(
        "UPDATE cronbase.schedules SET next_fire_at = date_trunc('hour', now()) "
        "WHERE key = 'hourly-order-summary' RETURNING next_fire_at"
    )
    assert len(due) == 1
    migrated.ok("cronbase", "tick")
    assert migrated.rows("SELECT taken_at FROM shop_summary") == [due[0]]
    assert migrated.rows("SELECT task, status FROM cronbase.jobs_all") == [
        ("summarize_orders", "succeeded")
    ]


def test_manage_cronbase_enqueue_stats_and_errors(migrated: Site) -> None:
    job_id = migrated.ok("cronbase", "enqueue", "confirm_order", "--payload", '{"order_id": 5}')
    assert migrated.rows("SELECT id, queue FROM cronbase.jobs_all") == [(int(job_id), "orders")]
    assert "orders" in migrated.ok("cronbase", "stats")
    assert "worker" in migrated.ok("cronbase", "--help")
    assert "--burst" in migrated.ok("cronbase", "worker", "--help")

    unknown = migrated.run("cronbase", "enqueue", "confirm_ordr")
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines() == [
        "error: unknown task 'confirm_ordr'; registered: confirm_order, summarize_orders"
    ]
    # Django's own --settings is for manage.py, not passed on to cronbase.
    settings = migrated.run("cronbase", "--settings", "mysite.settings", "stats", "--json")
    assert settings.returncode == 0, settings.stderr
    assert json.loads(settings.stdout)["queues"]


def test_call_command_cronbase_runs_the_cli_and_raises_on_failure(migrated: Site) -> None:
    assert migrated.scenario("call_cronbase") == {
        "after": [4],
        "failed": ["cronbase enqueue no_such_task exited with code 2", 2],
    }


# -- settings.CRONBASE -------------------------------------------------------------------------------


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    return result.stderr.strip().splitlines()[-1]


def test_a_sqlite_database_is_refused_in_one_line(site: Site) -> None:
    site.settings(
        "DATABASES = {'default': {'ENGINE': 'django.db.backends.sqlite3', 'NAME': ':memory:'}}"
    )
    assert last_line(site.run("check")) == (
        "cronbase.errors.ConfigurationError: cronbase needs PostgreSQL, but database 'default' "
        "uses 'django.db.backends.sqlite3'; point settings.CRONBASE['DATABASE'] at a "
        "django.db.backends.postgresql database"
    )


@pytest.mark.parametrize(
    ("cronbase_setting", "message"),
    [
        (
            '{"DATABSE": "default"}',
            "unknown key 'DATABSE' in settings.CRONBASE; known: APP, DATABASE, SCHEMA, "
            "POOL_SIZE, POOLER, LISTEN_URL, TASKS_MODULE",
        ),
        (
            '{"DATABASE": "jobs"}',
            "settings.CRONBASE[\"DATABASE\"] is 'jobs', which is not in settings.DATABASES "
            "('default'); name one of those",
        ),
        (
            '{"APP": "userapp:app", "SCHEMA": "x"}',
            "settings.CRONBASE gives APP 'userapp:app' and SCHEMA; set those on your "
            "App(...) instead",
        ),
        (
            '{"TASKS_MODULE": True}',
            'settings.CRONBASE["TASKS_MODULE"] must be a string, e.g. "tasks", or None; got True',
        ),
        (
            '{"APP": "nowhere:app"}',
            "cannot import app 'nowhere:app': No module named 'nowhere'",
        ),
    ],
)
def test_bad_settings_are_refused_in_one_line(
    site: Site, cronbase_setting: str, message: str
) -> None:
    site.settings(f"CRONBASE = {cronbase_setting}")
    assert last_line(site.run("check")) == f"cronbase.errors.ConfigurationError: {message}"


# -- settings.CRONBASE["APP"]: the user's own App ----------------------------------------------------

USER_APP = """
import os

import cronbase

app = cronbase.App(os.environ["{variable}"])


@app.task(queue="orders")
def confirm_order(order_id: int) -> None:
    pass
"""


def test_a_users_own_app_on_the_same_database_joins_atomic_blocks(migrated: Site) -> None:
    (migrated.folder / "userapp.py").write_text(USER_APP.format(variable="DATABASE_URL"))
    # No tasks module autodiscovered: the user's confirm_order is the one the driver defers.
    migrated.settings('CRONBASE = {"APP": "userapp:app", "TASKS_MODULE": None}')
    assert migrated.scenario("savepoint") == {"inside": [], "after": [1, 3]}
    assert migrated.scenario("rollback") == {"orders": 0, "after": [1, 3]}


def test_a_users_own_app_on_another_database_is_refused_at_the_first_atomic_defer(
    migrated: Site, database_url: str
) -> None:
    (migrated.folder / "userapp.py").write_text(USER_APP.format(variable="ELSEWHERE"))
    migrated.settings('CRONBASE = {"APP": "userapp:app", "TASKS_MODULE": None}')
    migrated.extra_env["ELSEWHERE"] = database_url  # the suite's own database: not the project's
    result = migrated.run("rollback", script=DRIVER)
    elsewhere = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
    here = psycopg.conninfo.conninfo_to_dict(migrated.url)["dbname"]
    line = last_line(result)
    assert line.startswith(
        f"cronbase.errors.ConfigurationError: the App of settings.CRONBASE['APP'] is on "
        f"database {elsewhere!r} (port "
    )
    assert f"but DATABASES['default'] is {here!r} (port " in line
    assert line.endswith(
        "or set settings.CRONBASE['DATABASE'] = None to keep jobs out of Django's transactions"
    )


# -- Django's test runner: the App follows Django to the test database ------------------------------


def dbname(url: str) -> str:
    return str(psycopg.conninfo.conninfo_to_dict(url)["dbname"])


@pytest.fixture
def kept_test_database(site: Site, server_url: str) -> Iterator[str]:
    """The URL of the test database ``manage.py test --keepdb`` leaves behind, dropped after."""
    url = make_conninfo(site.url, dbname=f"test_{dbname(site.url)}")
    yield url
    drop_database(server_url, url)


def rows_of(url: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query).fetchall()


def test_manage_test_runs_the_shops_tests_on_the_test_database(
    site: Site, kept_test_database: str
) -> None:
    site.ok("migrate")  # the project's own database, with cronbase's tables: must stay empty
    result = site.run("test", "shop", "--keepdb", "--noinput")
    assert result.returncode == 0, result.stderr
    assert "Ran 3 tests" in result.stderr
    # The Django migration created cronbase's schema in the test database.
    assert rows_of(kept_test_database, "SELECT max(version) FROM cronbase.migrations") == [
        (migrate.LATEST_VERSION,)
    ]
    # The TransactionTestCase's job, deferred outside atomic() on cronbase's own pool and run by
    # the burst worker in the test, was in the test database (its id sequence moved), which
    # Django's flush after the test emptied of its orders and of cronbase's jobs alike.
    assert rows_of(kept_test_database, "SELECT is_called FROM cronbase.jobs_id_seq") == [(True,)]
    assert rows_of(kept_test_database, "SELECT count(*) FROM cronbase.jobs_all") == [(0,)]
    assert rows_of(kept_test_database, "SELECT count(*) FROM shop_order") == [(0,)]
    # The project's database saw nothing.
    assert site.rows("SELECT is_called FROM cronbase.jobs_id_seq") == [(False,)]
    assert site.rows("SELECT count(*) FROM cronbase.jobs_all") == [(0,)]
    assert site.rows("SELECT count(*) FROM shop_order") == [(0,)]


# The user's App, on the project's database, and a test of Django's runner that uses it. The
# shop's tasks register on it too (the project's urls import them): another task name here.
USER_APP_TESTED = """
import os

import cronbase

app = cronbase.App(os.environ["DATABASE_URL"])


@app.task
def notify_customer(order_id: int) -> None:
    pass
"""


def test_manage_test_in_parallel_puts_each_workers_jobs_in_its_clone(
    site: Site, kept_test_database: str, server_url: str
) -> None:
    # Each worker process connects to its own clone of the test database (test_<name>_1...): the
    # App of each follows its clone.
    clones = [make_conninfo(site.url, dbname=f"{dbname(kept_test_database)}_{n}") for n in (1, 2)]
    try:
        result = site.run("test", "shop", "--keepdb", "--noinput", "--parallel", "2")
        assert result.returncode == 0, result.stderr
        assert "Ran 3 tests" in result.stderr
        # Each clone's worker ran one test class, which deferred there (a rolled-back TestCase
        # or a flushed TransactionTestCase leaves no row, but the id sequence moved); the test
        # database they were cloned from saw nothing.
        used = [rows_of(url, "SELECT is_called FROM cronbase.jobs_id_seq")[0][0] for url in clones]
        assert used == [True, True]
        assert rows_of(kept_test_database, "SELECT is_called FROM cronbase.jobs_id_seq") == [
            (False,)
        ]
    finally:
        for url in clones:
            drop_database(server_url, url)


def test_with_migrations_off_in_tests_migrate_still_creates_the_schema(
    site: Site, kept_test_database: str
) -> None:
    # Django's TEST MIGRATE False (pytest-django's --nomigrations alike): no migration runs,
    # cronbase's schema comes at the end of migrate, as the tables of apps without migrations.
    site.settings("DATABASES['default']['TEST'] = {'MIGRATE': False}")
    result = site.run("test", "shop", "--keepdb", "--noinput")
    assert result.returncode == 0, result.stderr
    assert rows_of(kept_test_database, "SELECT max(version) FROM cronbase.migrations") == [
        (migrate.LATEST_VERSION,)
    ]
    # No migration ran, not even Django's record of them.
    assert rows_of(kept_test_database, "SELECT to_regclass('django_migrations')") == [(None,)]
    assert site.rows("SELECT to_regnamespace('cronbase')") == [(None,)]


USER_TESTS = """
from django.test import TransactionTestCase

import cronbase.testing
from userapp import app, notify_customer


class UserAppTests(TransactionTestCase):
    def test_a_job_runs_on_the_test_database(self):
        notify_customer.defer(order_id=5)
        drained = cronbase.testing.drain(app)
        drained.assert_all_succeeded()
        assert [job.payload for job in drained] == [{"order_id": 5}]
"""


def test_a_users_own_app_follows_django_to_the_test_database_and_says_so(
    site: Site, kept_test_database: str
) -> None:
    (site.folder / "userapp.py").write_text(USER_APP_TESTED)
    (site.folder / "usertests.py").write_text(USER_TESTS)
    site.settings('CRONBASE = {"APP": "userapp:app", "TASKS_MODULE": None}')
    site.ok("migrate")
    result = site.run("test", "usertests", "--keepdb", "--noinput")
    assert result.returncode == 0, result.stderr
    assert "Ran 1 test" in result.stderr
    test_name = dbname(kept_test_database)
    assert (
        f"DATABASES['default'] moved to database {test_name!r} (Django's test runner?); the App "
        "of settings.CRONBASE['APP'] (userapp:app) follows it there, with the rest of its URL"
    ) in result.stderr.splitlines()
    # The test's job was written there (its sequence moved; Django's flush then emptied the
    # table), not in the project's database.
    assert rows_of(kept_test_database, "SELECT is_called FROM cronbase.jobs_id_seq") == [(True,)]
    assert site.rows("SELECT is_called FROM cronbase.jobs_id_seq") == [(False,)]


def test_the_app_follows_djangos_connection_and_closes_the_pools_it_left(
    migrated: Site, server_url: str
) -> None:
    other = new_database(server_url)
    try:
        with psycopg.connect(other, autocommit=True) as conn:
            migrate.apply_migrations(conn, "cronbase")
        migrated.extra_env["OTHER_DATABASE"] = dbname(other)
        assert migrated.scenario("follow") == {
            "followed_copy": False,
            "database": True,
            "tasks_moved": True,
            "old_pool_closed": True,
            "old_async_pool_closed": True,
            "after": [1],
            "there": [2],
        }
    finally:
        drop_database(server_url, other)


# -- manage.py cronbase's name in help and usage lines ----------------------------------------------


def test_manage_cronbase_help_names_manage_py(migrated: Site) -> None:
    for args in (("cronbase", "--help"), ("cronbase",), ("help", "cronbase")):
        out = migrated.ok(*args)
        assert out.startswith("Usage: manage.py cronbase [OPTIONS] COMMAND [ARGS]..."), args
    out = migrated.ok("cronbase", "worker", "--help")
    assert out.startswith("Usage: manage.py cronbase worker [OPTIONS]")
    bad = migrated.run("cronbase", "wrker")
    assert (bad.returncode, bad.stderr) == (
        2,
        "error: No such command 'wrker'. (Did you mean one of: 'worker', 'workers'?)\n",
    )


def test_the_console_script_keeps_its_own_name(capsys: pytest.CaptureFixture[str]) -> None:
    from cronbase.cli.main import main

    assert main(["--help"]) == 0
    assert capsys.readouterr().out.startswith("Usage: cronbase [OPTIONS] COMMAND [ARGS]...")
