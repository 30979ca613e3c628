"""History at scale (issue 23, item 6): cronbase beside months of finished jobs, and its peers.

``python -m bench.history_scale`` (``make bench-history``; ``BENCH_HISTORY_ARGS="--history
200000"`` for a run of a few minutes). On the benchmark's own PostgreSQL (cluster.py), two
cronbase databases:

- *empty*: migrated, the same days of history partitions made, nothing in them;
- *full*: ``--history`` finished jobs (default 10,000,000) written straight into
  ``cronbase.jobs_history`` by ``INSERT ... SELECT generate_series`` a day at a time over
  ``--days`` past days (partitions made first by ``create_history_days``), 90% succeeded, 5% dead
  (each with one ``job_attempts`` row), 5% cancelled, plus ``--future`` jobs (default
  1,000,000) queued in ``cronbase.jobs`` to run in a day or later; then ``VACUUM ANALYZE``.

On each, the same measurements:

- *enqueue*: ``task.defer()`` one per transaction, ``--due`` jobs (default 5,000), each timed;
- *claim*: those jobs drained by the worker's ``claim_jobs`` statement from psycopg (bench's
  "cronbase SQL, no library"), ``--claim-batch`` per claim (default 1), each claim carrying the
  previous one's successes into the history as a worker's do; each claim timed;
- *drain*: ``--due`` more jobs, a burst worker (``run_worker(burst=True)``, concurrency 10);
- ``app.jobs.get(id)`` of random old jobs (the oldest third of the days; on the empty database,
  jobs the claim just finished);
- dashboard pages in-process (``create_app`` through httpx's ASGI transport): ``/jobs``,
  ``/jobs?status=succeeded``, an old job's page and ``/storage``, few requests each (at 10M
  rows one takes seconds: ``--page-samples``, ``--job-page-samples``, ``--storage-samples``),
  then again with ``jit = off`` for the database;
- retention's drop of the oldest day: ``drop_history_days`` for each status and for the
  attempts (the function retention's round calls), timed together.

pgqueuer and procrastinate (bench/subjects) get ``--peer-history`` finished rows (default: as
many as cronbase's, capped at ``--peer-cap``) in the tables their schema keeps finished work in
(pgqueuer: ``pgqueuer_log`` as 'successful', plus one ``pgqueuer_statistics`` row per 10 jobs;
procrastinate: ``procrastinate_jobs`` as 'succeeded' with 3 ``procrastinate_events`` each), and
are measured beside an empty database (``--peer-cap`` 1,000,000 by default: procrastinate's
10M would be 30M event rows): single enqueue, and a 1-process drain of ``--due`` jobs
with their defaults. Prints Markdown and writes it with the JSON to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import random
import signal
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import psycopg

import cronbase
from cronbase.dashboard import create_app

from . import harness, report
from .cluster import Cluster, running_cluster
from .run import machine
from .subjects import cronbase_sql, cronbase_subject, pgqueuer_subject, procrastinate_subject

HERE = Path(__file__).resolve().parent

Row = dict[str, Any]  # figure, system, database, value, unit, n

# -- filling ---------------------------------------------------------------------------------------

# One day of history: ids first..last, finished evenly over the day, oldest first.
HISTORY_DAY = """
INSERT INTO cronbase.jobs_history (id, task, queue, payload, status, attempts, max_attempts,
    run_at, started_at, finished_at, created_at, updated_at, last_error, error_type, progress)
SELECT i, 'old', 'default', jsonb_build_object('n', i),
       CASE i %% 20 WHEN 0 THEN 'dead' WHEN 1 THEN 'cancelled' ELSE 'succeeded' END,
       CASE i %% 20 WHEN 1 THEN 0 ELSE 1 END, CASE i %% 20 WHEN 0 THEN 1 ELSE 20 END,
       f - interval '2 s', f - interval '1 s', f, f - interval '2 s', f,
       CASE i %% 20 WHEN 0 THEN 'ValueError: bench' END,
       CASE i %% 20 WHEN 0 THEN 'ValueError' END, 100
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i,
     LATERAL (SELECT %(day)s::timestamptz
                     + (i - %(first)s) * (interval '86399 s' / %(per_day)s) AS f) t
"""
ATTEMPTS_DAY = """
INSERT INTO cronbase.job_attempts (job_id, attempt, worker, started_at, finished_at, outcome,
                                   error, error_type)
SELECT id, 1, 'bench', started_at, finished_at, 'dead', last_error, error_type
FROM cronbase.jobs_history_dead
WHERE finished_at >= %(day)s::timestamptz AND finished_at < %(day)s::timestamptz + interval '1 day'
"""
FUTURE = """
INSERT INTO cronbase.jobs (task, queue, payload, run_at)
SELECT 'future', 'default', jsonb_build_object('n', i),
       now() + interval '1 day' + i * interval '1 s'
FROM generate_series(1, %(future)s) AS i
"""

PGQ_LOG = """
INSERT INTO pgqueuer_log (created, job_id, status, priority, entrypoint, aggregated)
SELECT %(start)s::timestamptz + i * (%(span)s::interval / %(n)s), i, 'successful', 0, 'noop',
       true
FROM generate_series(1, %(n)s) AS i
"""
PGQ_STATS = """
INSERT INTO pgqueuer_statistics (created, count, priority, status, entrypoint)
SELECT %(start)s::timestamptz + i * (%(span)s::interval / %(n)s), 10, 0, 'successful', 'noop'
FROM generate_series(1, %(n)s / 10) AS i
"""
PROC_JOBS = """
INSERT INTO procrastinate_jobs (id, queue_name, task_name, args, status, attempts)
SELECT i, 'default', 'noop', jsonb_build_object('n', i), 'succeeded', 1
FROM generate_series(1, %(n)s) AS i
"""
PROC_EVENTS = """
INSERT INTO procrastinate_events (job_id, type, at)
SELECT i, e.type::procrastinate_job_event_type,
       %(start)s::timestamptz + i * (%(span)s::interval / %(n)s) + e.k * interval '1 ms'
FROM generate_series(1, %(n)s) AS i,
     (VALUES (0, 'deferred'), (1, 'started'), (2, 'succeeded')) AS e(k, type)
"""


def days_of(days: int) -> tuple[dt.date, list[dt.date]]:
    """Today (UTC) and the ``days`` full days before it, oldest first."""
    today = dt.datetime.now(dt.UTC).date()
    return today, [today - dt.timedelta(days=days - d) for d in range(days)]


def make_days(url: str, days: int) -> None:
    today, past = days_of(days)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "SELECT cronbase.create_history_days(%s, %s)", [past[0], today + dt.timedelta(days=7)]
        )


def fill_cronbase(url: str, history: int, future: int, days: int) -> float:
    """The full database's rows (module docstring); seconds taken (no figure includes it)."""
    start = time.perf_counter()
    make_days(url, days)
    _, past = days_of(days)
    per_day = max(1, history // days)
    with psycopg.connect(url, autocommit=True) as conn:
        first = 1
        for n, day in enumerate(past):
            last = history if n == days - 1 else min(history, first + per_day - 1)
            if first > last:
                break
            day_start = dt.datetime.combine(day, dt.time(), dt.UTC)
            params = {"first": first, "last": last, "day": day_start, "per_day": last - first + 1}
            conn.execute(HISTORY_DAY, params)
            conn.execute(ATTEMPTS_DAY, params)
            first = last + 1
            print(f"  history: day {n + 1}/{days} ({last:,} rows)", flush=True)
        # Live jobs get ids after the history's.
        conn.execute(
            "SELECT setval(pg_get_serial_sequence('cronbase.jobs', 'id'), %s)", [history + 1]
        )
        conn.execute(FUTURE, {"future": future})
        print(f"  {future:,} future jobs; VACUUM ANALYZE", flush=True)
        conn.execute("VACUUM ANALYZE cronbase.jobs")
        conn.execute("VACUUM ANALYZE cronbase.jobs_history")
        conn.execute("VACUUM ANALYZE cronbase.job_attempts")
    return time.perf_counter() - start


def fill_peer(subject: ModuleType, url: str, n: int, days: int) -> float:
    start = time.perf_counter()
    params = {
        "n": n,
        "start": dt.datetime.now(dt.UTC) - dt.timedelta(days=days),
        "span": f"{days} days",
    }
    with psycopg.connect(url, autocommit=True) as conn:
        if subject is pgqueuer_subject:
            conn.execute(PGQ_LOG, params)
            conn.execute(PGQ_STATS, params)
            conn.execute("SELECT setval('pgqueuer_id_seq', %s)", [n + 1])
            conn.execute("VACUUM ANALYZE pgqueuer_log, pgqueuer_statistics")
        else:
            conn.execute(PROC_JOBS, params)
            conn.execute(PROC_EVENTS, params)
            conn.execute("SELECT setval('procrastinate_jobs_id_seq', %s)", [n + 1])
            conn.execute("VACUUM ANALYZE procrastinate_jobs, procrastinate_events")
    return time.perf_counter() - start


# -- measuring -------------------------------------------------------------------------------------


def percentiles(name: str, system: str, db: str, seconds: list[float]) -> list[Row]:
    return [
        {
            "figure": f"{name} p{p}",
            "system": system,
            "database": db,
            "value": harness.percentile(seconds, p) * 1000,
            "unit": "ms",
            "n": len(seconds),
        }
        for p in (50, 99)
    ]


def rate(name: str, system: str, db: str, n: int, seconds: float) -> Row:
    return {
        "figure": name,
        "system": system,
        "database": db,
        "value": n / seconds,
        "unit": "jobs/s",
        "n": n,
    }


def enqueue_cronbase(url: str, n: int, db: str) -> list[Row]:
    """``task.defer()`` per job, one transaction each, each timed."""
    times: list[float] = []
    with cronbase_subject.make_app(url)[0] as app:
        noop = app.tasks["noop"]
        app.pool()
        total = time.perf_counter()
        for i in range(n):
            start = time.perf_counter()
            noop.defer(n=i)
            times.append(time.perf_counter() - start)
        total = time.perf_counter() - total
    return [
        rate("enqueue, 1 per txn", "cronbase", db, n, total),
        *percentiles("enqueue", "cronbase", db, times),
    ]


def claim_cronbase(url: str, batch: int, db: str) -> tuple[list[Row], list[int]]:
    """Drain what is due with the worker's claim_jobs, each claim carrying the previous one's
    successes: each claim timed. Returns the figures and the ids finished."""
    q = cronbase.App(database_url=url).queries
    times: list[float] = []
    finished: list[int] = []
    with psycopg.connect(url, autocommit=True) as conn:
        rows: list[Any] = []
        while True:
            start = time.perf_counter()
            rows, _, _ = cronbase_sql.claim(conn, q, batch, "bench", rows)
            times.append(time.perf_counter() - start)
            if not rows:
                break
            finished += [r.id for r in rows]
    return percentiles(
        f"claim, limit {batch} + previous successes", "cronbase", db, times
    ), finished


REMAINING = {
    "cronbase": "SELECT count(*) FROM cronbase.jobs WHERE task = 'noop'",
    "pgqueuer": "SELECT count(*) FROM pgqueuer",
    "procrastinate": "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')",
}
CLEAR = {
    "cronbase": "DELETE FROM cronbase.jobs WHERE task = 'noop'",
    "pgqueuer": "DELETE FROM pgqueuer",
    "procrastinate": "DELETE FROM procrastinate_jobs WHERE status IN ('todo', 'doing')",
}
DRAIN_CONFIG: dict[str, Any] = {"cronbase": 10, "pgqueuer": (1, 10), "procrastinate": 10}


def enqueue_peer(subject: ModuleType, url: str, n: int, db: str) -> Row:
    seconds = subject.enqueue_single(url, n)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(CLEAR[subject.NAME])
    return rate("enqueue, 1 per txn", subject.NAME, db, n, seconds)


def drain_1proc(subject: ModuleType, url: str, n: int, db: str, cap: float) -> Row:
    """Preload ``n`` due jobs, one worker process with the subject's defaults drains them."""
    subject.preload(url, n)
    result = harness.run_children(subject.drain_child, [(url, DRAIN_CONFIG[subject.NAME])], cap)
    done = n - harness.count(url, REMAINING[subject.NAME])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(CLEAR[subject.NAME])
    row = rate("drain, 1 proc, defaults", subject.NAME, db, done, result.elapsed)
    row["capped"] = not result.finished
    return row


def get_old(url: str, ids: list[int], db: str) -> list[Row]:
    times: list[float] = []
    with cronbase.App(database_url=url) as app:
        app.jobs.get(ids[0])  # the pool opened outside the clock
        for job_id in ids:
            start = time.perf_counter()
            app.jobs.get(job_id)
            times.append(time.perf_counter() - start)
    return percentiles("app.jobs.get(old id)", "cronbase", db, times)


def dashboard(url: str, old_id: int, a: argparse.Namespace, db: str) -> list[Row]:
    """The pages, in-process through the ASGI app (no socket, no server): each request timed."""
    pages = [
        ("/jobs", a.page_samples),
        ("/jobs?status=succeeded", a.page_samples),
        (f"/jobs/{old_id}", a.job_page_samples),
        ("/storage", a.storage_samples),
    ]

    async def go() -> list[Row]:
        out: list[Row] = []
        with cronbase.App(database_url=url) as app:
            web = create_app(app)
            transport = httpx.ASGITransport(app=web, client=("127.0.0.1", 50000))
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
                for path, n in pages:
                    first = await http.get(path)  # warm: the pool, templates
                    if first.status_code != 200:
                        raise RuntimeError(f"dashboard {path}: {first.status_code}")
                    times: list[float] = []
                    for _ in range(n):
                        start = time.perf_counter()
                        (await http.get(path)).raise_for_status()
                        times.append(time.perf_counter() - start)
                    print(
                        f"  {path}: p50 {harness.percentile(times, 50) * 1000:.1f} ms", flush=True
                    )
                    label = path if not path.startswith("/jobs/") else "/jobs/<old id>"
                    out += percentiles(f"dashboard {label}", "cronbase", db, times)
        return out

    return asyncio.run(go())


def drop_oldest_day(url: str, days: int, db: str) -> list[Row]:
    """Retention's drop of the oldest day: drop_history_days for each status, then attempts."""
    _, past = days_of(days)
    before = dt.datetime.combine(past[0] + dt.timedelta(days=1), dt.time(), dt.UTC)
    dropped: dict[str, int] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.perf_counter()
        for status in ("succeeded", "dead", "cancelled", None):
            row = conn.execute(
                "SELECT cronbase.drop_history_days(%s, %s)", [status, before]
            ).fetchone()
            dropped.update((row and row[0]) or {})
        seconds = time.perf_counter() - start
    partitions = len(dropped)
    if partitions != 4:
        raise RuntimeError(f"expected 4 partitions of {past[0]} dropped, got {dropped}")
    return [
        {
            "figure": "drop the oldest day (3 statuses + attempts)",
            "system": "cronbase",
            "database": db,
            "value": seconds * 1000,
            "unit": "ms",
            "n": sum(dropped.values()),
        }
    ]


def measure_cronbase(url: str, a: argparse.Namespace, db: str, old_ids: list[int]) -> list[Row]:
    out: list[Row] = []
    print(f"cronbase, {db}: enqueue", flush=True)
    out += enqueue_cronbase(url, a.due, db)
    print(f"cronbase, {db}: claim", flush=True)
    rows, finished = claim_cronbase(url, a.claim_batch, db)
    out += rows
    print(f"cronbase, {db}: drain", flush=True)
    out.append(drain_1proc(cronbase_subject, url, a.due, db, a.drain_cap))
    rng = random.Random(23)
    ids = [rng.choice(old_ids or finished) for _ in range(a.gets)]
    print(f"cronbase, {db}: get", flush=True)
    out += get_old(url, ids, db)
    print(f"cronbase, {db}: dashboard", flush=True)
    out += dashboard(url, ids[0], a, db)
    if a.jit_off_pass:
        # PostgreSQL's default jit=on compiles the plans of statements over jobs_all (one scan
        # per partition) when their estimated cost passes jit_above_cost: the same pages again
        # with jit off for this database (new connections).
        with psycopg.connect(url, autocommit=True) as conn:
            dbname = conn.info.dbname
            conn.execute(f'ALTER DATABASE "{dbname}" SET jit = off'.encode())
        print(f"cronbase, {db}: dashboard, jit=off", flush=True)
        out += dashboard(url, ids[0], a, db + ", jit=off")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{dbname}" RESET jit'.encode())
    print(f"cronbase, {db}: drop a day", flush=True)
    out += drop_oldest_day(url, a.days, db)
    return out


def measure_peer(subject: ModuleType, url: str, a: argparse.Namespace, db: str) -> list[Row]:
    print(f"{subject.NAME}, {db}: enqueue, drain", flush=True)
    return [
        enqueue_peer(subject, url, a.peer_enqueue, db),
        drain_1proc(subject, url, a.due, db, a.drain_cap),
    ]


def explain(url: str, old_id: int) -> str:
    """Plans of the statements behind the figures, on the full database (for the report)."""
    statements = [
        ("get_job", f"SELECT * FROM cronbase.jobs_all WHERE id = {int(old_id)}"),  # noqa: S608
        (
            "list_jobs (dashboard /jobs)",
            "SELECT * FROM cronbase.jobs_all ORDER BY id DESC LIMIT 51",
        ),
        (
            "list_jobs status=succeeded",
            "SELECT * FROM cronbase.jobs_all WHERE status = 'succeeded' ORDER BY id DESC LIMIT 51",
        ),
    ]
    graph = cronbase.App(database_url=url).queries.job_graph
    statements.append(
        ("job_graph (dashboard /jobs/<id>)", graph.decode().replace("%(id)s", str(old_id)))
    )
    statements[-1] = (statements[-1][0], statements[-1][1].replace("%(limit)s", "100"))
    queues = cronbase.App(database_url=url).queries.list_queues.decode()
    statements.append(("list_queues (every /jobs page)", queues))
    out = []
    with psycopg.connect(url, autocommit=True) as conn:
        for name, sql in statements:
            rows = conn.execute(f"EXPLAIN (ANALYZE, SUMMARY) {sql}".encode()).fetchall()
            lines = [r[0] for r in rows]
            # The first lines (the plan's top), and the summary: JIT, planning, execution.
            tail = [
                x
                for x in lines
                if x.lstrip().startswith(("JIT", "Functions", "Timing", "Planning", "Execution"))
            ]
            out.append(f"-- {name}: {len(lines)} plan lines\n" + "\n".join(lines[:4] + tail))
    return "\n\n".join(out)


# -- report ----------------------------------------------------------------------------------------


def markdown(result: dict[str, Any]) -> str:
    rows: list[Row] = result["rows"]
    m = result["machine"]
    pg = result["postgres"]
    lines = [
        f"History at scale, {result['date']} ({result['elapsed_seconds']:.0f}s)",
        "",
        f"- Machine: {m.get('cpu')}, {m.get('cores')} cores, {m.get('memory')}; {m.get('python')}",
        f"- PostgreSQL {pg['version']}, shared_buffers {pg['shared_buffers']}, fsync on, "
        "synchronous_commit on, TCP on 127.0.0.1",
        f"- cronbase full database: {result['history']:,} finished jobs over {result['days']} "
        f"days + {result['future']:,} future jobs (filled in {result['fill_seconds']:.0f}s); "
        f"peers: {result['peer_history']:,} finished jobs (filled in "
        + ", ".join(f"{k} {v:.0f}s" for k, v in result["peer_fill_seconds"].items())
        + ")",
        "",
        "| figure | system | empty | full | full ÷ empty | samples | empty, jit=off | full, jit=off |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    keyed = {(r["figure"], r["system"], r["database"]): r for r in rows}
    seen: list[tuple[str, str]] = []
    for r in rows:
        if (r["figure"], r["system"]) not in seen:
            seen.append((r["figure"], r["system"]))
    for figure, system in seen:
        empty = keyed.get((figure, system, "empty"))
        full = keyed.get((figure, system, "full"))
        if not empty or not full:
            continue
        unit = empty["unit"]
        fmt = "{:,.0f}" if unit == "jobs/s" else "{:,.2f}"
        ratio = full["value"] / empty["value"] if empty["value"] else float("nan")
        off = [keyed.get((figure, system, db + ", jit=off")) for db in ("empty", "full")]
        jit = " | ".join(f"{fmt.format(r['value'])} {unit}" if r else "" for r in off)
        lines.append(
            f"| {figure} | {system} | {fmt.format(empty['value'])} {unit} | "
            f"{fmt.format(full['value'])} {unit} | {ratio:.2f}x | {full['n']:,} | {jit} |"
        )
    lines += ["", "Plans on the full database:", "", "```", result["plans"], "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.history_scale", description=__doc__)
    parser.add_argument("--history", type=int, default=10_000_000, help="finished jobs")
    parser.add_argument("--future", type=int, default=1_000_000, help="future jobs")
    parser.add_argument("--days", type=int, default=30, help="days the history spans")
    parser.add_argument("--due", type=int, default=5_000, help="jobs enqueued, claimed, drained")
    parser.add_argument("--claim-batch", type=int, default=1, help="claim_jobs limit")
    parser.add_argument("--gets", type=int, default=1_000, help="jobs.get calls")
    parser.add_argument("--page-samples", type=int, default=10, help="requests per page")
    parser.add_argument("--job-page-samples", type=int, default=3, help="old job page requests")
    parser.add_argument(
        "--no-jit-off-pass",
        dest="jit_off_pass",
        action="store_false",
        help="skip the jit=off pages",
    )
    parser.add_argument("--storage-samples", type=int, default=10, help="/storage requests")
    parser.add_argument(
        "--peer-history", type=int, help="peers' finished rows (default: --history)"
    )
    parser.add_argument("--peer-cap", type=int, default=1_000_000, help="at most this many")
    parser.add_argument("--peer-enqueue", type=int, default=2_000, help="peers' enqueued jobs")
    parser.add_argument("--no-peers", action="store_true", help="cronbase only")
    parser.add_argument("--drain-cap", type=float, default=60.0, help="seconds per drain")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    a = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the cluster on a kill
    peer_n = min(a.peer_history if a.peer_history is not None else a.history, a.peer_cap)

    started = time.monotonic()
    when = dt.datetime.now(dt.UTC)
    rows: list[Row] = []
    peer_fill: dict[str, float] = {}
    with running_cluster() as cluster:
        print(f"PostgreSQL {cluster.version} in {cluster.folder}", flush=True)
        pg = {"version": cluster.version, "shared_buffers": cluster.show("shared_buffers")}
        empty = setup_cronbase(cluster, "cronbase_empty", a.days)
        rows += measure_cronbase(empty, a, "empty", [])
        full = setup_cronbase(cluster, "cronbase_full", a.days)
        print(f"filling {a.history:,} history rows, {a.future:,} future jobs", flush=True)
        fill = fill_cronbase(full, a.history, a.future, a.days)
        print(f"filled in {fill:.0f}s", flush=True)
        per_day = max(1, a.history // a.days)
        third = max(1, min(a.history, per_day * max(1, a.days // 3)))
        old_ids = list(range(1, third + 1)) if a.history else []
        plans = explain(full, old_ids[len(old_ids) // 2] if old_ids else 1)
        rows += measure_cronbase(full, a, "full", old_ids)
        if not a.no_peers:
            for subject in (pgqueuer_subject, procrastinate_subject):
                name = subject.__name__.rsplit(".", 1)[-1]
                url = cluster.create_database(name + "_empty")
                subject.setup(url)
                rows += measure_peer(subject, url, a, "empty")
                url = cluster.create_database(name + "_full")
                subject.setup(url)
                print(f"filling {peer_n:,} {subject.NAME} rows", flush=True)
                peer_fill[subject.NAME] = fill_peer(subject, url, peer_n, a.days)
                rows += measure_peer(subject, url, a, "full")
    result = {
        "date": when.isoformat(timespec="seconds"),
        "elapsed_seconds": round(time.monotonic() - started, 1),
        "machine": machine(),
        "postgres": pg,
        "history": a.history,
        "future": a.future,
        "days": a.days,
        "peer_history": 0 if a.no_peers else peer_n,
        "fill_seconds": fill,
        "peer_fill_seconds": peer_fill,
        "settings": vars(a) | {"out": str(a.out)},
        "rows": rows,
        "plans": plans,
    }
    report.write_results(a.out, "history", when, result, markdown(result))
    return 0


def setup_cronbase(cluster: Cluster, name: str, days: int) -> str:
    url = cluster.create_database(name)
    cronbase_subject.setup(url)
    make_days(url, days)
    return url


if __name__ == "__main__":
    sys.exit(main())
