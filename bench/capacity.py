"""The capacity model's figures (docs/capacity.md): CPU time per job, connections per process.

```sh
PYTHONPATH=src bench/.venv/bin/python -m bench.capacity               # ~3 minutes
PYTHONPATH=src bench/.venv/bin/python -m bench.capacity --jobs 5000 --repeats 1   # a smoke run
```

Its own PostgreSQL (``cluster.py``: fsync and synchronous_commit on, TCP on 127.0.0.1).

1. **Connections**: ``cronbase worker`` with its default options, then with ``--processes 2``,
   each left running for a few seconds after its workers registered; ``pg_stat_activity`` of the
   database is read every 0.25 s and grouped by ``application_name`` (a worker's id cut off).
   Then the producer side: an ``App``'s sync pool after one ``defer()``, and after 16 threads
   defer at once; its async pool likewise with 16 ``defer_async()`` at once.
2. **CPU per job**: N pre-loaded no-op jobs (and ``sleepy`` ones, 5-50 ms each) drained by ``cronbase worker --processes P
   --concurrency C --no-schedule`` (the queue paused while they start, as ``supervised.py``
   does). CPU time is read from ``/proc/<pid>/stat`` (utime + stime, and cutime + cstime for
   children that exited) for the supervisor's process tree and for the postmaster's (every
   backend and background process: WAL writer, checkpointer, autovacuum), right before the queue
   is resumed and as soon as the live table is empty; the bench's own monitoring backend is
   subtracted. ``µs of CPU per job`` is the delta over N; a core sustains 1e6 / µs jobs/s.
   WAL bytes per job: ``pg_current_wal_lsn()`` before and after, over N; commits per job:
   ``pg_stat_database.xact_commit`` (every session of the database, the monitor's included).
   The same for producers: ``defer()`` one per transaction and ``defer_many()`` of 1,000, the
   producer being this process (``time.process_time()``), beside psycopg alone sending one bare
   INSERT per transaction (what a durable round trip costs here).

CPU time per job barely depends on what else the machine runs (a shared 2-core VM); jobs/s do,
so the wall-clock rate is printed too but the page quotes CPU time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from .cluster import Cluster, running_cluster
from .subjects import capacity_app, cronbase_subject

APP = "bench.subjects.capacity_app:app"
ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")
START_TIMEOUT = 60.0
SETTLE = 1.0  # after the workers registered: LISTEN opened, start-up CPU spent


# -- /proc -----------------------------------------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # Field 2 (comm) is in parentheses and may hold spaces: split after its last ")".
    return text[text.rindex(")") + 2 :].split()


def cpu(pid: int, *, reaped: bool = True) -> float:
    """Seconds of CPU of ``pid`` (user + system), with its exited children's when ``reaped``."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    # fields[0] is field 3 (state): utime 14, stime 15, cutime 16, cstime 17.
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICK


def tree(root: int) -> list[int]:
    """``root`` and its descendants, from every process's parent pid."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None:
                parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += parents.get(pid, [])
    return found


def tree_cpu(root: int) -> float:
    """CPU seconds of a process tree: each live process's own and its exited children's."""
    return sum(cpu(pid) for pid in tree(root))


def postmaster(cluster: Cluster) -> int:
    return int((cluster.data / "postmaster.pid").read_text().split()[0])


# -- the database ----------------------------------------------------------------------------------

RESET = (
    "TRUNCATE cronbase.jobs, cronbase.jobs_history, cronbase.job_attempts, cronbase.job_keys,"
    " cronbase.workers, cronbase.events CASCADE"
)
ACTIVITY = """
SELECT split_part(coalesce(application_name, ''), ' ', 1), backend_type, pid
FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


def _one(conn: psycopg.Connection[Any], sql: str, params: Any = None) -> Any:
    row = conn.execute(sql.encode(), params).fetchone()
    assert row is not None
    return row[0]


def by_name(conn: psycopg.Connection[Any]) -> Counter[str]:
    return Counter(name or f"({kind})" for name, kind, _ in conn.execute(ACTIVITY.encode()))


@contextmanager
def worker(url: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """``cronbase --app APP worker *args``; SIGTERM at the end (its exit status checked)."""
    command = [sys.executable, "-m", "cronbase", "--app", APP, "worker", *args]
    env = {**os.environ, "CRONBASE_DATABASE_URL": url, "PYTHONPATH": f"{ROOT}:{ROOT / 'src'}"}
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=log)
        try:
            yield proc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                status = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                status = proc.wait()
        if status != 0:
            log.seek(0)
            raise RuntimeError(f"worker exited {status}:\n{log.read().decode()[-4000:]}")


def wait_registered(conn: psycopg.Connection[Any], proc: subprocess.Popen[bytes], n: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while _one(conn, "SELECT count(*) FROM cronbase.workers") != n:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the worker did not start (status {proc.poll()})")
        time.sleep(0.05)
    time.sleep(SETTLE)


# -- 1. connections --------------------------------------------------------------------------------


def worker_connections(url: str, args: list[str], processes: int, seconds: float) -> dict[str, Any]:
    """The most connections seen per application name while the worker idles ``seconds``."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RESET.encode())
        most: Counter[str] = Counter()
        totals = []
        with worker(url, *args) as proc:
            wait_registered(conn, proc, processes)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                seen = by_name(conn)
                most |= seen
                totals.append(sum(seen.values()))
                time.sleep(0.25)
    return {"command": "cronbase worker " + " ".join(args), "most": dict(most), "total": totals}


def producer_connections(url: str, threads: int = 16) -> dict[str, Any]:
    import asyncio

    out: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RESET.encode())
        with cronbase_subject.make_app(url)[0] as app:
            noop = app.tasks["noop"]
            noop.defer(n=0)
            out["sync pool, after one defer()"] = dict(by_name(conn))
            start = threading.Barrier(threads)

            def burst() -> None:
                start.wait()
                for i in range(200):
                    noop.defer(n=i)

            runners = [threading.Thread(target=burst) for _ in range(threads)]
            for t in runners:
                t.start()
            most: Counter[str] = Counter()
            while any(t.is_alive() for t in runners):
                most |= by_name(conn)
                time.sleep(0.02)
            out[f"sync pool, {threads} threads deferring at once (most seen)"] = dict(most)

        async def many() -> dict[str, int]:
            with cronbase_subject.make_app(url)[0] as app:
                noop = app.tasks["noop"]
                seen: Counter[str] = Counter()

                async def one() -> None:
                    for i in range(200):
                        await noop.defer_async(n=i)

                jobs = [asyncio.create_task(one()) for _ in range(threads)]
                while not all(j.done() for j in jobs):
                    seen |= await asyncio.to_thread(by_name, conn)
                    await asyncio.sleep(0.02)
                await asyncio.gather(*jobs)
                return dict(seen)

        out[f"async pool, {threads} defer_async() at once (most seen)"] = asyncio.run(many())
    return out


# -- 2. CPU per job --------------------------------------------------------------------------------


COMMITS = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"


def drain(
    cluster: Cluster, url: str, jobs: int, processes: int, concurrency: int, task: str = "noop"
) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RESET.encode())
        with cronbase_subject.make_app(url)[0] as app:
            app.queues.pause("default")
            channel = app.channel
        capacity_app.preload(url, task, jobs)
        conn.execute(b"VACUUM ANALYZE cronbase.jobs")
        pg = postmaster(cluster)
        me = _one(conn, "SELECT pg_backend_pid()")
        args = ["--processes", str(processes), "--concurrency", str(concurrency), "--no-schedule"]
        with worker(url, *args) as proc, cronbase_subject.make_app(url)[0] as app:
            wait_registered(conn, proc, processes)
            app.pool()
            load = os.getloadavg()[0]
            w0, pg0, me0, p0 = tree_cpu(proc.pid), tree_cpu(pg), cpu(me), cpu(proc.pid)
            lsn0 = _one(conn, "SELECT pg_current_wal_lsn()")
            commits0 = _one(conn, COMMITS)
            started = _one(conn, "SELECT clock_timestamp()")
            app.queues.resume("default")
            conn.execute("SELECT pg_notify(%s, 'default')", (channel,))
            most: Counter[str] = Counter()
            cap = time.monotonic() + 120
            while _one(conn, "SELECT EXISTS (SELECT FROM cronbase.jobs)"):
                most |= by_name(conn)
                if time.monotonic() > cap:
                    raise RuntimeError("the drain did not end in 120 s")
                time.sleep(0.1)
            w1, pg1, me1, p1 = tree_cpu(proc.pid), tree_cpu(pg), cpu(me), cpu(proc.pid)
            wal = _one(conn, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn0,))
            # Backends report their commits to the statistics within a second of being idle.
            time.sleep(1.5)
            conn.execute(b"SELECT pg_stat_clear_snapshot()")
            commits = _one(conn, COMMITS) - commits0
        done = _one(conn, "SELECT count(*) FROM cronbase.jobs_history WHERE status = 'succeeded'")
        if done != jobs:
            raise RuntimeError(f"{done} of {jobs} jobs succeeded")
        last = _one(conn, "SELECT max(finished_at) FROM cronbase.jobs_history")
    elapsed = (last - started).total_seconds()
    worker_s, db_s = w1 - w0, (pg1 - pg0) - (me1 - me0)
    return {
        "processes": processes,
        "concurrency": concurrency,
        "jobs": jobs,
        "worker_us": worker_s / jobs * 1e6,
        "supervisor_us": (p1 - p0) / jobs * 1e6,
        "db_us": db_s / jobs * 1e6,
        "wal_bytes": float(wal) / jobs,
        "commits_per_job": commits / jobs,
        "task": task,
        "jobs_per_s": jobs / elapsed,
        "elapsed": elapsed,
        "load": load,
        "connections": dict(most),
    }


def enqueue(cluster: Cluster, url: str, jobs: int, chunk: int) -> dict[str, Any]:
    """``defer()`` per job (chunk 1) or ``defer_many()`` of ``chunk``: producer and database CPU."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RESET.encode())
        pg = postmaster(cluster)
        me = _one(conn, "SELECT pg_backend_pid()")
        with cronbase_subject.make_app(url)[0] as app:
            noop = app.tasks["noop"]
            app.pool()
            load = os.getloadavg()[0]
            lsn0 = _one(conn, "SELECT pg_current_wal_lsn()")
            c0, pg0, me0, t0 = time.process_time(), tree_cpu(pg), cpu(me), time.perf_counter()
            if chunk == 1:
                for i in range(jobs):
                    noop.defer(n=i)
            else:
                for first in range(0, jobs, chunk):
                    noop.defer_many([{"n": i} for i in range(first, min(jobs, first + chunk))])
            t1, c1, pg1, me1 = time.perf_counter(), time.process_time(), tree_cpu(pg), cpu(me)
            wal = _one(conn, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn0,))
    return {
        "chunk": chunk,
        "jobs": jobs,
        "producer_us": (c1 - c0) / jobs * 1e6,
        "db_us": ((pg1 - pg0) - (me1 - me0)) / jobs * 1e6,
        "wal_bytes": float(wal) / jobs,
        "jobs_per_s": jobs / (t1 - t0),
        "load": load,
    }


def raw_insert(cluster: Cluster, url: str, jobs: int) -> dict[str, Any]:
    """The reference for ``defer()``: psycopg alone, one bare INSERT per transaction into a table
    of two columns, so that what one durable round trip costs on this machine is known."""
    with psycopg.connect(url, autocommit=True) as conn, psycopg.connect(url) as client:
        conn.execute(b"DROP TABLE IF EXISTS capacity_ref")
        conn.execute(b"CREATE TABLE capacity_ref (id bigserial PRIMARY KEY, n int)")
        client.autocommit = True
        pg, me = postmaster(cluster), _one(conn, "SELECT pg_backend_pid()")
        lsn0 = _one(conn, "SELECT pg_current_wal_lsn()")
        load = os.getloadavg()[0]
        c0, pg0, me0, t0 = time.process_time(), tree_cpu(pg), cpu(me), time.perf_counter()
        for i in range(jobs):
            client.execute(b"INSERT INTO capacity_ref (n) VALUES (%s)", (i,))
        t1, c1, pg1, me1 = time.perf_counter(), time.process_time(), tree_cpu(pg), cpu(me)
        wal = _one(conn, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn0,))
    return {
        "chunk": 0,
        "jobs": jobs,
        "producer_us": (c1 - c0) / jobs * 1e6,
        "db_us": ((pg1 - pg0) - (me1 - me0)) / jobs * 1e6,
        "wal_bytes": float(wal) / jobs,
        "jobs_per_s": jobs / (t1 - t0),
        "load": load,
    }


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain (default 20,000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure; medians quoted")
    parser.add_argument("--json", type=Path, help="write every run here")
    parser.add_argument("--skip-connections", action="store_true")
    a = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    results: dict[str, Any] = {"argv": sys.argv, "drains": [], "enqueues": []}
    with running_cluster() as cluster:
        url = cluster.create_database("capacity")
        cronbase_subject.setup(url)
        print(f"PostgreSQL {cluster.version}; {os.cpu_count()} cores; load {os.getloadavg()}")
        if not a.skip_connections:
            print("\n## connections (most seen per application_name)")
            for args, n in (([], 1), (["--processes", "2"], 2)):
                found = worker_connections(url, args, n, seconds=6.0)
                results.setdefault("connections", []).append(found)
                print(f"{found['command']}: {found['most']} (total {max(found['total'])})")
            found = producer_connections(url)
            results["producer"] = found
            for what, seen in found.items():
                print(f"{what}: {seen}")
        print("\n## drains: µs of CPU per no-op job (median of repeats), jobs/s on the wall")
        configs = [(1, 10, "noop"), (1, 100, "noop"), (2, 10, "noop"), (2, 100, "noop")]
        configs += [(1, 100, "sleepy"), (2, 100, "sleepy")]
        for processes, concurrency, task in configs:
            runs = [
                drain(cluster, url, a.jobs, processes, concurrency, task) for _ in range(a.repeats)
            ]
            results["drains"] += runs
            print(
                f"{task}, --processes {processes} --concurrency {concurrency}: "
                f"worker {_median(runs, 'worker_us'):.1f} µs "
                f"(supervisor {_median(runs, 'supervisor_us'):.2f}), "
                f"database {_median(runs, 'db_us'):.1f} µs, "
                f"WAL {_median(runs, 'wal_bytes'):,.0f} B, "
                f"commits {_median(runs, 'commits_per_job'):.3f}, "
                f"{_median(runs, 'jobs_per_s'):,.0f} jobs/s; "
                f"each: {[round(r['worker_us'], 1) for r in runs]} / "
                f"{[round(r['db_us'], 1) for r in runs]} µs, "
                f"{[round(r['jobs_per_s']) for r in runs]} jobs/s, "
                f"load {[round(r['load'], 1) for r in runs]}; "
                f"connections during it {runs[-1]['connections']}"
            )
        print("\n## enqueue: µs of CPU per job (median of repeats)")
        single = min(a.jobs, 5_000)
        for chunk, jobs in ((0, single), (1, single), (1_000, a.jobs)):
            runs = [
                raw_insert(cluster, url, jobs) if chunk == 0 else enqueue(cluster, url, jobs, chunk)
                for _ in range(a.repeats)
            ]
            results["enqueues"] += runs
            names = {0: "psycopg, bare INSERT per transaction", 1: "defer(), 1 per transaction"}
            what = names.get(chunk, f"defer_many() of {chunk}")
            print(
                f"{what}, {jobs} jobs: producer {_median(runs, 'producer_us'):.1f} µs, "
                f"database {_median(runs, 'db_us'):.1f} µs, "
                f"WAL {_median(runs, 'wal_bytes'):,.0f} B, "
                f"{_median(runs, 'jobs_per_s'):,.0f} jobs/s; "
                f"each: {[round(r['producer_us'], 1) for r in runs]} / "
                f"{[round(r['db_us'], 1) for r in runs]} µs, "
                f"load {[round(r['load'], 1) for r in runs]}"
            )
    if a.json:
        a.json.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
