"""Two versions at once: a rolling deploy, with a previous release (each of previous_release.py's)
in its own venv beside this code, on one database.

(a) A deploy in the middle of work: jobs waiting (due now, due in a few seconds, in a queue the
old workers do not serve) and two running under workers of the previous release when this code's
``cronbase migrate`` brings the schema from theirs to this one's; the previous release's
producers keep deferring, this code's producers and workers join, the old workers stop
(SIGTERM) and the new ones finish. Jobs from before 0020 have no ready_xid (parked) until a
worker of this code makes them ready. (b) This code's workers drain what producers of the
previous release defer. Either way every job succeeds exactly once (each run writes a row,
committed at once, in a table of the test's; SQL counts them), none is lost and none is left
waiting.

A worker of a release before 0016 *starting* against the newer schema refuses (its
``require_current`` wants exactly its own version): documented (docs/guides/upgrade.md) and
checked here; one already running when ``cronbase migrate`` runs keeps working, the rolling-deploy
case. From 0016 on a worker starts on a newer schema unless a contract migration in it needs newer
code (tests/integration/test_migrate_contract.py): checked here too.
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
from tests.e2e.previous_release import RELEASES, Release

pytestmark = pytest.mark.timeout(240)

APP = "tests.e2e.versions_app:app"
# A queue only this code's workers serve in (a): its jobs from before 0020 stay parked till then.
FRESH = "fresh"


@dataclass(frozen=True)
class Previous:
    """A previous release: its python (a venv whose cronbase is the commit's src) and src."""

    release: Release
    python: Path
    src: Path


@pytest.fixture(scope="module", params=RELEASES, ids=lambda release: release.commit)
def previous(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Previous:
    """The previous release's src from this repository's history, in a venv of its own: no pip,
    a .pth putting that src first and then where this test run finds its dependencies (the
    same: psycopg, click... the previous release needs no other, and a compiled one is built
    for this interpreter), so ``import cronbase`` there is the previous release's, which is
    checked."""
    release: Release = request.param
    commit = release.commit
    found = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True
    )
    if found.returncode != 0:
        pytest.skip(f"the git history here lacks the previous release {commit} (a shallow clone?)")
    root = tmp_path_factory.mktemp(f"previous-release-{commit}")
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit, "src"], capture_output=True, check=True
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
    return Previous(release, python, root / "src")


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

    def produce(self, code: str, *specs: str) -> subprocess.Popen[bytes]:
        """A producer deferring jobs as ``specs`` say (START:COUNT[:QUEUE[:DELAY]], versions_app)."""
        return subprocess.Popen(
            [self.python(code), "-m", "tests.e2e.versions_app", *specs],
            env={**os.environ, **self.env(code)},
            cwd=REPO,
        )

    def worker(self, processes: WorkerProcesses, code: str, name: str, *options: str) -> Any:
        command = [self.python(code), "-m", "cronbase", "worker", "--concurrency", "2", *options]
        return processes.run(name, command, env=self.env(code))


@pytest.fixture
def deploy(
    request: pytest.FixtureRequest, database_url: str, previous: Previous
) -> Iterator[Deploy]:
    name = f"{request.node.name.split('[')[0][-20:]}_{previous.release.commit}"
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


def held_jobs(conn: psycopg.Connection[Any], d: Deploy, where: str) -> int:
    """How many of the held jobs (versions_app.HELD) that ran (r: their run, j: their job) match."""
    return int(
        scalar(
            conn,
            f"SELECT count(*) FROM {d.runs} r JOIN {d.schema}.jobs_all j ON j.id = r.job_id "
            f"WHERE r.n BETWEEN 900 AND 999 AND {where}",
        )
    )


def wait_for_all_runs(conn: psycopg.Connection[Any], d: Deploy, total: int) -> None:
    """Until ``total`` runs are recorded; past the bound, the jobs left say where they stopped."""
    try:
        wait_for_runs(conn, d, "true", total)
    except pytest.fail.Exception:
        left = conn.execute(
            f"SELECT id, queue, status, run_at, attempts, locked_by, ready_xid "
            f"FROM {d.schema}.jobs ORDER BY id LIMIT 20"
        ).fetchall()
        pytest.fail(f"{total} runs not reached; jobs left (first 20): {left}")


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
    release = d.previous.release
    d.cli("previous", "migrate")
    with (
        psycopg.connect(d.database_url, autocommit=True) as conn,
        psycopg.connect(d.database_url, autocommit=True) as gate,
        WorkerProcesses(d.database_url, tmp_path) as processes,
    ):
        assert schema_version(conn, d.schema) == release.schema_version
        # The held jobs (versions_app.HELD) run until this lock is let go: through the deploy.
        gate.execute("SELECT pg_advisory_lock(hashtext(%s))", [d.runs])
        # What is there when the deploy starts, deferred by the previous release: two jobs that
        # are soon running under its workers, jobs due now and in a few seconds, and the same in
        # a queue its workers do not serve (so some are still waiting when this code's start).
        seeded = d.produce(
            "previous", "900:2", "0:150", "600:20::3", f"700:20:{FRESH}", f"720:20:{FRESH}:3"
        )
        assert seeded.wait(60) == 0
        olds = [
            d.worker(processes, "previous", f"previous-{i}", "--queue", "default") for i in range(2)
        ]
        wait_for_runs(conn, d, "n IN (900, 901)", 2)
        wait_for_runs(conn, d, "n < 900", 10)

        # The deploy: this code's migrate, while they drain and the previous release's
        # producers keep deferring.
        producing = d.produce("previous", "1000:100")
        migrated = d.cli("current", "migrate")
        assert f"migrated to version {LATEST_VERSION}" in migrated.stdout, migrated.stdout
        assert schema_version(conn, d.schema) == LATEST_VERSION
        assert producing.wait(60) == 0
        # The held jobs are still running under the previous release's workers.
        assert held_jobs(conn, d, "j.status = 'running' AND r.code = 'previous'") == 2
        if release.schema_version < 20:
            # Jobs from before 0020 have no ready_xid: the queue no running worker serves keeps
            # its jobs parked until a worker of this code starts.
            assert (
                scalar(
                    conn,
                    f"SELECT count(*) FROM {d.schema}.jobs "
                    f"WHERE queue = '{FRESH}' AND ready_xid IS NULL",
                )
                == 40
            )
        # A worker of the previous release starting now: one from 0016 on starts (every
        # migration since is expand-only), one before refuses, naming the fix (documented).
        late = d.cli("previous", "worker", "--burst", "--queue", "none", check=False)
        if release.starts_on_newer_schema:
            assert late.returncode == 0, late.stdout + late.stderr
        else:
            assert late.returncode != 0
            assert (
                f"is at version {LATEST_VERSION}, this cronbase needs {release.schema_version}"
                in (late.stdout + late.stderr)
            )

        # This code's producers defer while only the previous release's workers run...
        app = cronbase.App(d.database_url, schema=d.schema)

        @app.task(name="count")
        def count(n: int) -> None: ...

        def produce() -> None:
            for start in range(2000, 2200, 20):
                count.defer(n=start)
                count.defer_many([{"n": n} for n in range(start + 1, start + 20)])

        producer = threading.Thread(target=produce)
        producer.start()
        # ... and those workers run this code's jobs on the migrated schema.
        wait_for_runs(conn, d, "code = 'previous' AND n >= 2000", 10)
        # This code's workers join, while producers of both releases defer.
        news = [d.worker(processes, "current", f"current-{i}") for i in range(2)]
        producing = d.produce("previous", "3000:100")
        producer.join(60)
        assert not producer.is_alive()
        assert producing.wait(60) == 0
        # The jobs of the queue only they serve run, parked ones too.
        wait_for_runs(conn, d, "n BETWEEN 700 AND 739", 40)
        wait_for(
            lambda: scalar(conn, f"SELECT count(*) FROM {d.schema}.workers") == 4,
            what="this code's workers registered",
        )
        # The Workers page's view: the old ones record the migration they know from 0016 on.
        old = release.schema_version if release.starts_on_newer_schema else 0
        seen = sorted(w.schema_version or 0 for w in app.workers())
        assert seen == [old, old, LATEST_VERSION, LATEST_VERSION]
        app.close()

        # The held jobs end, on the code that ran them, after the migration: then the old
        # workers stop, and the previous release's producers still defer, for the new ones.
        gate.execute("SELECT pg_advisory_unlock(hashtext(%s))", [d.runs])
        wait_for(
            lambda: held_jobs(conn, d, "j.status = 'succeeded'") == 2,
            timeout=60,
            what="the held jobs done",
        )
        for process in olds:
            process.send(signal.SIGTERM)
        for process in olds:
            assert process.wait_exit() == 0, process.log()
        assert d.produce("previous", "4000:100").wait(60) == 0

        numbers = {900, 901, *range(150), *range(600, 620), *range(700, 740)}
        numbers |= {*range(1000, 1100), *range(2000, 2200), *range(3000, 3100)}
        numbers |= set(range(4000, 4100))
        wait_for_all_runs(conn, d, len(numbers))
        for process in news:
            process.send(signal.SIGTERM)
        for process in news:
            assert process.wait_exit() == 0, process.log()
        # Succeeded, each: none is left waiting, parked or not.
        assert_each_job_ran_once(conn, d, numbers)
        # No worker of either release logged an error on the way.
        for started in processes.started:
            errors = [x for x in started.log().splitlines() if "ERROR" in x or "Traceback" in x]
            assert errors == [], (started.name, errors[:10])
        assert (
            held_jobs(
                conn,
                d,
                f"r.code = 'previous' AND j.finished_at > "
                f"(SELECT max(applied_at) FROM {d.schema}.migrations)",
            )
            == 2
        )
        # What only this code's workers could run (a queue the old ones did not serve, jobs
        # deferred once they had stopped), they ran.
        assert not scalar(
            conn,
            f"SELECT count(*) FROM {d.runs} r JOIN {d.schema}.jobs_all j ON j.id = r.job_id "
            f"WHERE (r.n >= 4000 OR j.queue = '{FRESH}') AND r.code <> 'current'",
        )


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
        producers = [d.produce("previous", f"{start}:200") for start in (0, 1000)]
        assert [p.wait(60) for p in producers] == [0, 0]
        wait_for_all_runs(conn, d, 400)
        for process in news:
            process.send(signal.SIGTERM)
        for process in news:
            assert process.wait_exit() == 0, process.log()
        assert_each_job_ran_once(conn, d, set(range(200)) | set(range(1000, 1200)))
        assert scalar(conn, f"SELECT count(DISTINCT code) FROM {d.runs}") == 1
        assert not scalar(
            conn, f"SELECT count(*) FROM {d.schema}.jobs_all WHERE task_version IS NOT NULL"
        )
