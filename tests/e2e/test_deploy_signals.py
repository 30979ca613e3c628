"""Stopping a worker as deploy tools do: each tool's own pattern of signals, sent by the tool
itself where it is on the machine (GNU ``timeout``) or as it sends them (systemd's control-group
kill, Kubernetes' SIGTERM then SIGKILL, a signal to the process group, a storm). In every one the
running job finishes (or is handed back): no attempt is spent, nothing is killed by cronbase."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import psycopg
import pytest

import cronbase
from tests.conftest import wait_for
from tests.e2e.harness import (
    WorkerProcess,
    WorkerProcesses,
    events,
    history,
    is_running,
    job_row,
    processes_of,
    set_flag,
)
from tests.e2e.test_supervisor import (
    APP,
    children,
    registered,
    supervisor_id,
)

pytestmark = pytest.mark.slow

GRACE = ("--shutdown-grace", "600")


def cronbase_worker(
    processes: WorkerProcesses, *options: str, prefix: tuple[str, ...] = ()
) -> WorkerProcess:
    command = [sys.executable, "-m", "cronbase", "--app", APP, "worker", "--poll-interval", "0.2"]
    return processes.run("W", [*command, *options], prefix=prefix)


def worker_pids(db: psycopg.Connection[Any], pid: int, count: int) -> list[int]:
    """The pids of the worker processes of the command whose pid is ``pid``: a supervisor's
    children, or the worker itself."""
    if count == 1:
        wait_for(
            lambda: db.execute("SELECT 1 FROM cronbase.workers WHERE pid = %s", (pid,)).fetchone(),
            timeout=60,
            what="the worker to register",
        )
        return [pid]
    return [found for _, found in registered(db, f"{socket.gethostname()}:{pid}", count)]


def run_one_job_each(tasks: cronbase.App, db: psycopg.Connection[Any], count: int) -> list[int]:
    jobs = [tasks.defer("blocking", {"flag": "finish"}) for _ in range(count)]
    for job_id in jobs:
        wait_for(partial(events, db, job_id), timeout=60, what=f"job {job_id} to start")
    return jobs


def assert_finished_once(db: psycopg.Connection[Any], jobs: list[int]) -> None:
    for job_id in jobs:
        assert job_row(db, job_id)["status"] == "succeeded"
        assert [(a, o) for a, o, _ in history(db, job_id)] == [(1, "succeeded")]


@pytest.mark.parametrize("processes", [1, 2], ids=["worker", "supervisor"])
def test_gnu_timeout_signals_twice_and_the_running_jobs_still_finish(
    supervisors: WorkerProcesses,
    tasks: cronbase.App,
    db: psycopg.Connection[Any],
    processes: int,
) -> None:
    """GNU timeout, on its signal (its time up, or its own SIGTERM), signals the command and
    then its whole process group: the command gets SIGTERM twice within microseconds (issue 34:
    a supervisor killed its processes so, 3 runs in 8)."""
    if not shutil.which("timeout"):
        pytest.skip("needs GNU timeout (coreutils)")
    options = ("--concurrency", "1", *GRACE)
    if processes > 1:
        options = ("--processes", str(processes), *options)
    # timeout's own SIGTERM, not its clock: the same code path (cleanup() in timeout.c), at a
    # moment when the jobs are known to run, however slow the machine.
    process = cronbase_worker(supervisors, *options, prefix=("timeout", "600"))
    command = wait_for(
        lambda: next(iter(processes_of(process.pid)), None), timeout=60, what="timeout's command"
    )
    pids = worker_pids(db, command, processes)
    jobs = run_one_job_each(tasks, db, processes)

    process.send(signal.SIGTERM)  # to timeout, which passes it on twice
    # The kernel merges the two when both arrive before the first is handled (a pending signal
    # is one bit), so the log may or may not show the repeat; test_shutdown.py and
    # test_supervisor.py send the second one apart.
    process.wait_for_log("SIGTERM: stopping 2" if processes > 1 else "SIGTERM: finishing 1")
    set_flag(db, "finish")
    assert process.wait_exit(timeout=120) == 0
    assert "killing" not in process.log()
    assert_finished_once(db, jobs)
    assert not any(is_running(pid) for pid in [command, *pids])


def test_systemd_control_group_kill_signals_every_process_at_once(
    supervisors: WorkerProcesses, tasks: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    """systemd's default ``KillMode=control-group``: SIGTERM to every process of the unit, the
    supervisor and each worker process, in no particular order; SIGKILL only after
    TimeoutStopSec (not reached here)."""
    supervisor = cronbase_worker(supervisors, "--processes", "2", "--concurrency", "1", *GRACE)
    pids = worker_pids(db, supervisor.pid, 2)
    jobs = run_one_job_each(tasks, db, 2)

    everyone = [supervisor.pid, *pids]
    random.shuffle(everyone)
    for pid in everyone:
        os.kill(pid, signal.SIGTERM)
    wait_for(
        lambda: supervisor.log().count("SIGTERM: finishing 1 running jobs") == 2,
        timeout=60,
        what="each process to take its SIGTERM as a graceful stop",
    )
    set_flag(db, "finish")
    assert supervisor.wait_exit(timeout=120) == 0
    assert "killing" not in supervisor.log()
    assert_finished_once(db, jobs)
    assert children(db, supervisor_id(supervisor)) == []


@pytest.mark.parametrize("processes", [1, 2], ids=["worker", "supervisor"])
def test_a_storm_of_signals_to_the_process_group_is_one_graceful_stop(
    supervisors: WorkerProcesses,
    tasks: cronbase.App,
    db: psycopg.Connection[Any],
    processes: int,
) -> None:
    """A script that repeats itself, a terminal's Ctrl-C pressed again and again: 30 SIGTERMs,
    SIGINTs and SIGHUPs to the process group, interleaved."""
    options = ("--concurrency", "1", *GRACE)
    if processes > 1:
        options = ("--processes", str(processes), *options)
    # setsid: a process group of its own (the first process's pid), which the test can signal.
    process = cronbase_worker(supervisors, *options, prefix=("setsid",))
    worker_pids(db, process.pid, processes)
    jobs = run_one_job_each(tasks, db, processes)

    storm = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP] * 10
    random.shuffle(storm)
    for sig in storm:
        os.killpg(process.pid, sig)
    process.wait_for_log("is already stopping")  # thirty signals: some are handled apart
    set_flag(db, "finish")
    assert process.wait_exit(timeout=120) == 0
    assert "killing" not in process.log()
    assert_finished_once(db, jobs)


@pytest.mark.parametrize("processes", [1, 2], ids=["worker", "supervisor"])
def test_kubernetes_sigterm_then_sigkill_after_the_pod_grace_costs_no_attempt(
    supervisors: WorkerProcesses,
    tasks: cronbase.App,
    db: psycopg.Connection[Any],
    processes: int,
) -> None:
    """Kubernetes sends SIGTERM, then SIGKILL after ``terminationGracePeriodSeconds`` (30 by
    default) whether or not the pod is gone. With the worker's grace period below the pod's
    (docs/guides/deploy.md), jobs that outlast it are handed back before the kill comes."""
    options = ("--concurrency", "1", "--shutdown-grace", "2")
    if processes > 1:
        options = ("--processes", str(processes), *options)
    process = cronbase_worker(supervisors, *options, prefix=("setsid",))
    pids = worker_pids(db, process.pid, processes)
    jobs = [tasks.defer("blocking", {"flag": "later"}) for _ in range(processes)]
    for job_id in jobs:
        wait_for(partial(events, db, job_id), timeout=60, what=f"job {job_id} to start")

    os.killpg(process.pid, signal.SIGTERM)
    # The pod's grace period: the kubelet waits this long for the container to end, then kills.
    pod_grace = 60.0
    try:
        exited: int | None = process.popen.wait(pod_grace)
    except subprocess.TimeoutExpired:
        exited = None
    if exited is None:
        os.killpg(process.pid, signal.SIGKILL)
    assert exited == 0, process.log()
    assert not any(is_running(pid) for pid in pids)
    for job_id in jobs:
        job = job_row(db, job_id)
        assert (job["status"], job["attempts"]) == ("queued", 0)
        assert [o for _, o, _ in history(db, job_id)] == ["released"]


def test_a_stop_while_the_worker_waits_for_the_database_ends_it_cleanly(
    supervisors: WorkerProcesses,
) -> None:
    """A rollout that is rolled back while the new pod still waits for the database: the stop
    ends the wait (before, SIGTERM came before any handler: Python's default killed it)."""
    with refused_port() as port:
        url = f"postgresql://nobody@127.0.0.1:{port}/nothing?connect_timeout=2"
        process = supervisors.run(
            "W",
            [sys.executable, "-m", "cronbase", "--app", APP, "worker"],
            env={"CRONBASE_DATABASE_URL": url},
        )
        process.wait_for_log("database unreachable", timeout=60)
        process.send(signal.SIGTERM)
        assert process.wait_exit(timeout=60) == 0
        assert "stopped before it started" in process.log()


@contextmanager
def refused_port() -> Iterator[int]:
    """A port on which nothing listens while the block runs (bound, not listening: a connect
    is refused)."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield int(bound.getsockname()[1])
