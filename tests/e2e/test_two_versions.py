"""Two versions at once: a rolling deploy, with the previous release (previous_release.py) in its
own venv beside this code, on one database.

(a) Workers of the previous release drain while this code's ``cronbase migrate`` brings the
schema from theirs (0013) to this one's, then while this code's producers defer and this code's
worker joins. (b) This code's workers drain what producers of the previous release defer.
Either way every job succeeds exactly once (each run writes a row, committed at once, in a table
of the test's; SQL counts them) and nothing is lost.

A worker of the previous release *starting* against the newer schema refuses (its
``require_current`` wants exactly its own version): documented (README: Rolling deploys) and
checked here; one already running when ``cronbase migrate`` runs keeps working, the rolling-deploy
case. From 0016 on a worker starts on a newer schema unless a contract migration in it needs newer
code (tests/integration/test_migrate_contract.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.db.migrate import LATEST_VERSION, schema_version
from tests.conftest import wait_for
from tests.e2e.harness import REPO, WorkerProcesses, python_path
from tests.e2e.previous_release import COMMIT, SCHEMA_VERSION

pytestmark = pytest.mark.timeout(240)

APP = "tests.e2e.versions_app:app"


@dataclass(frozen=True)
class Previous:
    """The previous release: its python (a venv whose cronbase is the commit's src) and src."""

    python: Path
    src: Path


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Previous:
    """The previous release's src from this repository's history, in a venv of its own: no pip,
    a .pth putting that src first and then where this test run finds its dependencies (the
    same: psycopg, click... the previous release needs no other, and a compiled one is built
    for this interpreter), so ``import cronbase`` there is the previous release's, which is
    checked."""
    found = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{COMMIT}^{{commit}}"], capture_output=True
    )
    if found.returncode != 0:
        pytest.skip(f"the git history here lacks the previous release {COMMIT} (a shallow clone?)")
    root = tmp_path_factory.mktemp("previous-release")
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", COMMIT, "src"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # Where this test run finds its dependencies (its venv's site-packages, or what a .pth of
    # it adds), but not this code's cronbase; after the previous release's src in any case.
    ours = [
        p
        for p in dict.fromkeys([sysconfig.get_paths()["purelib"], *sys.path])
        if p and Path(p).is_dir() and not Path(p, "cronbase", "__init__.py").exists()
    ]
    lines = [str(root / "src"), *ours]
    Path(purelib, "cronbase_previous.pth").write_text("\n".join(lines) + "\n")
    imported = subprocess.run(
        [str(python), "-c", "import cronbase, psycopg; print(cronbase.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    ).stdout.strip()
    assert Path(imported).is_relative_to(root / "src"), imported
    return Previous(python, root / "src")


@dataclass
class Deploy:
    """One schema and one table of runs for a test, and how to run either release."""

    database_url: str
    schema: str
    runs: str
    previous: Previous

    def env(self, code: str) -> dict[str, str]:
        env = {
            "CRONBASE_DATABASE_URL": self.database_url,
            "CRONBASE_APP": APP,
            "VERSIONS_SCHEMA": self.schema,
            "VERSIONS_RUNS": self.runs,
            "VERSIONS_CODE": code,
        }
        # The previous release's python must not see this code's src (PYTHONPATH=src in a
        # worktree): the repository only, for the tests' app.
        env["PYTHONPATH"] = str(REPO) if code == "previous" else python_path()
        return env

    def python(self, code: str) -> str:
        return str(self.previous.python) if code == "previous" else sys.executable

    def cli(self, code: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [self.python(code), "-m", "cronbase", "--schema", self.schema, *args],
            env={**os.environ, **self.env(code)},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and done.returncode != 0:  # with what it said, not only its exit status
            pytest.fail(
                f"{code} cronbase {' '.join(args)}: exit {done.returncode}\n"
                f"{done.stdout}{done.stderr}"
            )
        return done

    def produce(self, code: str, start: int, count: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [self.python(code), "-m", "tests.e2e.versions_app", str(start), str(count), "20"],
            env={**os.environ, **self.env(code)},
            cwd=REPO,
        )

    def worker(self, processes: WorkerProcesses, code: str, name: str) -> Any:
        command = [self.python(code), "-m", "cronbase", "worker", "--concurrency", "2"]
        return processes.run(name, command, env=self.env(code))


@pytest.fixture
def deploy(
    request: pytest.FixtureRequest, database_url: str, previous: Previous
) -> Iterator[Deploy]:
    name = request.node.name.split("[")[0][-20:]
    schema, runs = f"cronbase_v_{name}", f"runs_{name}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"DROP TABLE IF EXISTS {runs}")
        conn.execute(
            f"CREATE TABLE {runs} (job_id bigint NOT NULL, n integer NOT NULL, "
            "code text NOT NULL, pid integer NOT NULL, "
            "at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        yield Deploy(database_url, schema, runs, previous)
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"DROP TABLE IF EXISTS {runs}")


def scalar(conn: psycopg.Connection[Any], query: str) -> Any:
    row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def assert_each_job_ran_once(conn: psycopg.Connection[Any], d: Deploy, numbers: set[int]) -> None:
    """Every job deferred succeeded after one attempt, ran exactly once, and none is missing."""
    jobs = conn.execute(
        f"SELECT status, attempts, count(*) FROM {d.schema}.jobs_all GROUP BY 1, 2"
    ).fetchall()
    assert jobs == [("succeeded", 1, len(numbers))]
    runs = conn.execute(f"SELECT job_id, n FROM {d.runs}").fetchall()
    assert len(runs) == len({job for job, _ in runs}) == len(numbers), "a job ran twice"
    assert {n for _, n in runs} == numbers, "a deferred job is missing"
    assert not scalar(
        conn,
        f"SELECT count(*) FROM {d.schema}.jobs_all j WHERE NOT EXISTS "
        f"(SELECT FROM {d.runs} r WHERE r.job_id = j.id)",
    )


def wait_for_runs(conn: psycopg.Connection[Any], d: Deploy, where: str, at_least: int) -> None:
    wait_for(
        lambda: scalar(conn, f"SELECT count(*) FROM {d.runs} WHERE {where}") >= at_least,
        timeout=90,
        what=f"{at_least} runs where {where}",
    )


def test_previous_workers_drain_through_migrate_new_producers_and_new_workers(
    deploy: Deploy, tmp_path: Path
) -> None:
    d = deploy
    d.cli("previous", "migrate")
    with (
        psycopg.connect(d.database_url, autocommit=True) as conn,
        WorkerProcesses(d.database_url, tmp_path) as processes,
    ):
        assert schema_version(conn, d.schema) == SCHEMA_VERSION
        olds = [d.worker(processes, "previous", f"previous-{i}") for i in range(2)]
        wait_for(
            lambda: scalar(conn, f"SELECT count(*) FROM {d.schema}.workers") == 2,
            what="the previous release's workers registered",
        )
        # The previous release's producers' work is being drained when the deploy starts.
        assert d.produce("previous", 0, 400).wait(60) == 0
        wait_for_runs(conn, d, "code = 'previous'", 10)

        # The deploy: this code's migrate, while they drain.
        migrated = d.cli("current", "migrate")
        assert f"migrated to version {LATEST_VERSION}" in migrated.stdout, migrated.stdout
        assert schema_version(conn, d.schema) == LATEST_VERSION
        # Documented: a worker of the previous release STARTING now refuses, naming the fix.
        late = d.cli("previous", "worker", "--burst", check=False)
        assert late.returncode != 0
        assert f"is at version {LATEST_VERSION}, this cronbase needs {SCHEMA_VERSION}" in (
            late.stdout + late.stderr
        )

        # This code's producers defer while only the previous release's workers run...
        app = cronbase.App(d.database_url, schema=d.schema)

        @app.task(name="count")
        def count(n: int) -> None: ...

        def produce() -> None:
            for start in range(1000, 1300, 20):
                count.defer(n=start)
                count.defer_many([{"n": n} for n in range(start + 1, start + 20)])

        producer = threading.Thread(target=produce)
        producer.start()
        # ... and those workers run this code's jobs on the migrated schema.
        wait_for_runs(conn, d, "code = 'previous' AND n >= 1000", 20)
        new = d.worker(processes, "current", "current-0")
        producer.join(60)
        assert d.produce("current", 2000, 100).wait(60) == 0
        wait_for(
            lambda: scalar(conn, f"SELECT count(*) FROM {d.runs}") >= 800,
            timeout=120,
            what="the 800 jobs run",
        )
        # The Workers page's view: the old ones record no code version, the new one its own.
        seen = sorted((w.schema_version or 0, w.version is None) for w in app.workers())
        assert seen == [(0, True), (0, True), (LATEST_VERSION, False)]
        app.close()
        for process in [*olds, new]:
            process.send(signal.SIGTERM)
        for process in [*olds, new]:
            assert process.wait_exit() == 0, process.log()
        assert_each_job_ran_once(
            conn, d, set(range(400)) | set(range(1000, 1300)) | set(range(2000, 2100))
        )
        # The drain spanned the migration: jobs waiting before it ran after it, on old code.
        assert scalar(
            conn,
            f"SELECT count(*) FROM {d.runs} r WHERE r.code = 'previous' AND r.n < 1000 AND r.at"
            f" > (SELECT max(applied_at) FROM {d.schema}.migrations)",
        )
        codes = dict(conn.execute(f"SELECT code, count(*) FROM {d.runs} GROUP BY 1").fetchall())
        assert codes.get("previous", 0) >= 30


def test_new_workers_drain_what_previous_producers_defer(deploy: Deploy, tmp_path: Path) -> None:
    d = deploy
    d.cli("current", "migrate")
    with (
        psycopg.connect(d.database_url, autocommit=True) as conn,
        WorkerProcesses(d.database_url, tmp_path) as processes,
    ):
        news = [d.worker(processes, "current", f"current-{i}") for i in range(2)]
        wait_for(
            lambda: scalar(conn, f"SELECT count(*) FROM {d.schema}.workers") == 2,
            what="this code's workers registered",
        )
        # Two producers of the previous release at once, while the drain runs.
        producers = [d.produce("previous", start, 200) for start in (0, 1000)]
        assert [p.wait(60) for p in producers] == [0, 0]
        wait_for(
            lambda: scalar(conn, f"SELECT count(*) FROM {d.runs}") >= 400,
            timeout=120,
            what="the 400 jobs run",
        )
        for process in news:
            process.send(signal.SIGTERM)
        for process in news:
            assert process.wait_exit() == 0, process.log()
        assert_each_job_ran_once(conn, d, set(range(200)) | set(range(1000, 1200)))
        assert scalar(conn, f"SELECT count(DISTINCT code) FROM {d.runs}") == 1
        assert not scalar(
            conn, f"SELECT count(*) FROM {d.schema}.jobs_all WHERE task_version IS NOT NULL"
        )
