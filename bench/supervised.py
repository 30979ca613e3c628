"""cronbase's drain as ``cronbase worker --processes N`` runs it (``--only drain``): the
supervisor and its N worker processes, started and registered before the clock starts.

The queue is paused while the jobs are loaded and the processes start (a burst worker would
find nothing due and exit, so these are long-running workers); the clock starts when it is
resumed (and a NOTIFY wakes them), and stops at the last job's ``finished_at``: both read on the
database's clock, so how often the bench polls for the end does not count. Beside the library's
N separate processes (workloads.drain), the difference is what the supervisor costs, with
``--metrics-port`` what prometheus_client's multiprocess mode costs.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from .subjects import cronbase_subject
from .workloads import Measurement, Settings

APP = "bench.subjects.cronbase_cli:app"
CONCURRENCY = 100
ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 60.0
# How long the started processes get to LISTEN after registering (they register, then listen).
LISTEN_SETTLE = 0.5


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _scalar(conn: psycopg.Connection, sql: str) -> object:
    row = conn.execute(sql.encode()).fetchone()
    assert row is not None
    return row[0]


def drain(url: str, s: Settings, procs: int, *, metrics: bool = False) -> Measurement:
    cronbase_subject.reset(url)
    with cronbase_subject.make_app(url)[0] as app:
        app.queues.pause("default")
        channel = app.channel
    cronbase_subject.preload(url, s.jobs)
    command = [sys.executable, "-m", "cronbase", "--app", APP, "worker", "--processes", str(procs)]
    command += ["--concurrency", str(CONCURRENCY), "--no-schedule", "--poll-interval", "0.05"]
    if metrics:
        command += ["--metrics-port", str(_free_port())]
    # ROOT for the bench package; the caller's PYTHONPATH after it, so a checkout benchmarked
    # with PYTHONPATH=its/src runs its own cronbase in the workers too.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "CRONBASE_DATABASE_URL": url, "PYTHONPATH": path}
    with tempfile.TemporaryFile() as log, psycopg.connect(url, autocommit=True) as conn:
        supervisor = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while _scalar(conn, "SELECT count(*) FROM cronbase.workers") != procs:
                if supervisor.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"supervisor did not start:\n{log.read().decode()}")
                time.sleep(0.05)
            time.sleep(LISTEN_SETTLE)
            with cronbase_subject.make_app(url)[0] as app:
                app.queues.resume("default")
            conn.execute("SELECT pg_notify(%s, 'default')", (channel,))
            started = _scalar(conn, "SELECT clock_timestamp()")
            cap = time.monotonic() + s.drain_cap
            done = 0
            while time.monotonic() < cap:
                done = cronbase_subject.count_done(url)
                if done == s.jobs:
                    break
                time.sleep(0.1)
            if done == s.jobs:
                last = _scalar(conn, "SELECT max(finished_at) FROM cronbase.jobs_all")
                elapsed = (last - started).total_seconds()  # type: ignore[operator]
            else:
                elapsed = s.drain_cap
        finally:
            with cronbase_subject.make_app(url)[0] as app:
                app.queues.resume("default")  # for the drains that follow, whatever happened
            supervisor.send_signal(signal.SIGTERM)
            try:
                status = supervisor.wait(60)
            except subprocess.TimeoutExpired:
                supervisor.kill()
                status = supervisor.wait()
        if status != 0:
            log.seek(0)
            raise RuntimeError(f"supervisor exited {status}:\n{log.read().decode()[-4000:]}")
    label = "cronbase worker --processes" + (" --metrics-port" if metrics else "")
    return Measurement(
        "drain",
        "cronbase",
        f"{label}, concurrency {CONCURRENCY}, {procs} proc" + ("s" if procs > 1 else ""),
        done / elapsed,
        "jobs/s",
        {
            "done": done,
            "elapsed": elapsed,
            "capped": done != s.jobs,
            "procs": procs,
            "batch": CONCURRENCY,
        },
    )
