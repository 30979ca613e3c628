"""Working a queue from SQL (migration 0024, docs/reference/sql.md): cronbase.claim(), renew(),
complete(), fail() and release() write what the Python worker's statements write (twin jobs, one
ended by each, compared), are fenced by the lease token, take only their worker's tasks, refuse
bad input naming it; and a Node worker (examples/node/worker.mjs) and a Python worker, both
killed once while holding a job, work one queue with every job's effect written exactly once."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

import cronbase
from cronbase.db.grants import INTERFACE_PRIVILEGES
from cronbase.retry import Backoff
from cronbase.worker.claim import ClaimedJob, done_params
from tests.conftest import claim_rows, wait_for
from tests.integration.sql_worker_app import SETUP

REPO = Path(__file__).resolve().parents[2]
NODE_EXAMPLES = REPO / "examples" / "node"
# What differs between twins by design: ids, times, the lease token, the worker holding it, and
# the engine's ready_xid.
ENGINE_OWN = {
    "id",
    "run_at",
    "locked_until",
    "lease_token",
    "locked_by",
    "started_at",
    "created_at",
    "updated_at",
    "finished_at",
    "ready_xid",
}


def job_row(db: psycopg.Connection[Any], job_id: int, table: str = "jobs") -> dict[str, Any]:
    # A waiting job's run_at - updated_at: the retry delay a failure set (both the statement's
    # now()).
    delay = ", run_at - updated_at AS delay" if table == "jobs" else ""
    with db.cursor(row_factory=dict_row) as cur:
        found = cur.execute(
            f"SELECT *{delay} FROM cronbase.{table} WHERE id = %s", [job_id]
        ).fetchone()
    assert found is not None, f"no job {job_id} in {table}"
    return {k: v for k, v in found.items() if k not in ENGINE_OWN}


def attempts(db: psycopg.Connection[Any], job_id: int) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT attempt, outcome, error, error_type, traceback, finished_at >= started_at"
        " FROM cronbase.job_attempts WHERE job_id = %s ORDER BY attempt",
        [job_id],
    ).fetchall()


def register(db: psycopg.Connection[Any], worker: str, tasks: list[str]) -> None:
    db.execute("SELECT cronbase.register_worker(%s, NULL, %s)", [worker, tasks])


def sql_claim(db: psycopg.Connection[Any], worker: str, n: int = 1) -> list[dict[str, Any]]:
    with db.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM cronbase.claim(%s, %s)", [worker, n]).fetchall()


@pytest.fixture
def twins(app: cronbase.App, db: psycopg.Connection[Any]) -> cronbase.Task[Any, Any]:
    @app.task(name="twin", max_attempts=2)
    def twin(n: int) -> None:
        pass

    register(db, "sqlw", ["twin"])
    return twin


def claim_twins(
    app: cronbase.App, db: psycopg.Connection[Any], twin: cronbase.Task[Any, Any]
) -> tuple[ClaimedJob, dict[str, Any]]:
    """Two jobs deferred alike: the first leased by Python's claim, the second by SQL's."""
    twin.defer(n=1)
    twin.defer(n=1)
    (python,), _ = claim_rows(app, db, 1, worker="py", tasks=["twin"])
    (sql,) = sql_claim(db, "sqlw")
    assert (python.id, sql["id"]) == (1, 2)
    assert (sql["task"], sql["args"], sql["attempt"], sql["max_attempts"]) == (
        "twin",
        {"n": 1},
        1,
        2,
    )
    return python, sql


def test_a_success_is_the_history_row_python_writes(
    app: cronbase.App, db: psycopg.Connection[Any], twins: cronbase.Task[Any, Any]
) -> None:
    python, sql = claim_twins(app, db, twins)
    python.result = json.dumps({"sent": 3})
    (written,) = db.execute(app.queries.complete_jobs, done_params([python])).fetchone() or [None]
    assert written == [python.id]
    done = db.execute(
        "SELECT cronbase.complete('sqlw', %s, %s, %s::jsonb)",
        [sql["id"], sql["lease_token"], json.dumps({"sent": 3})],
    ).fetchone()
    assert done == (True,)
    from_sql = job_row(db, sql["id"], "jobs_history")
    assert from_sql == job_row(db, python.id, "jobs_history")
    assert (from_sql["status"], from_sql["result"], from_sql["progress"]) == (
        "succeeded",
        {"sent": 3},
        100,
    )
    assert attempts(db, sql["id"]) == attempts(db, python.id) == []
    # The Workers page's count.
    assert db.execute("SELECT succeeded_jobs FROM cronbase.workers").fetchone() == (1,)


def test_a_failure_retried_or_dead_is_what_python_writes(
    app: cronbase.App, db: psycopg.Connection[Any], twins: cronbase.Task[Any, Any]
) -> None:
    def finish(job: ClaimedJob, outcome: str, retry_in: float) -> None:
        db.execute(
            app.queries.finish_jobs,
            {
                "ids": [job.id],
                "tokens": [job.lease_token],
                "outcomes": [outcome],
                "retry_in": [retry_in],
                "errors": ["ValueError: no such user"],
                "error_types": ["ValueError"],
                "tracebacks": ["Traceback ..."],
                "snooze_caps": [0],
                "worker": "py",
            },
        )

    python, sql = claim_twins(app, db, twins)
    finish(python, "failed", 30.0)
    status = db.execute(
        "SELECT cronbase.fail('sqlw', %s, %s, 'ValueError: no such user',"
        " retry_in => interval '30 seconds', error_type => 'ValueError',"
        " traceback => 'Traceback ...')",
        [sql["id"], sql["lease_token"]],
    ).fetchone()
    assert status == ("failed",)
    retried = job_row(db, sql["id"])
    assert retried == job_row(db, python.id)
    assert (retried["status"], retried["attempts"], retried["delay"].total_seconds()) == (
        "failed",
        1,
        30.0,
    )
    assert attempts(db, sql["id"]) == attempts(db, python.id)
    assert attempts(db, sql["id"])[0][:4] == (1, "failed", "ValueError: no such user", "ValueError")

    # The second and last attempt of each (due now, claimed again): dead, moved to the history.
    db.execute("UPDATE cronbase.jobs SET run_at = now()")
    (python,), _ = claim_rows(app, db, 1, worker="py", tasks=["twin"])
    (sql,) = sql_claim(db, "sqlw")
    assert (python.attempt, sql["attempt"]) == (2, 2)
    finish(python, "failed", 30.0)
    status = db.execute(
        "SELECT cronbase.fail('sqlw', %s, %s, 'ValueError: no such user',"
        " error_type => 'ValueError', traceback => 'Traceback ...')",
        [sql["id"], sql["lease_token"]],
    ).fetchone()
    assert status == ("dead",)
    dead = job_row(db, sql["id"], "jobs_history")
    assert dead == job_row(db, python.id, "jobs_history")
    assert (dead["status"], dead["last_error"]) == ("dead", "ValueError: no such user")
    assert attempts(db, sql["id"]) == attempts(db, python.id)
    assert [a[1] for a in attempts(db, sql["id"])] == ["failed", "dead"]
    assert db.execute("SELECT failed_attempts FROM cronbase.workers").fetchone() == (2,)


def test_give_up_is_pythons_dead_outcome(
    app: cronbase.App, db: psycopg.Connection[Any], twins: cronbase.Task[Any, Any]
) -> None:
    python, sql = claim_twins(app, db, twins)
    db.execute(
        app.queries.finish_jobs,
        {
            "ids": [python.id],
            "tokens": [python.lease_token],
            "outcomes": ["dead"],
            "retry_in": [0.0],
            "errors": ["Fatal"],
            "error_types": [None],
            "tracebacks": [None],
            "snooze_caps": [0],
            "worker": "py",
        },
    )
    status = db.execute(
        "SELECT cronbase.fail('sqlw', %s, %s, 'Fatal', give_up => true)",
        [sql["id"], sql["lease_token"]],
    ).fetchone()
    assert status == ("dead",)
    assert job_row(db, sql["id"], "jobs_history") == job_row(db, python.id, "jobs_history")
    assert attempts(db, sql["id"]) == attempts(db, python.id)


def test_a_release_is_pythons_hand_back(
    app: cronbase.App, db: psycopg.Connection[Any], twins: cronbase.Task[Any, Any]
) -> None:
    python, sql = claim_twins(app, db, twins)
    db.execute("LISTEN cronbase_jobs")
    db.execute(
        app.queries.release_jobs,
        {
            "ids": [python.id],
            "tokens": [python.lease_token],
            "worker": "py",
            "channel": "cronbase_jobs",
            "reason": "worker shut down before it finished",
        },
    )
    released = db.execute(
        "SELECT cronbase.release('sqlw', %s, %s)", [[sql["id"]], [sql["lease_token"]]]
    ).fetchall()
    assert released == [(sql["id"],)]
    assert job_row(db, sql["id"]) == job_row(db, python.id)
    assert job_row(db, sql["id"])["status"] == "queued"
    assert attempts(db, sql["id"]) == attempts(db, python.id)
    assert [n.payload for n in db.notifies(timeout=5, stop_after=2)] == ["default", "default"]


def test_the_default_retry_delay_is_pythons_backoff(
    db: psycopg.Connection[Any], twins: cronbase.Task[Any, Any]
) -> None:
    for attempt in (1, 2):
        twins.defer(n=attempt)
        (job,) = sql_claim(db, "sqlw")
        db.execute(
            "UPDATE cronbase.jobs SET attempts = %s, max_attempts = 20 WHERE id = %s",
            [attempt, job["id"]],
        )
        db.execute("SELECT cronbase.fail('sqlw', %s, %s, 'x')", [job["id"], job["lease_token"]])
        low, high = Backoff().bounds(attempt)
        delay = job_row(db, job["id"])["delay"]
        assert low <= delay <= high, (attempt, delay)


def test_a_parent_completed_from_sql_releases_its_child(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    """jobs_history's triggers fire for complete()'s move as for Python's: the child of a chain
    is released with its parent's result."""

    @app.task
    def parent() -> None:
        pass

    @app.task
    def child(previous: int) -> None:
        pass

    register(db, "sqlw", [parent.name])
    cronbase.chain(parent.s(), child.s()).defer()
    (job,) = sql_claim(db, "sqlw")
    db.execute("SELECT cronbase.complete('sqlw', %s, %s, '7')", [job["id"], job["lease_token"]])
    waiting = db.execute(
        "SELECT task, status, parents_left, receives IS NOT NULL FROM cronbase.jobs"
    ).fetchall()
    assert waiting == [(child.name, "queued", 0, True)]


def test_a_lost_lease_writes_nothing(
    app: cronbase.App, db: psycopg.Connection[Any], twins: cronbase.Task[Any, Any]
) -> None:
    twins.defer(n=1)
    (held,) = sql_claim(db, "sqlw")
    renewed = db.execute(
        "SELECT cronbase.renew('sqlw', %s, %s)", [[held["id"]], [held["lease_token"]]]
    ).fetchall()
    assert renewed == [(held["id"],)]
    # The lease runs out and a Python worker's reaper takes the job back: the attempt is lost.
    db.execute("UPDATE cronbase.jobs SET locked_until = now() - interval '1 second'")
    reaped = db.execute(
        app.queries.reap_expired_jobs, {"limit": 10, "channel": "cronbase_jobs", "since": None}
    ).fetchall()
    assert reaped == [(held["id"], "failed")]
    # Then claimed again (a new token): the old attempt's calls change nothing of the new one's.
    db.execute("UPDATE cronbase.jobs SET run_at = now()")
    (again,) = sql_claim(db, "sqlw")
    assert (again["id"], again["attempt"]) == (held["id"], 2)
    before = (job_row(db, held["id"]), attempts(db, held["id"]))
    old = [held["id"], held["lease_token"]]
    assert db.execute("SELECT cronbase.complete('sqlw', %s, %s)", old).fetchone() == (False,)
    assert db.execute("SELECT cronbase.fail('sqlw', %s, %s, 'late')", old).fetchone() == (None,)
    assert db.execute("SELECT cronbase.renew('sqlw', ARRAY[%s], ARRAY[%s])", old).fetchall() == []
    assert db.execute("SELECT cronbase.release('sqlw', ARRAY[%s], ARRAY[%s])", old).fetchall() == []
    assert (job_row(db, held["id"]), attempts(db, held["id"])) == before
    assert [a[1] for a in before[1]] == ["lost"]
    assert db.execute("SELECT count(*) FROM cronbase.jobs_history").fetchone() == (0,)


def test_a_claim_takes_its_tasks_and_leaves_pythons_to_python(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def python_task() -> None:
        pass

    for _ in range(3):
        python_task.defer()
        db.execute("SELECT cronbase.defer('node_task')")
    register(db, "node-1", ["node_task"])
    # A live Python worker knows python_task: its jobs are passed over, not parked.
    db.execute(
        "INSERT INTO cronbase.workers (id, hostname, pid, concurrency, tasks)"
        " VALUES ('py-1', 'h', 1, 1, ARRAY[%s])",
        [python_task.name],
    )
    taken = sql_claim(db, "node-1", 10)
    assert sorted(j["task"] for j in taken) == ["node_task"] * 3
    python_jobs, _ = claim_rows(app, db, 10, worker="py-1", tasks=[python_task.name])
    assert [j.task for j in python_jobs] == [python_task.name] * 3
    # The worker's row is what the Workers page shows; its claim marks it seen.
    row = db.execute(
        "SELECT hostname, pid, queues, concurrency, tasks, version, schema_version"
        " FROM cronbase.workers WHERE id = 'node-1'"
    ).fetchone()
    assert row is not None
    assert row[1:] == (0, None, 1, ["node_task"], "sql", 24)
    # A job of a task no live worker knows waits (parked) until one that knows it registers.
    db.execute("SELECT cronbase.defer('later_task')")
    assert sql_claim(db, "node-1", 10) == []
    register(db, "node-2", ["later_task"])
    assert [j["task"] for j in sql_claim(db, "node-2", 10)] == ["later_task"]
    db.execute("SELECT cronbase.unregister_worker('node-2')")
    assert db.execute("SELECT count(*) FROM cronbase.workers").fetchone() == (2,)


# Each bad call and the words its refusal names.
REFUSED = [
    ("register_worker('', NULL, ARRAY['t'])", "invalid worker id ''"),
    ("register_worker('w', NULL, NULL)", "worker 'w' must name its tasks"),
    ("register_worker('w', NULL, '{}')", "worker 'w' must name its tasks"),
    ("register_worker('w', NULL, ARRAY['bad name'])", "invalid task name 'bad name'"),
    ("register_worker('w', NULL, ARRAY['t@1'])", "invalid task name 't@1'"),
    ("register_worker('w', ARRAY['no such'], ARRAY['t'])", "invalid queue name 'no such'"),
    ("register_worker('w', NULL, ARRAY['t'], concurrency => 0)", "must be from 1 to 1000, got 0"),
    ("claim('w', 0)", "max_jobs must be from 1 to 1000, got 0"),
    ("claim('w', 1001)", "got 1001"),
    ("claim('nobody', 1)", "worker 'nobody' is not registered"),
    ("claim('w', 1, tasks => ARRAY['other'])", "did not register task 'other'"),
    ("claim('w', 1, queues => ARRAY['a b'])", "invalid queue name 'a b'"),
    ("renew('w', ARRAY[1, 2], ARRAY[gen_random_uuid()])", "2 ids, 1 tokens"),
    ("release('w', ARRAY[1], NULL)", "1 ids, NULL tokens"),
    ("fail('w', 1, gen_random_uuid(), 'x', retry_in => interval '-1 second')", "-00:00:01"),
]


@pytest.mark.parametrize(("call", "named"), REFUSED)
def test_bad_input_is_refused_naming_it(db: psycopg.Connection[Any], call: str, named: str) -> None:
    register(db, "w", ["t"])
    with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
        db.execute(f"SELECT * FROM cronbase.{call}")
    message = str(refused.value).splitlines()[0]
    assert named in message, message
    assert db.execute("SELECT id FROM cronbase.workers").fetchall() == [("w",)]


def test_a_result_too_big_is_refused(
    db: psycopg.Connection[Any], twins: cronbase.Task[Any, Any]
) -> None:
    twins.defer(n=1)
    (job,) = sql_claim(db, "sqlw")
    big = json.dumps({"a": "x" * 65536})
    with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="more than the 65,536"):
        db.execute(
            "SELECT cronbase.complete('sqlw', %s, %s, %s::jsonb)",
            [job["id"], job["lease_token"], big],
        )
    assert job_row(db, job["id"])["status"] == "running"


def test_the_interface_keeps_its_signatures(db: psycopg.Connection[Any]) -> None:
    """What other languages call is versioned by its signature (as defer's, test_sql_defer)."""
    found = db.execute(
        "SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',"
        " pg_get_function_result(p.oid), p.prosecdef,"
        " has_function_privilege('public', p.oid, 'EXECUTE')"
        " FROM pg_proc p WHERE p.pronamespace = 'cronbase'::regnamespace"
        "  AND p.proname IN ('register_worker', 'unregister_worker', 'claim', 'renew',"
        "                    'complete', 'fail', 'release')"
        " ORDER BY 1"
    ).fetchall()
    assert found == [
        (
            "claim(worker text, max_jobs integer, queues text[], tasks text[])",
            "TABLE(id bigint, task text, queue text, args jsonb, attempt integer, max_attempts"
            " integer, lease_token uuid, lease_expires_at timestamp with time zone, metadata"
            " jsonb, task_version integer)",
            True,
            False,
        ),
        ("complete(worker text, id bigint, token uuid, result jsonb)", "boolean", True, False),
        (
            "fail(worker text, id bigint, token uuid, error text, retry_in interval, error_type"
            " text, give_up boolean, traceback text)",
            "text",
            True,
            False,
        ),
        (
            "register_worker(worker text, queues text[], tasks text[], hostname text, pid"
            " integer, concurrency integer)",
            "void",
            True,
            False,
        ),
        ("release(worker text, ids bigint[], tokens uuid[])", "SETOF bigint", True, False),
        ("renew(worker text, ids bigint[], tokens uuid[])", "SETOF bigint", True, False),
        ("unregister_worker(worker text)", "void", True, False),
    ]
    # Each is granted by the signature the grant names.
    granted = sorted(
        db.execute("SELECT %s::regprocedure::text", [f"cronbase.{name}"]).fetchone()[0]  # type: ignore[index]
        for name in INTERFACE_PRIVILEGES
    )
    assert [g.partition("(")[0] for g in granted] == [
        "cronbase.claim",
        "cronbase.complete",
        "cronbase.defer",
        "cronbase.fail",
        "cronbase.register_worker",
        "cronbase.release",
        "cronbase.renew",
        "cronbase.unregister_worker",
    ]


# -- a Node worker and a Python worker on one queue, each killed once ------------------------------


def node_env(database_url: str) -> dict[str, str]:
    """libpq's variables, which node-postgres reads as psql does (test_sql_defer's reason)."""
    given = conninfo_to_dict(database_url)
    names = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "dbname": "PGDATABASE"}
    env = {var: str(given[key]) for key, var in names.items() if given.get(key)}
    if given.get("password"):
        env["PGPASSWORD"] = str(given["password"])
    return {**env, "PATH": "/usr/bin:/bin"}


class Processes:
    """The workers started, their output in files; SIGKILLed if still running at the end."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.started: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.folder / f"{name}.log").open("wb")
        popen = subprocess.Popen(
            command, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
        )
        log.close()
        self.started.append((name, popen))
        return popen

    def check_running(self) -> None:
        """Fail at once, rather than at a deadline, when a worker not killed here has exited."""
        for name, popen in self.started:
            code = popen.poll()
            assert code in (None, -signal.SIGKILL), f"worker {name} exited with {code}"

    def kill(self, popen: subprocess.Popen[bytes]) -> None:
        popen.send_signal(signal.SIGKILL)
        assert popen.wait(30) == -signal.SIGKILL

    def logs(self) -> str:
        return "\n".join(
            f"---- {name} ----\n{(self.folder / f'{name}.log').read_text(errors='replace')}"
            for name, _ in self.started
        )

    def close(self) -> None:
        for _, popen in self.started:
            if popen.poll() is None:
                popen.kill()
                popen.wait(30)


N = 20


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_node_and_python_workers_share_a_queue_through_kills(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is missing: make test installs Debian's nodejs")
    assert (NODE_EXAMPLES / "node_modules" / "pg").is_dir(), (
        "examples/node has no node_modules: make test installs them (npm ci in examples/node)"
    )
    db.execute(SETUP)
    # Job 1 of each language blocks (a 5 s lease, so the kill's lease runs out soon, renewed
    # every 1.7 s while its worker lives: three renewals must be late to lose it); the rest
    # run through (a minute's lease: a loaded machine never loses one by being slow).
    ids: dict[str, list[int]] = {"py_work": [], "node_work": []}
    for task in ids:
        for n in range(N):
            (job_id,) = db.execute(
                "SELECT cronbase.defer(%s, %s::jsonb, queue => 'mixed', lease => %s)",
                [task, json.dumps({"n": n, "block": n == 0}), "5 seconds" if n == 0 else "1 min"],
            ).fetchone() or (0,)
            ids[task].append(job_id)
    python_env = {
        "CRONBASE_DATABASE_URL": database_url,
        "PYTHONPATH": str(REPO),
        "PATH": "/usr/bin:/bin",
    }
    python_cmd = [sys.executable, "-m", "tests.integration.sql_worker_app"]
    node_cmd = [node, str(REPO / "tests" / "integration" / "sql_worker_node.mjs")]
    processes = Processes(tmp_path)
    try:
        p1 = processes.start("P1", [*python_cmd, "P1"], python_env)
        n1 = processes.start("N1", [*node_cmd, "N1"], node_env(database_url))

        def done_but_blocked() -> bool:
            processes.check_running()
            holds = db.execute("SELECT worker FROM sql_worker_holds ORDER BY worker").fetchall()
            (effects,) = db.execute("SELECT count(*) FROM sql_worker_effects").fetchone() or (0,)
            return holds == [("N1",), ("P1",)] and effects == 2 * (N - 1)

        wait_for(done_but_blocked, timeout=120, what="each worker to hold its blocked job")
        processes.kill(p1)
        processes.kill(n1)
        db.execute("INSERT INTO sql_worker_flags VALUES ('go')")
        processes.start("P2", [*python_cmd, "P2"], python_env)
        processes.start("N2", [*node_cmd, "N2"], node_env(database_url))

        def all_succeeded() -> bool:
            processes.check_running()
            (count,) = db.execute(
                "SELECT count(*) FROM cronbase.jobs_history WHERE status = 'succeeded'"
            ).fetchone() or (0,)
            return count == 2 * N

        wait_for(all_succeeded, timeout=120, what="every job to succeed")
    except BaseException:
        print(processes.logs())
        raise
    finally:
        processes.close()

    # Every job succeeded once, by a worker of its language, its effect written exactly once
    # (by the attempt that succeeded, in its transaction).
    finished = {
        job_id: (task, locked_by, attempts_used)
        for job_id, task, locked_by, attempts_used in db.execute(
            "SELECT id, task, locked_by, attempts FROM cronbase.jobs_history"
        ).fetchall()
    }
    effects = db.execute(
        "SELECT job_id, attempt, lang, worker FROM sql_worker_effects ORDER BY job_id"
    ).fetchall()
    assert sorted(job_id for job_id, *_ in effects) == sorted(finished)
    language = {"py_work": ("python", "P"), "node_work": ("node", "N")}
    for job_id, attempt, lang, worker in effects:
        task, locked_by, attempts_used = finished[job_id]
        assert (lang, worker[0]) == language[task]
        assert (worker, attempt) == (locked_by, attempts_used)
    # The blocked ones: attempt 1 lost with the killed worker, attempt 2 succeeded by its
    # successor; the killed Node worker's job was reaped by the Python worker.
    for task, (killed, successor) in (("py_work", ("P1", "P2")), ("node_work", ("N1", "N2"))):
        blocked = ids[task][0]
        lost = db.execute(
            "SELECT attempt, outcome, worker, error_type FROM cronbase.job_attempts"
            " WHERE job_id = %s ORDER BY attempt",
            [blocked],
        ).fetchall()
        assert lost == [(1, "lost", killed, "LeaseExpired")]
        assert finished[blocked][1:] == (successor, 2)
    assert db.execute("SELECT count(*) FROM cronbase.jobs").fetchone() == (0,)


@pytest.mark.slow
def test_the_example_worker_stops_on_sigterm_handing_back_and_unregistering(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is missing: make test installs Debian's nodejs")
    db.execute(SETUP)
    (held,) = db.execute(
        "SELECT cronbase.defer('node_work', '{\"n\": 1, \"block\": true}', queue => 'mixed')"
    ).fetchone() or (0,)
    processes = Processes(tmp_path)
    try:
        worker = processes.start(
            "N",
            [node, str(REPO / "tests" / "integration" / "sql_worker_node.mjs"), "N"],
            node_env(database_url),
        )
        wait_for(
            lambda: db.execute("SELECT 1 FROM sql_worker_holds").fetchone(),
            timeout=60,
            what="the Node worker to hold its job",
        )
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0
    except BaseException:
        print(processes.logs())
        raise
    finally:
        processes.close()
    # Handed back (after the grace), the attempt not counted; the worker's row gone.
    row = db.execute("SELECT status, attempts FROM cronbase.jobs WHERE id = %s", [held]).fetchone()
    assert row == ("queued", 0)
    outcomes = db.execute("SELECT outcome, worker FROM cronbase.job_attempts").fetchall()
    assert outcomes == [("released", "N")]
    assert db.execute("SELECT count(*) FROM cronbase.workers").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM sql_worker_effects").fetchone() == (0,)
