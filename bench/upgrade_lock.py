"""Upgrading an install (issue 23, item 7): ``cronbase migrate`` on a database of version 14 that
holds finished jobs, watched for long locks and for what a live claim feels meanwhile.

``python -m bench.upgrade_lock`` (``make bench-upgrade``; ``BENCH_UPGRADE_ARGS="--finished
100000"`` for a short run). On the benchmark's own PostgreSQL (cluster.py):

1. a database migrated to version 14 (the schema before 0015's history) by the migrator's own
   ``apply_migrations`` with the migrations list cut at 0014;
2. ``--finished`` finished jobs (default 1,000,000: 90% succeeded, 5% dead, 5% cancelled, over
   30 days) written in place in ``cronbase.jobs`` by SQL, one ``job_attempts`` row per dead job
   and per tenth succeeded job, and ``--live`` queued jobs due now (default 1,000), for the probe;
   then ``VACUUM ANALYZE``;
3. ``cronbase migrate`` (the CLI, in its own process: migration 0015, then the move of the
   finished rows and legacy attempts into the history, retention.move_history) while
   - a sampler polls ``pg_locks`` joined to ``pg_stat_activity`` every ``--sample-ms`` (20 ms)
     and records, for each granted AccessExclusiveLock / ExclusiveLock / ShareRowExclusiveLock
     on a relation of the schema (locktype 'relation': not the brief extension locks), from
     its first sighting to its last in consecutive polls (a lock
     taken on a relation the migration creates is invisible to other sessions until commit, and
     blocks nobody: only existing relations are seen);
   - a probe runs every ``--probe-ms`` (50 ms) a ``SELECT`` of one job by id and a claim-like
     ``UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED)`` on ``cronbase.jobs``, each its
     own transaction, and records their latencies.

Prints the migration's total time, the DDL's (until the CLI reports the version) and the move's
(after it), the longest lock and the probe's worst latency, as Markdown; writes it with a JSON
file to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from cronbase.db import migrate

from . import harness, report
from .cluster import running_cluster
from .run import machine

HERE = Path(__file__).resolve().parent
BEFORE = 14  # the schema version before 0015_history

FINISHED = """
INSERT INTO cronbase.jobs (task, queue, payload, status, attempts, max_attempts, run_at,
    started_at, finished_at, created_at, updated_at, last_error, error_type, progress)
SELECT 'old', 'default', jsonb_build_object('n', i),
       CASE i %% 20 WHEN 0 THEN 'dead' WHEN 1 THEN 'cancelled' ELSE 'succeeded' END,
       CASE i %% 20 WHEN 1 THEN 0 ELSE 1 END, CASE i %% 20 WHEN 0 THEN 1 ELSE 20 END,
       f - interval '2 s', f - interval '1 s', f, f - interval '2 s', f,
       CASE i %% 20 WHEN 0 THEN 'ValueError: bench' END,
       CASE i %% 20 WHEN 0 THEN 'ValueError' END, 100
FROM generate_series(1, %(n)s) AS i,
     LATERAL (SELECT now() - interval '30 days' + i * (interval '30 days' / %(n)s) AS f) t
"""
ATTEMPTS = """
INSERT INTO cronbase.job_attempts (job_id, attempt, worker, started_at, finished_at, outcome,
                                   error, error_type)
SELECT id, 1, 'bench', started_at, finished_at,
       CASE status WHEN 'dead' THEN 'dead' ELSE 'failed' END,
       'ValueError: bench', 'ValueError'
FROM cronbase.jobs
WHERE status = 'dead' OR (status = 'succeeded' AND id %% 10 = 2)
"""
LIVE = """
INSERT INTO cronbase.jobs (task, queue, payload)
SELECT 'live', 'default', jsonb_build_object('n', i) FROM generate_series(1, %(n)s) AS i
"""

LOCKS = """
SELECT l.pid, l.mode, c.relname, a.application_name, left(a.query, 120)
FROM pg_locks l
JOIN pg_class c ON c.oid = l.relation
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'relation' AND n.nspname = 'cronbase' AND l.granted
  AND l.pid <> pg_backend_pid()
  AND l.mode IN ('AccessExclusiveLock', 'ExclusiveLock', 'ShareRowExclusiveLock')
"""
PROBE_SELECT = "SELECT id, status FROM cronbase.jobs WHERE id = %s"
PROBE_CLAIM = """
UPDATE cronbase.jobs SET updated_at = now()
WHERE id = (SELECT id FROM cronbase.jobs
            WHERE status IN ('queued', 'failed') AND flow_key IS NULL AND run_at <= now()
              AND task = 'live'
            ORDER BY priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id
"""


def migrate_to(url: str, version: int) -> None:
    """The migrator's own apply_migrations, with its list of migrations cut at ``version``."""
    every = migrate.MIGRATIONS
    migrate.MIGRATIONS = [m for m in every if m.version <= version]
    try:
        with psycopg.connect(url) as conn:
            migrate.apply_migrations(conn, "cronbase")
    finally:
        migrate.MIGRATIONS = every


def fill(url: str, finished: int, live: int) -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(FINISHED, {"n": finished})
        conn.execute(ATTEMPTS, {})
        conn.execute(LIVE, {"n": live})
        conn.execute("VACUUM ANALYZE cronbase.jobs, cronbase.job_attempts")
        return counts(conn)


def counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    out = {}
    for name, sql in (
        ("finished in jobs", "SELECT count(*) FROM cronbase.jobs WHERE finished_at IS NOT NULL"),
        ("live in jobs", "SELECT count(*) FROM cronbase.jobs WHERE finished_at IS NULL"),
        ("jobs_history", "SELECT count(*) FROM cronbase.jobs_history"),
        ("job_attempts", "SELECT count(*) FROM cronbase.job_attempts"),
        ("job_attempts_legacy", "SELECT count(*) FROM cronbase.job_attempts_legacy"),
    ):
        try:
            with conn.transaction():
                row = conn.execute(sql.encode()).fetchone()
            out[name] = int(row[0]) if row else 0
        except psycopg.errors.UndefinedTable:
            continue
    return out


class Sampler(threading.Thread):
    """pg_locks every ``interval``: each (pid, mode, relation) held from its first sighting to
    its last in consecutive polls (a lock missing from one poll was released: a new span)."""

    def __init__(self, url: str, interval: float) -> None:
        super().__init__(daemon=True)
        self.url, self.interval = url, interval
        self.stop = threading.Event()
        # (pid, mode, relation) -> first, last, application, query; spans ended go to `ended`.
        self.seen: dict[tuple[int, str, str], list[Any]] = {}
        self.ended: list[tuple[tuple[int, str, str], list[Any]]] = []
        self.samples = 0
        self.gaps: list[float] = []

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            last = time.monotonic()
            while not self.stop.is_set():
                rows = conn.execute(LOCKS).fetchall()
                now = time.monotonic()
                self.gaps.append(now - last)
                last = now
                self.samples += 1
                held = set()
                for pid, mode, rel, app, query in rows:
                    key = (pid, mode, rel)
                    held.add(key)
                    entry = self.seen.setdefault(key, [now, now, app, query])
                    entry[1] = now
                for key in [k for k in self.seen if k not in held]:
                    self.ended.append((key, self.seen.pop(key)))
                time.sleep(self.interval)
        self.ended += list(self.seen.items())
        self.seen = {}

    def longest(self) -> list[dict[str, Any]]:
        spans = [
            {
                "pid": pid,
                "mode": mode,
                "relation": rel,
                "held_ms": (last - first) * 1000,
                "application": app,
                "query": query,
            }
            for (pid, mode, rel), (first, last, app, query) in self.ended
        ]
        return sorted(spans, key=lambda s: -s["held_ms"])


class Probe(threading.Thread):
    """A reader and a claimer on the live table: each statement timed, every ``interval``."""

    def __init__(self, url: str, interval: float, job_id: int) -> None:
        super().__init__(daemon=True)
        self.url, self.interval, self.job_id = url, interval, job_id
        self.stop = threading.Event()
        self.select: list[tuple[float, float]] = []  # (when, seconds)
        self.claim: list[tuple[float, float]] = []
        self.errors: list[str] = []

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.is_set():
                for sql, params, out in (
                    (PROBE_SELECT, [self.job_id], self.select),
                    (PROBE_CLAIM, None, self.claim),
                ):
                    start = time.monotonic()
                    try:
                        conn.execute(sql, params).fetchall()
                    except psycopg.Error as exc:  # recorded, and the probe goes on
                        self.errors.append(str(exc).strip().splitlines()[0])
                    out.append((start, time.monotonic() - start))
                time.sleep(self.interval)


def run_migrate(url: str) -> dict[str, Any]:
    """``cronbase migrate`` in its own process, each output line stamped as it comes."""
    cli = shutil.which("cronbase", path=str(Path(sys.executable).parent)) or "cronbase"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    start = time.monotonic()
    proc = subprocess.Popen(
        [cli, "--database-url", url, "migrate"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: list[tuple[float, str]] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append((time.monotonic(), line.rstrip()))
        print(f"  [{time.monotonic() - start:7.2f}s] {line.rstrip()}", flush=True)
    code = proc.wait()
    end = time.monotonic()
    if code != 0:
        raise RuntimeError(f"cronbase migrate exited {code}: {lines}")
    versioned = next(t for t, line in lines if "migrated to version" in line)
    return {
        "start": start,
        "end": end,
        "total_s": end - start,
        "ddl_s": versioned - start,
        "move_s": end - versioned,
        "output": [line for _, line in lines],
    }


def markdown(result: dict[str, Any]) -> str:
    m, pg, mig = result["machine"], result["postgres"], result["migrate"]
    top = result["locks"][:8]
    probe = result["probe"]
    lines = [
        f"Upgrading an install, {result['date']}",
        "",
        f"- Machine: {m.get('cpu')}, {m.get('cores')} cores, {m.get('memory')}; {m.get('python')}",
        f"- PostgreSQL {pg['version']}, shared_buffers {pg['shared_buffers']}, fsync on, "
        "synchronous_commit on",
        f"- Before: {json.dumps(result['before'])} (filled in {result['fill_s']:.0f}s)",
        f"- After: {json.dumps(result['after'])}",
        f"- Sampler: {result['samples']:,} polls of pg_locks, median gap "
        f"{result['sample_gap_ms']['p50']:.1f} ms, p99 {result['sample_gap_ms']['p99']:.1f} ms",
        "",
        "| figure | value |",
        "|---|---:|",
        f"| `cronbase migrate`, total | {mig['total_s']:.2f} s |",
        f"| migration 0015 (until the version line; process start included) | "
        f"{mig['ddl_s']:.2f} s |",
        f"| move of finished rows and attempts (after it) | {mig['move_s']:.2f} s |",
        f"| longest AccessExclusive/Exclusive/ShareRowExclusive lock seen | "
        f"{top[0]['held_ms'] if top else 0:.0f} ms |",
    ]
    for name in ("select", "claim"):
        p = probe[name]
        lines.append(
            f"| probe {name} during the migration: max / p99 / p50 ({p['n']} runs) | "
            f"{p['max_ms']:.1f} / {p['p99_ms']:.1f} / {p['p50_ms']:.1f} ms |"
        )
        lines.append(f"| probe {name} before the migration: max | {p['before_max_ms']:.1f} ms |")
    lines += ["", "Longest lock seen on each relation (first to last sighting):", ""]
    lines += ["| held | mode | relation | statement |", "|---:|---|---|---|"]
    per_relation: dict[str, dict[str, Any]] = {}
    for s in result["locks"]:
        per_relation.setdefault(s["relation"], s)  # the list is longest first
    for s in list(per_relation.values())[:20]:
        query = " ".join(str(s["query"]).split())[:80]
        lines.append(f"| {s['held_ms']:.0f} ms | {s['mode']} | {s['relation']} | `{query}` |")
    if probe["errors"]:
        lines += ["", f"Probe errors: {probe['errors'][:5]}"]
    lines += ["", "`cronbase migrate` said:", "", "```", *mig["output"], "```", ""]
    return "\n".join(lines)


def probe_figures(
    values: list[tuple[float, float]], start: float, end: float, before: float
) -> dict[str, Any]:
    during = [s for t, s in values if start <= t <= end]
    prior = [s for t, s in values if before <= t < start]
    return {
        "n": len(during),
        "max_ms": max(during, default=0.0) * 1000,
        "p99_ms": harness.percentile(during, 99) * 1000,
        "p50_ms": harness.percentile(during, 50) * 1000,
        "before_max_ms": max(prior, default=0.0) * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.upgrade_lock", description=__doc__)
    parser.add_argument("--finished", type=int, default=1_000_000, help="finished jobs")
    parser.add_argument("--live", type=int, default=1_000, help="queued jobs due now")
    parser.add_argument("--sample-ms", type=float, default=20.0, help="pg_locks poll interval")
    parser.add_argument("--probe-ms", type=float, default=50.0, help="probe interval")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    a = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the cluster on a kill

    when = dt.datetime.now(dt.UTC)
    with running_cluster() as cluster:
        print(f"PostgreSQL {cluster.version} in {cluster.folder}", flush=True)
        pg = {"version": cluster.version, "shared_buffers": cluster.show("shared_buffers")}
        url = cluster.create_database("cronbase_upgrade")
        migrate_to(url, BEFORE)
        print(f"version {BEFORE}; filling {a.finished:,} finished jobs", flush=True)
        started = time.monotonic()
        before = fill(url, a.finished, a.live)
        fill_s = time.monotonic() - started
        print(f"filled in {fill_s:.0f}s: {before}", flush=True)
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SELECT min(id) FROM cronbase.jobs WHERE task = 'live'").fetchone()
        sampler = Sampler(url, a.sample_ms / 1000)
        probe = Probe(url, a.probe_ms / 1000, int(row[0]) if row and row[0] else 1)
        sampler.start()
        probe.start()
        time.sleep(2.0)  # the probe's figures before the migration
        baseline = time.monotonic() - 2.0
        print("cronbase migrate", flush=True)
        mig = run_migrate(url)
        time.sleep(0.5)
        sampler.stop.set()
        probe.stop.set()
        sampler.join()
        probe.join()
        with psycopg.connect(url, autocommit=True) as conn:
            after = counts(conn)
    gaps = sampler.gaps[1:]
    result = {
        "date": when.isoformat(timespec="seconds"),
        "machine": machine(),
        "postgres": pg,
        "settings": vars(a) | {"out": str(a.out)},
        "before": before,
        "after": after,
        "fill_s": fill_s,
        "migrate": {k: v for k, v in mig.items() if k not in ("start", "end")},
        "locks": sampler.longest(),
        "samples": sampler.samples,
        "sample_gap_ms": {
            "p50": harness.percentile(gaps, 50) * 1000,
            "p99": harness.percentile(gaps, 99) * 1000,
        },
        "probe": {
            "select": probe_figures(probe.select, mig["start"], mig["end"], baseline),
            "claim": probe_figures(probe.claim, mig["start"], mig["end"], baseline),
            "errors": probe.errors,
        },
    }
    report.write_results(a.out, "upgrade", when, result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
