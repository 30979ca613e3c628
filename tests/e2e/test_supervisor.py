"""``cronbase worker --processes N``, as a user runs it: a supervisor process and its worker
processes, real signals (SIGTERM, SIGKILL) and real crashes; the workers table, the command's
exit status and the one metrics endpoint say what happened."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

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
from tests.e2e.supervisor_app import CRASH_FILE, make_supervised_app
from tests.e2e.test_cli import cronbase as run_cronbase
from tests.e2e.test_cli import ok

pytestmark = pytest.mark.slow

APP = "tests.e2e.supervisor_app:app"


# -- helpers -------------------------------------------------------------------------------------


def start(
    processes: WorkerProcesses,
    name: str,
    *options: str,
    env: dict[str, str] | None = None,
    prefix: tuple[str, ...] = (),
) -> WorkerProcess:
    """``python -m cronbase --app APP worker --poll-interval 0.2 OPTIONS...``: a supervisor when
    the options say ``--processes``."""
    command = [sys.executable, "-m", "cronbase", "--app", APP, "worker", "--poll-interval", "0.2"]
    return processes.run(name, [*command, *options], env=env, prefix=prefix)


def supervisor_id(process: WorkerProcess) -> str:
    return f"{socket.gethostname()}:{process.pid}"


def children(db: psycopg.Connection[Any], supervisor: str) -> list[tuple[str, int]]:
    """(worker id, pid) of the workers rows of ``supervisor``'s processes, oldest first."""
    rows = db.execute(
        "SELECT id, pid FROM cronbase.workers WHERE supervisor = %s ORDER BY started_at, id",
        (supervisor,),
    ).fetchall()
    return [(worker_id, pid) for worker_id, pid in rows]


def registered(db: psycopg.Connection[Any], supervisor: str, count: int) -> list[tuple[str, int]]:
    """Wait until ``count`` processes of ``supervisor`` have registered; their rows."""

    def found() -> list[tuple[str, int]] | None:
        rows = children(db, supervisor)
        return rows if len(rows) >= count else None

    return wait_for(
        found,
        timeout=60,
        what=f"{count} worker processes of {supervisor} to register",
    )


def environment_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().partition("=")[::2] for item in raw if item)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of http://127.0.0.1:port/metrics by name: (labels, value)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def total(
    samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str
) -> float:
    return sum(
        value
        for found, value in samples.get(name, [])
        if all(found.get(k) == v for k, v in labels.items())
    )


# -- starting ------------------------------------------------------------------------------------


def test_n_worker_processes_register_grouped_under_their_supervisor(
    supervisors: WorkerProcesses, db: psycopg.Connection[Any], database_url: str
) -> None:
    supervisor = start(supervisors, "S", "--processes", "3")
    sid = supervisor_id(supervisor)
    rows = registered(db, sid, 3)
    # Three worker processes, each a child of the supervisor, each with its own row.
    assert len({worker_id for worker_id, _ in rows}) == 3
    assert {pid for _, pid in rows} == processes_of(supervisor.pid)
    assert "supervisor " + sid + ": starting 3 worker processes" in supervisor.log()

    # A worker started on its own beside them is in a group of its own, with no supervisor.
    alone = start(supervisors, "alone")
    wait_for(
        lambda: (
            db.execute(
                "SELECT FROM cronbase.workers WHERE pid = %s AND supervisor IS NULL", (alone.pid,)
            ).fetchone()
            is not None
        ),
        timeout=60,
        what="the worker started on its own",
    )
    listed = json.loads(ok(run_cronbase(database_url, "workers", "--json")))
    assert [(w["pid"], w["supervisor"]) for w in listed] == [(alone.pid, None)] + [
        (pid, sid) for _, pid in rows
    ]
    table = ok(run_cronbase(database_url, "workers"))
    assert table.count(sid) == 3
    assert "supervisor" in table

    supervisor.send(signal.SIGTERM)
    assert supervisor.wait_exit(timeout=60) == 0
    assert "exit status 0 (worker processes: 0, 0, 0)" in supervisor.log()
    assert children(db, sid) == []  # each stopped cleanly: unregistered
    alone.send(signal.SIGTERM)
    assert alone.wait_exit(timeout=60) == 0


def test_processes_auto_is_the_cores_the_process_may_use(
    supervisors: WorkerProcesses, db: psycopg.Connection[Any]
) -> None:
    cores = os.sched_getaffinity(0)
    # Pinned to one core, auto is 1 however many the machine has: the affinity, not the count.
    prefix = ("taskset", "-c", str(min(cores))) if shutil.which("taskset") else ()
    expected = 1 if prefix else len(cores)
    supervisor = start(supervisors, "S", "--processes", "auto", prefix=prefix)
    registered(db, supervisor_id(supervisor), expected)
    assert f": starting {expected} worker processes" in supervisor.log()
    supervisor.send(signal.SIGTERM)
    assert supervisor.wait_exit(timeout=60) == 0
    assert len(children(db, supervisor_id(supervisor))) == 0


# -- a child dies ----------------------------------------------------------------------------------


def test_a_killed_worker_process_is_started_again_and_its_job_is_reaped_and_run(
    supervisors: WorkerProcesses, tasks: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    supervisor = start(supervisors, "S", "--processes", "2", "--concurrency", "1")
    sid = supervisor_id(supervisor)
    pids = dict(registered(db, sid, 2))
    blocking = tasks.get_task("blocking").configure(lease=timedelta(seconds=2))
    jobs = [blocking.defer(flag="go") for _ in range(2)]
    for job_id in jobs:
        wait_for(partial(events, db, job_id), timeout=30, what=f"job {job_id} to start")
    # One slot each: each process holds one of them.
    holders = {job_row(db, job_id)["locked_by"] for job_id in jobs}
    assert holders == set(pids)

    victim = job_row(db, jobs[0])["locked_by"]
    os.kill(pids[victim], signal.SIGKILL)
    supervisor.wait_for_log("exited unasked (killed by SIGKILL)")
    restarted = wait_for(
        lambda: [row for row in children(db, sid) if row[0] not in pids],
        timeout=60,
        what="the worker process started in its place to register",
    )
    assert len(restarted) == 1
    assert restarted[0][1] in processes_of(supervisor.pid)

    set_flag(db, "go")
    for job_id in jobs:
        wait_for(
            lambda job_id=job_id: job_row(db, job_id)["status"] == "succeeded",
            timeout=60,
            what=f"job {job_id} to succeed",
        )
    # The killed process's attempt was reaped once its lease ran out, and run again by one of
    # the supervisor's live processes.
    (lost, done) = history(db, jobs[0])
    assert lost == (1, "lost", victim)
    assert done[:2] == (2, "succeeded")
    assert done[2] in {row[0] for row in children(db, sid)} - {victim}
    assert history(db, jobs[1]) == [(1, "succeeded", job_row(db, jobs[1])["locked_by"])]

    supervisor.send(signal.SIGTERM)
    assert supervisor.wait_exit(timeout=60) == 0


def test_a_crash_loop_is_reported_and_the_supervisor_keeps_starting_the_process(
    supervisors: WorkerProcesses, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    crash = tmp_path / "crash"
    port = free_port()
    supervisor = start(
        supervisors,
        "S",
        "--processes",
        "1",
        "--metrics-port",
        str(port),
        env={CRASH_FILE: str(crash)},
    )
    sid = supervisor_id(supervisor)
    ((first, pid),) = registered(db, sid, 1)
    assert total(scrape(port), "cronbase_supervisor_crash_looping", child="1") == 0

    crash.write_text("3")  # from now on the process exits with status 3 as it starts
    os.kill(pid, signal.SIGKILL)
    supervisor.wait_for_log(
        "worker process 1 is in a crash loop: 3 exits within 300s, the last status 3",
        timeout=60,
    )
    metrics = scrape(port)
    assert total(metrics, "cronbase_supervisor_crash_looping", child="1") == 1
    assert total(metrics, "cronbase_supervisor_restarts_total", child="1") >= 3
    assert children(db, sid) == [(first, pid)]  # the crashes never got as far as registering

    crash.unlink()  # fixed: the next start works
    wait_for(
        lambda: len(children(db, sid)) == 2, timeout=90, what="the process to start and register"
    )
    supervisor.send(signal.SIGTERM)
    # Its last process stopped cleanly: the crashes before do not make the stop a failure.
    assert supervisor.wait_exit(timeout=60) == 0


def test_the_exit_status_is_the_worst_of_the_worker_processes(
    supervisors: WorkerProcesses, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    crash = tmp_path / "crash"
    supervisor = start(supervisors, "S", "--processes", "2", env={CRASH_FILE: str(crash)})
    sid = supervisor_id(supervisor)
    rows = registered(db, sid, 2)
    crash.write_text("3")
    os.kill(rows[0][1], signal.SIGKILL)
    supervisor.wait_for_log("exited unasked (status 3)", timeout=60)

    # One process waits to start again after exiting with 3, the other stops cleanly.
    supervisor.send(signal.SIGTERM)
    assert supervisor.wait_exit(timeout=60) == 3
    assert "stopped: exit status 3 (worker processes: " in supervisor.log()
    assert children(db, sid) == [rows[0]]  # the live one unregistered; the killed one's row stays


# -- stopping --------------------------------------------------------------------------------------


def test_sigterm_lets_running_jobs_finish_then_exits_0(
    supervisors: WorkerProcesses, tasks: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    options = ("--processes", "2", "--concurrency", "1", "--shutdown-grace", "60")
    supervisor = start(supervisors, "S", *options)
    sid = supervisor_id(supervisor)
    pids = {pid for _, pid in registered(db, sid, 2)}
    blocking = tasks.get_task("blocking")
    running = [blocking.defer(flag="finish") for _ in range(2)]
    for job_id in running:
        wait_for(partial(events, db, job_id), timeout=30, what=f"job {job_id} to start")
    waiting = blocking.defer(flag="finish")  # every slot is busy: it waits

    supervisor.send(signal.SIGTERM)
    supervisor.wait_for_log("SIGTERM: stopping 2 worker processes")
    wait_for(
        lambda: supervisor.log().count(f"supervisor {sid} asks to stop") == 2,
        timeout=30,
        what="both processes to hear the stop",
    )
    # Both wait for their job: nobody is killed, nothing is handed back.
    assert all(is_running(pid) for pid in pids)
    assert is_running(supervisor.pid)
    set_flag(db, "finish")

    assert supervisor.wait_exit(timeout=60) == 0
    for job_id in running:
        assert job_row(db, job_id)["status"] == "succeeded"
        assert [(a, o) for a, o, _ in history(db, job_id)] == [(1, "succeeded")]
    job = job_row(db, waiting)
    assert (job["status"], job["attempts"]) == ("queued", 0)  # no claim after the stop
    assert children(db, sid) == []


def test_sigquit_after_sigterm_hands_back_every_running_job_at_once(
    supervisors: WorkerProcesses, tasks: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    options = ("--processes", "2", "--concurrency", "1", "--shutdown-grace", "600")
    supervisor = start(supervisors, "S", *options)
    sid = supervisor_id(supervisor)
    pids = [pid for _, pid in registered(db, sid, 2)]
    jobs = [tasks.defer("blocking", {"flag": "later"}) for _ in range(2)]
    for job_id in jobs:  # one in each process
        wait_for(partial(events, db, job_id), timeout=30, what=f"job {job_id} to start")

    supervisor.send(signal.SIGTERM)
    supervisor.wait_for_log("SIGTERM: stopping 2 worker processes")
    supervisor.send(signal.SIGTERM)  # the same request: logged, nothing more
    supervisor.wait_for_log(f"SIGTERM: supervisor {sid} is already stopping")
    supervisor.send(signal.SIGQUIT)
    # Well inside the 600s grace period: nobody waited for the jobs, nobody was killed.
    assert supervisor.wait_exit(timeout=60) == 0
    assert "killing" not in supervisor.log()
    wait_for(lambda: not any(is_running(pid) for pid in pids), timeout=30, what="both to exit")
    for job_id in jobs:
        job = job_row(db, job_id)
        assert (job["status"], job["attempts"], job["locked_by"]) == ("queued", 0, None)
        assert [o for _, o, _ in history(db, job_id)] == ["released"]
    assert children(db, sid) == []


def test_a_supervisor_killed_outright_leaves_no_orphan_its_processes_stop_gracefully(
    supervisors: WorkerProcesses, tasks: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    options = ("--processes", "2", "--concurrency", "1", "--shutdown-grace", "60")
    supervisor = start(supervisors, "S", *options)
    sid = supervisor_id(supervisor)
    pids = [pid for _, pid in registered(db, sid, 2)]
    job_id = tasks.defer("blocking", {"flag": "finish"})
    wait_for(partial(events, db, job_id), timeout=30, what="the job to start")

    supervisor.send(signal.SIGKILL)
    assert supervisor.wait_exit() == -signal.SIGKILL
    # Its processes (writing to the same log) see their pipe end: a graceful stop.
    wait_for(
        lambda: supervisor.log().count(f"supervisor {sid} is gone") == 2,
        timeout=30,
        what="both processes to see the supervisor gone",
    )
    set_flag(db, "finish")
    wait_for(lambda: children(db, sid) == [], timeout=60, what="both to stop and unregister")
    wait_for(lambda: not any(is_running(pid) for pid in pids), timeout=30, what="both to exit")
    assert job_row(db, job_id)["status"] == "succeeded"
    assert [(a, o) for a, o, _ in history(db, job_id)] == [(1, "succeeded")]


# -- burst -----------------------------------------------------------------------------------------


def test_burst_each_process_drains_and_the_supervisor_exits_when_all_have(
    supervisors: WorkerProcesses, tasks: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    jobs = [tasks.defer("execute_once", {"n": n}) for n in range(30)]
    supervisor = start(supervisors, "S", "--processes", "2", "--burst", "--concurrency", "2")
    assert supervisor.wait_exit(timeout=60) == 0
    ran = db.execute("SELECT job_id FROM test_executions ORDER BY job_id").fetchall()
    assert [job_id for (job_id,) in ran] == jobs  # each once
    assert supervisor.log().count(" started: pid ") == 2  # none started again
    assert "exit status 0 (worker processes: 0, 0)" in supervisor.log()


def test_burst_a_process_that_fails_is_not_started_again_and_sets_the_exit_status(
    supervisors: WorkerProcesses, database_url: str, db: psycopg.Connection[Any]
) -> None:
    with make_supervised_app(database_url) as tasks:
        crash = tasks.defer("exit_process", {"status": 3})
        jobs = [tasks.defer("execute_once", {"n": n}) for n in range(10)]
    supervisor = start(supervisors, "S", "--processes", "2", "--burst", "--concurrency", "1")
    assert supervisor.wait_exit(timeout=60) == 3
    log = supervisor.log()
    assert "exited: status 3" in log
    assert log.count(" started: pid ") == 2
    ran = db.execute("SELECT job_id FROM test_executions ORDER BY job_id").fetchall()
    assert [job_id for (job_id,) in ran] == jobs  # the other process ran the rest, each once
    assert job_row(db, crash)["status"] == "running"  # its process died holding it


# -- metrics ---------------------------------------------------------------------------------------


def test_one_metrics_endpoint_sums_every_process_and_reads_the_database_once(
    supervisors: WorkerProcesses, tasks: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    port = free_port()
    options = ("--processes", "2", "--concurrency", "1", "--metrics-port", str(port))
    supervisor = start(supervisors, "S", *options)
    sid = supervisor_id(supervisor)
    pids = {pid for _, pid in registered(db, sid, 2)}
    folder = Path(environment_of(min(pids))["PROMETHEUS_MULTIPROC_DIR"])

    held = [tasks.defer("blocking", {"flag": "release"}) for _ in range(2)]
    for job_id in held:
        wait_for(partial(events, db, job_id), timeout=30, what=f"job {job_id} to start")
    # One slot each: both processes ran one.
    assert {pid for job_id in held for _, _, pid in events(db, job_id)} == pids
    set_flag(db, "release")
    others = [tasks.defer("execute_once", {"n": n}) for n in range(10)]
    for job_id in held + others:
        wait_for(
            lambda job_id=job_id: job_row(db, job_id)["status"] == "succeeded",
            timeout=60,
            what=f"job {job_id} to succeed",
        )

    def summed() -> dict[str, list[tuple[dict[str, str], float]]] | None:
        samples = scrape(port)
        counted = (
            total(samples, "cronbase_jobs_claimed_total"),
            total(samples, "cronbase_jobs_finished_total", status="succeeded"),
            total(samples, "cronbase_job_duration_seconds_count"),
        )
        return samples if counted == (12, 12, 12) else None

    samples = wait_for(summed, timeout=30, what="12 jobs counted across both processes")
    # Each process wrote its own file; the endpoint summed them.
    assert {f"counter_{pid}.db" for pid in pids} <= {p.name for p in folder.iterdir()}
    # The database side, once: not once per process.
    assert samples["cronbase_database_up"] == [({}, 1.0)]
    succeeded = [
        value
        for labels, value in samples["cronbase_queue_jobs"]
        if labels == {"queue": "default", "status": "succeeded"}
    ]
    assert succeeded == [12.0]
    assert samples["cronbase_supervisor_processes"] == [({}, 2.0)]

    supervisor.send(signal.SIGTERM)
    assert supervisor.wait_exit(timeout=60) == 0
    assert not folder.exists()  # the supervisor's to remove


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5", ""])
def test_a_bad_processes_value_is_one_line_and_exit_2(
    database_url: str, db: psycopg.Connection[Any], value: str
) -> None:
    result = run_cronbase(database_url, "--app", APP, "worker", "--processes", value)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: Invalid value for '--processes': ")
    assert repr(value) in lines[0]
    assert db.execute("SELECT count(*) FROM cronbase.workers").fetchone() == (0,)


def test_a_signal_to_the_whole_process_group_stops_each_process_once_gracefully(
    supervisors: WorkerProcesses, tasks: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    """Ctrl-C in a terminal, systemd's default KillMode: every process of the group gets the
    signal. Each worker process takes it as its first (the supervisor's stop is a word on the
    pipe, not a second signal), so the running job still finishes."""
    if not shutil.which("setsid"):
        pytest.skip("needs setsid (util-linux)")
    options = ("--processes", "2", "--concurrency", "1", "--shutdown-grace", "60")
    # setsid: a process group of its own (the supervisor's pid), which the test can signal.
    supervisor = start(supervisors, "S", *options, prefix=("setsid",))
    sid = supervisor_id(supervisor)
    registered(db, sid, 2)
    job_id = tasks.defer("blocking", {"flag": "finish"})
    wait_for(partial(events, db, job_id), timeout=30, what="the job to start")

    os.killpg(supervisor.pid, signal.SIGINT)
    supervisor.wait_for_log("SIGINT: stopping 2 worker processes")
    supervisor.wait_for_log("SIGINT: finishing 1 running jobs")
    set_flag(db, "finish")
    assert supervisor.wait_exit(timeout=60) == 0
    assert "killing" not in supervisor.log()
    assert job_row(db, job_id)["status"] == "succeeded"
    assert [(a, o) for a, o, _ in history(db, job_id)] == [(1, "succeeded")]
    assert children(db, sid) == []


def test_a_busy_metrics_port_fails_the_supervisor_before_any_process_starts(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cronbase(
            database_url, "--app", APP, "worker", "--processes", "2", "--metrics-port", str(port)
        )
    assert result.returncode == 2, result
    assert result.stderr.strip() == (
        f"error: cannot serve metrics on 127.0.0.1:{port}: Address already in use; pick another "
        "metrics port (--metrics-port / metrics_port), or stop what listens there"
    )
    assert db.execute("SELECT count(*) FROM cronbase.workers").fetchone() == (0,)
