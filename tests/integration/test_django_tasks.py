"""Django's tasks framework on cronbase (cronbase.contrib.django.tasks.CronbaseBackend), under
Django 6 (``django.tasks``, in .venv-django6: Python 3.12+) and Django 5.2 with the django-tasks
backport (this interpreter).

- The conformance suite (tests/django_tasks: Django's own backend tests, mirrored, and what a
  database backend adds) runs under Django's test runner in each.
- The example project (examples/django_tasks, Django 6, app code on ``django.tasks`` alone) runs
  its tasks through real ``manage.py cronbase worker`` processes.

Django runs in subprocesses only, as in test_django.py: its settings are global to a process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import psycopg
import pytest

from tests.conftest import wait_for
from tests.e2e.harness import after_inherited
from tests.integration.test_django import drop_database, new_database

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "tests" / "django_tasks"
EXAMPLE = REPO / "examples" / "django_tasks"
DRIVER = Path(__file__).with_name("django_tasks_driver.py")
DJANGO6_VENV_PYTHON = REPO / ".venv-django6" / "bin" / "python"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def django6_python() -> str:
    """The Django 6 interpreter: CRONBASE_DJANGO6_PYTHON (make test sets it, having built
    .venv-django6), else .venv-django6 when it is there."""
    given = os.environ.get("CRONBASE_DJANGO6_PYTHON")
    if given:
        python = (REPO / given).absolute()  # a relative path is the repository's
        assert python.exists(), f"CRONBASE_DJANGO6_PYTHON={given} does not exist"
        return str(python)
    if DJANGO6_VENV_PYTHON.exists():
        return str(DJANGO6_VENV_PYTHON)
    pytest.skip(
        "no Django 6 interpreter: `make test` builds .venv-django6 from Python 3.12+ and runs "
        "these (or set CRONBASE_DJANGO6_PYTHON)"
    )


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CRONBASE_", "DJANGO_")) and k not in ("DATABASE_URL", "PYTHONPATH")
    }
    env.update(extra)
    return env


def django_version(python: str) -> tuple[int, ...]:
    out = subprocess.run(
        [python, "-c", "import django; print(django.get_version())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return tuple(int(part) for part in out.strip().split(".")[:2])


@pytest.fixture
def fresh_url(server_url: str) -> Iterator[str]:
    url = new_database(server_url)
    yield url
    drop_database(server_url, url)


# -- the conformance suite ---------------------------------------------------------------------


@pytest.mark.parametrize("django", ["5.2-backport", "6"])
def test_the_backend_passes_djangos_backend_tests(django: str, fresh_url: str) -> None:
    python = sys.executable if django == "5.2-backport" else django6_python()
    version = django_version(python)
    assert version >= (6, 0) if django == "6" else (4, 2) <= version < (6, 0), version
    result = subprocess.run(
        [
            python,
            "-m",
            "django",
            "test",
            "conformance",
            "--settings=conformance_site.settings",
            "--noinput",
        ],
        cwd=SUITE,
        env=clean_env(DATABASE_URL=fresh_url, PYTHONPATH=after_inherited(str(SUITE))),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-6000:]
    lines = result.stderr.splitlines()
    ran = [line for line in lines if line.startswith("Ran ")]
    assert ran, result.stderr[-3000:]
    assert int(ran[0].split()[1]) >= 40, ran
    assert any(line.startswith("OK") for line in lines)
    # Django's test database was dropped at the end: no pooled connection of cronbase held it.
    assert "Destroying test database" in result.stderr


# -- the example project, with real worker processes -----------------------------------------


class Example:
    """examples/django_tasks under Django 6 on database ``url``."""

    def __init__(self, python: str, url: str) -> None:
        self.python = python
        self.url = url

    def env(self) -> dict[str, str]:
        return clean_env(DATABASE_URL=self.url, DJANGO_SETTINGS_MODULE="tasksite.settings")

    def manage(self, *args: str) -> str:
        result = subprocess.run(
            [self.python, "manage.py", *args],
            cwd=EXAMPLE,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, f"manage.py {' '.join(args)}:\n{result.stderr}"
        return result.stdout

    def scenario(self, name: str, *args: str) -> dict[str, Any]:
        result = subprocess.run(
            [self.python, str(DRIVER), name, *args],
            cwd=EXAMPLE,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, f"scenario {name}:\n{result.stderr}"
        loaded: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
        return loaded

    def worker(self, log: IO[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [self.python, "manage.py", "cronbase", "worker", "--poll-interval", "0.2"],
            cwd=EXAMPLE,
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(query).fetchall()


def test_the_django6_example_runs_its_tasks_through_cronbase_workers(
    fresh_url: str, tmp_path: Path
) -> None:
    example = Example(django6_python(), fresh_url)
    example.manage("migrate")
    # The admin's models (unmanaged, renamed to the App's schema at startup) match migration 0006.
    assert "No changes detected" in example.manage("makemigrations", "--check", "--dry-run")
    logs = [(tmp_path / f"worker-{n}.log").open("w") for n in (1, 2)]
    workers = [example.worker(log) for log in logs]  # two processes share the jobs
    try:
        signed = example.scenario("signup")
        # Commit keeps the subscriber and its job; the refused signup (it raised after its
        # enqueue) left neither: the job was written in the view's transaction.
        status, body = signed["kept"]
        assert (status, signed["refused"]) == (201, 500)
        assert signed["subscribers"] == ["ada@example.com"]
        assert example.rows("SELECT count(*) FROM cronbase.jobs_all") == [(1,)]
        # OPTIONS' unique window: a second welcome for the same subscriber is the same job.
        assert signed["again"] == body["task"]

        enqueued = example.scenario("enqueue")
        assert enqueued["digest_status"] == "READY"
        ids = [body["task"], *(enqueued[k] for k in ("crm", "crm_down", "digest", "count"))]
        wait_for(
            lambda: example.rows(
                "SELECT count(*) = 5 FROM cronbase.jobs_all "
                "WHERE status IN ('succeeded', 'dead', 'cancelled')"
            )[0][0],
            timeout=60,
            what="the five jobs to finish",
        )
        seen = example.scenario("results", *ids, "999999")
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        codes = [worker.wait(timeout=60) for worker in workers]
        for log in logs:
            log.close()
    assert codes == [0, 0], [(tmp_path / f"worker-{n}.log").read_text() for n in (1, 2)]

    welcome, crm, crm_down, digest, count = (seen[i] for i in ids)
    assert seen["999999"] is None  # no such result: TaskResultDoesNotExist
    assert welcome["status"] == "SUCCESSFUL"
    assert welcome["return_value"] == "welcomed ada@example.com"
    assert (welcome["args"], welcome["kwargs"]) == ([body["subscriber"]], {})

    # Retried (OPTIONS: 3 attempts, 200 ms backoff), then succeeded: each error kept.
    assert crm["status"] == "SUCCESSFUL"
    assert crm["return_value"] == {"subscriber_id": body["subscriber"], "attempt": 3}
    assert crm["attempts"] == 3
    assert len(crm["worker_ids"]) == 3
    assert [path for path, _ in crm["errors"]] == ["newsletter.tasks.CrmUnavailable"] * 2
    assert crm["errors"][1][1].endswith("CrmUnavailable: CRM unreachable (attempt 2)\n")
    assert crm["kwargs"] == {"failures": 2}
    assert crm["last_attempted_at"] > crm["started_at"]

    # Out of attempts: FAILED, three errors.
    assert crm_down["status"] == "FAILED"
    assert (crm_down["attempts"], len(crm_down["errors"])) == (3, 3)
    assert crm_down["finished_at"] is not None

    # Deferred: it did not start before its run_after.
    assert digest["status"] == "SUCCESSFUL"
    assert datetime.fromisoformat(digest["started_at"]) >= datetime.fromisoformat(
        enqueued["run_after"]
    )

    # The async task ran on the worker's event loop (Django's async ORM).
    assert (count["status"], count["return_value"]) == ("SUCCESSFUL", 1)

    # OPTIONS' cron: the schedule the workers declared.
    assert example.rows(
        "SELECT task, cron, tz FROM cronbase.schedules WHERE key = 'newsletter.tasks.purge_unconfirmed'"
    ) == [("newsletter.tasks.purge_unconfirmed", "0 3 * * *", "Europe/Berlin")]
