"""Running workers in tests: as real processes (signals, crashes) or as asyncio tasks here.

Process tests share ``test_events`` / ``test_flags`` / ``test_executions`` with the handlers of
``worker_app.py``; in-process tests wait with :func:`eventually` and :func:`wait_event`, which
give the event loop (and so the worker) its turn while they wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import psycopg
import pytest

import cronbase
from cronbase.db.queries import Queries
from cronbase.operations.retention import Retention, prune_once
from tests.conftest import wait_for

REPO = Path(__file__).resolve().parents[2]
QUERIES = Queries("cronbase")

TEST_TABLES = """
CREATE TABLE IF NOT EXISTS test_events (
    id serial PRIMARY KEY, job_id bigint NOT NULL, attempt integer NOT NULL,
    event text NOT NULL, pid integer NOT NULL, at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS test_flags (name text PRIMARY KEY);
CREATE TABLE IF NOT EXISTS test_executions (
    id serial PRIMARY KEY, job_id bigint NOT NULL, n integer NOT NULL, pid integer NOT NULL);
TRUNCATE test_events, test_flags, test_executions;
"""


def python_path() -> str:
    """The repository first (the tests' apps), then what the test run was given: a worktree's
    ``PYTHONPATH=src`` puts its own cronbase before the one installed in the venv."""
    return after_inherited(str(REPO))


def after_inherited(*paths: str) -> str:
    """A child's PYTHONPATH: ``paths``, then the test run's own (a worktree's ``src``: so the
    child runs the code under test, not the checkout the venv was installed from)."""
    inherited = os.environ.get("PYTHONPATH")
    return os.pathsep.join([*paths, *([inherited] if inherited else [])])


def reset_test_tables(db: psycopg.Connection[Any]) -> None:
    db.execute(TEST_TABLES)


def set_flag(db: psycopg.Connection[Any], name: str) -> None:
    db.execute("INSERT INTO test_flags (name) VALUES (%s)", (name,))


def events(db: psycopg.Connection[Any], job_id: int) -> list[tuple[int, str, int]]:
    """(attempt, event, pid) of one job, in the order they happened."""
    rows = db.execute(
        "SELECT attempt, event, pid FROM test_events WHERE job_id = %s ORDER BY id", (job_id,)
    ).fetchall()
    return [(a, e, p) for a, e, p in rows]


def job_row(db: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
    with db.cursor(row_factory=psycopg.rows.dict_row) as cur:
        row = cur.execute("SELECT * FROM cronbase.jobs_all WHERE id = %s", (job_id,)).fetchone()
    assert row is not None, f"job {job_id} not found"
    return row


def history(db: psycopg.Connection[Any], job_id: int) -> list[tuple[int, str, str | None]]:
    """(attempt, outcome, worker) of one job's attempts, oldest first (list_job_attempts: the
    history rows and a succeeded job's final attempt, which its own row records)."""
    rows = db.execute(QUERIES.list_job_attempts, {"id": job_id}).fetchall()
    return [(a, o, w) for _, a, w, _, _, o, *_ in rows]


def is_registered(db: psycopg.Connection[Any], worker_id: str) -> bool:
    return (
        db.execute("SELECT FROM cronbase.workers WHERE id = %s", (worker_id,)).fetchone()
        is not None
    )


# -- processes -----------------------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, from /proc (None: no such process)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    state, ppid = text.rpartition(")")[2].split()[:2]
    return state, int(ppid)


def is_running(pid: int) -> bool:
    """Alive and not a zombie (a killed child whose parent has not waited for it yet)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def processes_of(parent: int) -> set[int]:
    """The running processes whose parent is ``parent``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[1] == parent and stat[0] != "Z":
                found.add(int(entry.name))
    return found


# -- worker processes ----------------------------------------------------------------------------


class WorkerProcess:
    """One ``python -m tests.e2e.worker_app`` process; its log goes to a file."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes], log_path: Path) -> None:
        self.name = name
        self.popen = popen
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def send(self, sig: signal.Signals) -> None:
        self.popen.send_signal(sig)

    def wait_for_log(self, text: str, *, timeout: float = 30.0) -> None:
        wait_for(lambda: text in self.log(), timeout=timeout, what=f"{text!r} in {self.name}'s log")

    def wait_exit(self, *, timeout: float = 30.0) -> int:
        """The exit code, once the process is gone; fails the test if it is still there."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker {self.name} still running after {timeout}s\n{self.log()}")


class WorkerProcesses:
    """Starts worker processes; kills (SIGKILL) those still running when the block ends."""

    def __init__(
        self,
        database_url: str,
        folder: Path,
        *,
        module: str = "tests.e2e.worker_app",
        env: dict[str, str] | None = None,
    ) -> None:
        self.database_url = database_url
        self.folder = folder
        self.module = module
        self.env = env or {}
        self.started: list[WorkerProcess] = []
        self._logs: list[IO[bytes]] = []

    def start(
        self,
        name: str,
        *options: str,
        prefix: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> WorkerProcess:
        """``python -m <module> --worker-id NAME OPTIONS...``, after ``prefix`` (a command that
        execs it: ``ip netns exec HOST``), with ``env`` on top of the processes' own."""
        command = [sys.executable, "-m", self.module, "--worker-id", name, *options]
        return self.run(name, command, prefix=prefix, env=env)

    def run(
        self,
        name: str,
        command: Sequence[str],
        *,
        prefix: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> WorkerProcess:
        """``command`` (``python -m cronbase ... worker``, say) as the processes above are run."""
        environment = {
            k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CRONBASE_APP")
        }
        environment.update(CRONBASE_DATABASE_URL=self.database_url, PYTHONPATH=python_path())
        environment.update({**self.env, **(env or {})})
        log_path = self.folder / f"worker-{name}.log"
        log = log_path.open("wb")
        self._logs.append(log)
        popen = subprocess.Popen(
            [*prefix, *command],
            cwd=REPO,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        process = WorkerProcess(name, popen, log_path)
        self.started.append(process)
        return process

    def __enter__(self) -> WorkerProcesses:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for process in self.started:
            if process.popen.poll() is None:
                process.popen.kill()
                process.popen.wait(30)
        for log in self._logs:
            log.close()
        # Shown by pytest when the test failed.
        for process in self.started:
            self.report(process)

    def report(self, process: WorkerProcess) -> None:
        """Print what a test that failed should show of one worker's log: all of it."""
        print(f"---- worker {process.name} (exit {process.popen.returncode}) ----")
        print(process.log())


# -- in-process workers --------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def running_worker(app: cronbase.App, **options: Any) -> AsyncIterator[cronbase.Worker]:
    """A worker running as a task on this loop, stopped (and the app's async pool closed) after."""
    options.setdefault("install_signal_handlers", False)
    options.setdefault("shutdown_grace", timedelta(seconds=2))
    worker = app.worker(**options)
    run = asyncio.create_task(worker.run(), name="test-worker")
    started = asyncio.create_task(worker.started.wait())
    try:
        await asyncio.wait({run, started}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        if run.done():
            run.result()  # raises what stopped it
        assert worker.started.is_set(), "the worker did not start within 30s"
        yield worker
    finally:
        started.cancel()
        worker.stop()
        try:
            async with asyncio.timeout(30):
                await run
        finally:
            await app.aclose()


def run_example(module: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m examples.<module>`` from the repository root, as the README says to run it;
    the test fails with its output when it exits non-zero."""
    result = subprocess.run(
        [sys.executable, "-m", f"examples.{module}"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return result


def retention_round(app: cronbase.App, retention: Retention) -> int | None:
    """One worker's retention round (``prune_once``) on a pool of its own, closed after."""

    async def run() -> int | None:
        pool = await app.db.async_pool()
        try:
            return await prune_once(pool, app.db, retention)
        finally:
            await app.aclose()

    return asyncio.run(run())


async def eventually(predicate: Callable[[], Any], *, within: float = 30.0, what: str = "") -> Any:
    """As conftest's ``wait_for``, but yields to the event loop between tries."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        result = predicate()
        if result:
            return result
        if loop.time() > deadline:
            pytest.fail(f"timed out after {within}s waiting for {what or predicate}")
        await asyncio.sleep(0.02)


async def wait_event(event: asyncio.Event, *, within: float = 30.0, what: str = "") -> None:
    try:
        async with asyncio.timeout(within):
            await event.wait()
    except TimeoutError:
        pytest.fail(f"timed out after {within}s waiting for {what or event}")
