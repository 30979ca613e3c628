"""Upgrading an install (issue 23, item 7; issue 35): ``cronbase migrate`` on a database of an
older version that holds a history and live jobs, watched for long locks and for what a live
worker and producer feel meanwhile.

``python -m bench.upgrade_lock`` (``make bench-upgrade``; ``BENCH_UPGRADE_ARGS="--finished
100000"`` for a short run). On the benchmark's own PostgreSQL (cluster.py):

1. a database migrated to ``--from`` (14, the schema before 0015's history, or 19, the one before
   0020's tickets) by the migrator's own ``apply_migrations`` with the migrations list cut there;
2. from 14: ``--finished`` finished jobs (default 1,000,000: 90% succeeded, 5% dead, 5%
   cancelled, over 30 days) written in place in ``cronbase.jobs`` by SQL, one ``job_attempts``
   row per dead job and per tenth succeeded job, and ``--live`` queued jobs due now (default
   1,000). From 19: the same finished jobs written in ``cronbase.jobs_history`` (its days made
   by ``create_history_days``, a week ahead too), and in ``cronbase.jobs`` ``--live`` queued jobs
   due now (default 100,000), ``--later`` due in the next day (10,000) and ``--running`` leased
   (5,000): 0020 builds its indexes on ``jobs``. Then ``VACUUM ANALYZE``;
3. the pending migrations replayed on a copy of that database (``CREATE DATABASE ... TEMPLATE``),
   each in its own transaction as the migrator runs it, statement by statement: each statement
   timed, and the locks the transaction holds read from ``pg_locks`` after it, so each lock is
   named with the statement that took it (``cronbase migrate`` sends a migration as one string,
   which is all ``pg_stat_activity`` shows); the copy is then dropped;
4. ``cronbase migrate`` (the CLI, in its own process: the pending migrations, then the move of
   finished rows and legacy attempts into the history, retention.move_history) while
   - a sampler polls ``pg_locks`` joined to ``pg_stat_activity`` every ``--sample-ms`` (20 ms)
     and records, for each granted AccessExclusiveLock / ExclusiveLock / ShareRowExclusiveLock /
     ShareLock (the modes that stop writers) on a relation of the schema (locktype 'relation':
     not the brief extension locks), its span from first to last sighting in consecutive polls
     (a lock taken on a relation the migration creates is invisible to other sessions until
     commit, and blocks nobody: only existing relations are seen);
   - probes, each on its own connection (one that waits delays no other), run every
     ``--probe-ms`` (50 ms), each statement its own transaction, timed: from 14, a ``SELECT`` of
     one job by id and a claim-like ``UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP
     LOCKED)``; from 19, what the previous release runs: that ``SELECT``, its claim (the
     MATERIALIZED ``FOR UPDATE SKIP LOCKED`` pick along ``jobs_due_idx``, and the lease), its
     finish of a leased job (moved to ``jobs_history`` by its token) and its producer's
     ``INSERT`` of a job.

Prints the migration's total time, the DDL's (until the CLI reports the version) and the move's
(after it), the longest lock on each relation with the statement that took it, the replay's
statements, and the probes' worst latencies, as Markdown; writes it with a JSON file to
``bench/results/``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from cronbase.db import migrate
from cronbase.db.queries import render

from . import harness, report
from .cluster import Cluster, running_cluster
from .run import machine

HERE = Path(__file__).resolve().parent
# The versions an upgrade can start from: before 0015_history, before 0020_tickets.
FROM_VERSIONS = (14, 19)
# Per starting version: --live, --later and --running when not given.
DEFAULTS = {14: (1_000, 0, 0), 19: (100_000, 10_000, 5_000)}

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
# From 19: the history's days (the 30 the rows span, and the week ahead maintenance makes),
# then the same finished jobs written there, their ids from the live table's sequence.
HISTORY_DAYS = """
SELECT cronbase.create_history_days((now() - interval '31 days')::date,
                                    (now() + interval '7 days')::date)
"""
HISTORY = """
INSERT INTO cronbase.jobs_history (id, task, queue, payload, status, attempts, max_attempts,
    run_at, started_at, finished_at, created_at, updated_at, last_error, error_type, progress)
SELECT nextval(pg_get_serial_sequence('cronbase.jobs', 'id')), 'old', 'default',
       jsonb_build_object('n', i),
       CASE i %% 20 WHEN 0 THEN 'dead' WHEN 1 THEN 'cancelled' ELSE 'succeeded' END,
       CASE i %% 20 WHEN 1 THEN 0 ELSE 1 END, CASE i %% 20 WHEN 0 THEN 1 ELSE 20 END,
       f - interval '2 s', f - interval '1 s', f, f - interval '2 s', f,
       CASE i %% 20 WHEN 0 THEN 'ValueError: bench' END,
       CASE i %% 20 WHEN 0 THEN 'ValueError' END, 100
FROM generate_series(1, %(n)s) AS i,
     LATERAL (SELECT now() - interval '30 days' + i * (interval '30 days' / %(n)s) AS f) t
"""
LIVE = """
INSERT INTO cronbase.jobs (task, queue, payload)
SELECT 'live', 'default', jsonb_build_object('n', i) FROM generate_series(1, %(n)s) AS i
"""
# Waiting to run later (scheduled, retried): spread over the next day.
LATER = """
INSERT INTO cronbase.jobs (task, queue, payload, run_at)
SELECT 'later', 'default', jsonb_build_object('n', i),
       now() + i * (interval '1 day' / %(n)s)
FROM generate_series(1, %(n)s) AS i
"""
# Leased by a worker of the previous release (a lease of a day: no reaper takes them back);
# the finish probe ends them one by one.
RUNNING = """
INSERT INTO cronbase.jobs (task, queue, payload, status, attempts, locked_by, locked_until,
                           lease_token, started_at)
SELECT 'running', 'default', jsonb_build_object('n', i), 'running', 1, 'bench',
       now() + interval '1 day', gen_random_uuid(), now()
FROM generate_series(1, %(n)s) AS i
"""

LOCKS = """
SELECT l.pid, l.mode, c.relname, a.application_name, left(a.query, 120)
FROM pg_locks l
JOIN pg_class c ON c.oid = l.relation
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'relation' AND n.nspname = 'cronbase' AND l.granted
  AND l.pid <> pg_backend_pid()
  AND l.mode IN ('AccessExclusiveLock', 'ExclusiveLock', 'ShareRowExclusiveLock', 'ShareLock')
"""
# The replay's own locks: its transaction sees the relations it has created, uncommitted.
OWN_LOCKS = """
SELECT c.relname, l.mode
FROM pg_locks l
JOIN pg_class c ON c.oid = l.relation
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE l.locktype = 'relation' AND n.nspname = 'cronbase' AND l.pid = pg_backend_pid()
"""
RELATIONS = """
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'cronbase'
"""
# Weakest first: PostgreSQL's table-level lock modes.
MODES = (
    "AccessShareLock",
    "RowShareLock",
    "RowExclusiveLock",
    "ShareUpdateExclusiveLock",
    "ShareLock",
    "ShareRowExclusiveLock",
    "ExclusiveLock",
    "AccessExclusiveLock",
)

PROBE_SELECT = "SELECT id, status FROM cronbase.jobs WHERE id = %s"
PROBE_CLAIM = """
UPDATE cronbase.jobs SET updated_at = now()
WHERE id = (SELECT id FROM cronbase.jobs
            WHERE status IN ('queued', 'failed') AND flow_key IS NULL AND run_at <= now()
              AND task = 'live'
            ORDER BY priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id
"""
# The previous release's claim (claim_jobs of 0019, for one job of any task): the pick along
# jobs_due_idx, fenced by the MATERIALIZED CTE, and the lease.
PROBE_CLAIM_19 = """
WITH picked AS MATERIALIZED (
    SELECT id FROM cronbase.jobs j
    WHERE status IN ('queued', 'failed') AND run_at <= now() AND flow_key IS NULL
      AND NOT EXISTS (SELECT FROM cronbase.queues q WHERE q.name = j.queue AND q.holds_claims)
    ORDER BY priority, run_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE cronbase.jobs j
SET status = 'running', attempts = j.attempts + 1, locked_by = 'probe',
    locked_until = now() + j.lease, lease_token = gen_random_uuid(),
    started_at = now(), updated_at = now()
FROM picked
WHERE j.id = picked.id
RETURNING j.id
"""
# Its success (the complete_jobs fragment of 0019): the leased row moved to the history, fenced
# by its token; the columns of 0019's jobs, listed (0020 adds ready_xid to both tables).
PROBE_FINISH_19 = """
WITH done AS (
    DELETE FROM cronbase.jobs j WHERE j.id = %(id)s AND j.lease_token = %(token)s
    RETURNING j.*
)
INSERT INTO cronbase.jobs_history (id, task, queue, payload, status, priority, run_at, attempts,
    max_attempts, lease, locked_by, locked_until, lease_token, idempotency_key, dedupe_key,
    progress, stage, last_error, error_type, started_at, created_at, updated_at, finished_at,
    metadata, flow_key, result, snoozes, wait_notify, unique_for_key, parents_left,
    has_dependents, on_parent_failure, receives, workflow_id, waiting_for, task_version,
    base_priority)
SELECT id, task, queue, payload, 'succeeded', priority, run_at, attempts, max_attempts, lease,
       locked_by, NULL, NULL, idempotency_key, dedupe_key, 100, stage, last_error, error_type,
       started_at, created_at, now(), now(), metadata, flow_key, result, snoozes, wait_notify,
       unique_for_key, parents_left, has_dependents, on_parent_failure, receives, workflow_id,
       waiting_for, task_version, base_priority
FROM done
RETURNING id
"""
# Its producer (insert_job of 0019, no keys), without the NOTIFY.
PROBE_INSERT_19 = """
INSERT INTO cronbase.jobs (task, queue, payload, priority, run_at, max_attempts, lease)
VALUES ('probe', 'default', '{"n": 0}'::jsonb, 100, now(), 20, interval '60 seconds')
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


def fill(url: str, before: int, finished: int, live: int, later: int, running: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        if before < 15:
            conn.execute(FINISHED, {"n": finished})
            conn.execute(ATTEMPTS, {})
        else:
            conn.execute(HISTORY_DAYS)
            conn.execute(HISTORY, {"n": finished})
        for sql, n in ((LIVE, live), (LATER, later), (RUNNING, running)):
            if n:  # LATER's interval / 0 would be folded, and fail, with no row to write
                conn.execute(sql, {"n": n})
        conn.execute("VACUUM ANALYZE")


def counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    out = {}
    for name, sql in (
        ("finished in jobs", "SELECT count(*) FROM cronbase.jobs WHERE finished_at IS NOT NULL"),
        ("live in jobs", "SELECT count(*) FROM cronbase.jobs WHERE finished_at IS NULL"),
        ("running in jobs", "SELECT count(*) FROM cronbase.jobs WHERE status = 'running'"),
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


_DOLLAR = re.compile(r"\$(?:[A-Za-z_][A-Za-z_0-9]*)?\$")


def split_statements(text: str) -> list[str]:
    """A migration's statements in order, their top-level comments dropped. Knows what our
    migrations use of PostgreSQL's lexis: ``--`` and ``/* */`` comments, ``'...'`` and
    ``"..."`` with doubled quotes inside, ``$tag$`` bodies."""
    statements: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        elif text.startswith("/*", i):
            i = text.index("*/", i + 2) + 2
        elif char in "'\"":
            end = i + 1
            while True:
                end = text.index(char, end) + 1
                if not text.startswith(char, end):
                    break
                end += 1
            current.append(text[i:end])
            i = end
        elif char == "$" and (tag := _DOLLAR.match(text, i)):
            end = text.index(tag.group(), tag.end()) + len(tag.group())
            current.append(text[i:end])
            i = end
        elif char == ";":
            statements.append("".join(current).strip())
            current = []
            i += 1
        else:
            current.append(char)
            i += 1
    statements.append("".join(current).strip())
    return [s for s in statements if s]


def replay(cluster: Cluster, source: str, before: int) -> list[dict[str, Any]]:
    """The migrations after ``before`` on a copy of ``source``, each in one transaction as the
    migrator runs it, statement by statement: per statement its time and the locks it took
    (relation -> mode, those the transaction did not hold before; ``existed``: the relation was
    there before the migration, so its lock can block others)."""
    copy = f"{source}_replay"
    with psycopg.connect(cluster.url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{copy}"')
        # FILE_COPY: a checkpoint and a copy of the files, not the whole database through WAL.
        admin.execute(f'CREATE DATABASE "{copy}" TEMPLATE "{source}" STRATEGY FILE_COPY')
    steps: list[dict[str, Any]] = []
    try:
        with psycopg.connect(cluster.url(copy)) as conn:
            for migration in migrate.MIGRATIONS:
                if migration.version <= before:
                    continue
                existing = {row[0] for row in conn.execute(RELATIONS)}
                held: set[tuple[str, str]] = set()
                text = render(migration.template, "cronbase").decode()
                for number, statement in enumerate(split_statements(text), start=1):
                    start = time.monotonic()
                    conn.execute(statement.encode())
                    took = time.monotonic() - start
                    now_held = {(rel, mode) for rel, mode in conn.execute(OWN_LOCKS)}
                    steps.append(
                        {
                            "migration": migration.version,
                            "number": number,
                            "statement": " ".join(statement.split()),
                            "ms": took * 1000,
                            "took": [
                                {"relation": rel, "mode": mode, "existed": rel in existing}
                                for rel, mode in sorted(now_held - held)
                            ],
                        }
                    )
                    held |= now_held
                start = time.monotonic()
                conn.commit()
                steps.append(
                    {
                        "migration": migration.version,
                        "number": 0,
                        "statement": "COMMIT",
                        "ms": (time.monotonic() - start) * 1000,
                        "took": [],
                    }
                )
    finally:
        with psycopg.connect(cluster.url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{copy}" WITH (FORCE)')
    # Each lock is held from its statement to its migration's commit.
    for step in steps:
        step["held_to_commit_ms"] = sum(
            s["ms"]
            for s in steps
            if s["migration"] == step["migration"]
            and (s["number"] == 0 or 0 < step["number"] <= s["number"])
        )
    return steps


def strongest(modes: list[str]) -> str:
    return max(modes, key=MODES.index)


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

    def longest(self, origin: float) -> list[dict[str, Any]]:
        spans = [
            {
                "pid": pid,
                "mode": mode,
                "relation": rel,
                "first_s": first - origin,
                "held_ms": (last - first) * 1000,
                "application": app,
                "query": query,
            }
            for (pid, mode, rel), (first, last, app, query) in self.ended
        ]
        return sorted(spans, key=lambda s: -s["held_ms"])


class Probe(threading.Thread):
    """One statement of a live worker or producer on its own connection, every ``interval``,
    each run its own transaction, timed; it ends when ``params`` runs out."""

    def __init__(
        self, url: str, interval: float, sql: str, params: Iterator[Any], *, name: str
    ) -> None:
        super().__init__(daemon=True, name=name)
        self.url, self.interval, self.sql, self.params = url, interval, sql, params
        self.stop = threading.Event()
        self.runs: list[tuple[float, float]] = []  # (when, seconds)
        self.errors: list[str] = []

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            for params in self.params:
                if self.stop.is_set():
                    return
                start = time.monotonic()
                try:
                    conn.execute(self.sql.encode(), params).fetchall()
                except psycopg.Error as exc:  # recorded, and the probe goes on
                    self.errors.append(str(exc).strip().splitlines()[0])
                self.runs.append((start, time.monotonic() - start))
                time.sleep(self.interval)


def probes(url: str, before: int, interval: float) -> list[Probe]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT min(id) FROM cronbase.jobs WHERE task = 'live'").fetchone()
        job_id = int(row[0]) if row and row[0] else 1
        leased = conn.execute(
            "SELECT id, lease_token FROM cronbase.jobs WHERE locked_by = 'bench' ORDER BY id"
        ).fetchall()
    select = Probe(url, interval, PROBE_SELECT, itertools.repeat([job_id]), name="select")
    if before < 15:
        return [select, Probe(url, interval, PROBE_CLAIM, itertools.repeat(None), name="claim")]
    finish = ({"id": job, "token": token} for job, token in leased)
    return [
        select,
        Probe(url, interval, PROBE_CLAIM_19, itertools.repeat(None), name="claim"),
        Probe(url, interval, PROBE_FINISH_19, finish, name="finish"),
        Probe(url, interval, PROBE_INSERT_19, itertools.repeat(None), name="insert"),
    ]


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


def day_pattern(relation: str) -> str:
    """A history partition's name with its status as STATUS and its day as YYYYMMDD: one row
    for a month of them."""
    relation = re.sub(r"^jobs_history_(succeeded|dead|cancelled)", "jobs_history_STATUS", relation)
    return re.sub(r"_\d{8}$", "_YYYYMMDD", relation)


def taken_by(steps: list[dict[str, Any]], relation: str, mode: str) -> str:
    """The replay's statements that took ``mode`` on ``relation`` (or on a partition named like
    it), as "0020 #3 (1,234 ms to commit): ALTER TABLE ..."."""
    found = [
        f"{s['migration']:04d} #{s['number']} ({s['held_to_commit_ms']:,.0f} ms to commit): "
        + s["statement"][:70]
        for s in steps
        if any(day_pattern(t["relation"]) == relation and t["mode"] == mode for t in s["took"])
    ]
    return "; ".join(found[:2]) if found else "(not in the replay)"


def lock_rows(result: dict[str, Any]) -> list[str]:
    """The longest span on each relation (the history's partitions of a kind as one row), with the
    statement that took it: the replay's for the DDL, the query seen for the move after it."""
    ddl_end = result["migrate"]["ddl_s"]
    per_relation: dict[str, dict[str, Any]] = {}
    partitions: dict[str, set[str]] = {}
    for s in result["locks"]:  # longest first
        name = day_pattern(s["relation"])
        per_relation.setdefault(name, s)
        partitions.setdefault(name, set()).add(s["relation"])
    rows = []
    for name, s in list(per_relation.items())[:24]:
        if s["first_s"] <= ddl_end:
            statement = taken_by(result["replay"], name, s["mode"])
        else:
            statement = "move: " + " ".join(str(s["query"]).split())[:70]
        count = len(partitions[name])
        shown = f"{name} ({count})" if count > 1 else name
        rows.append(
            f"| {s['held_ms']:,.0f} ms | {s['mode']} | {shown} | {s['first_s']:.2f} s | "
            f"`{statement}` |"
        )
    return rows


def replay_rows(steps: list[dict[str, Any]]) -> list[str]:
    """The replay's statements of 5 ms or more, or that took a lock that stops writers on a
    relation that existed."""
    rows = []
    blocking = MODES[MODES.index("ShareLock") :]
    for s in steps:
        strong = [t for t in s["took"] if t["existed"] and t["mode"] in blocking]
        if s["ms"] < 5 and not strong:
            continue
        names = sorted({day_pattern(t["relation"]) for t in strong})
        modes = strongest([t["mode"] for t in strong]) if strong else ""
        locks = f"{modes} on {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}"
        rows.append(
            f"| {s['migration']:04d} #{s['number']} | {s['ms']:,.1f} ms | "
            f"{s['held_to_commit_ms']:,.0f} ms | {locks if strong else ''} | "
            f"`{s['statement'][:80]}` |"
        )
    return rows


def markdown(result: dict[str, Any]) -> str:
    m, pg, mig = result["machine"], result["postgres"], result["migrate"]
    before = result["settings"]["before"]
    pending = f"{before + 1:04d}" + (
        f"-{migrate.LATEST_VERSION:04d}" if before + 1 < migrate.LATEST_VERSION else ""
    )
    top = result["locks"][:1]
    lines = [
        f"Upgrading an install from version {before}, {result['date']}",
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
        f"| migrations {pending} (until the version line; process start included) | "
        f"{mig['ddl_s']:.2f} s |",
        f"| move of finished rows and attempts (after it) | {mig['move_s']:.2f} s |",
        f"| longest lock that stops writers seen | {top[0]['held_ms'] if top else 0:,.0f} ms |",
    ]
    for name, p in result["probe"].items():
        if name == "errors":
            continue
        lines.append(
            f"| probe {name} during the migration: max / p99 / p50 ({p['n']} runs) | "
            f"{p['max_ms']:,.1f} / {p['p99_ms']:.1f} / {p['p50_ms']:.1f} ms |"
        )
        lines.append(f"| probe {name} before the migration: max | {p['before_max_ms']:.1f} ms |")
    lines += [
        "",
        "Longest lock seen on each relation (first to last sighting; the history's partitions of "
        "a kind, by status and day, as one row, their count in brackets), when first seen (since `cronbase migrate` "
        "started), and the statement that took it (the replay's, for the migrations):",
        "",
        "| held | mode | relation | first seen | taken by |",
        "|---:|---|---|---:|---|",
        *lock_rows(result),
        "",
        "The replay on a copy (each migration one transaction, as the migrator runs it): the "
        "statements of 5 ms or more, or that took a lock that stops writers on a relation "
        "that existed; `to commit`: how long what it took is held:",
        "",
        "| statement | took | to commit | locks taken on existing relations | text |",
        "|---|---:|---:|---|---|",
        *replay_rows(result["replay"]),
    ]
    if result["probe"]["errors"]:
        lines += ["", f"Probe errors: {result['probe']['errors'][:5]}"]
    lines += ["", "`cronbase migrate` said:", "", "```", *mig["output"], "```", ""]
    return "\n".join(lines)


def probe_figures(
    values: list[tuple[float, float]], start: float, end: float, before: float
) -> dict[str, Any]:
    """A statement that started before the migration ended counts as during it (one that waited
    on its commit ends after it)."""
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
    parser.add_argument(
        "--from",
        dest="before",
        type=int,
        choices=FROM_VERSIONS,
        default=FROM_VERSIONS[0],
        help="the schema version to upgrade from (14: before 0015; 19: before 0020)",
    )
    parser.add_argument("--finished", type=int, default=1_000_000, help="finished jobs")
    parser.add_argument(
        "--live", type=int, help="queued jobs due now (default 1,000 from 14, 100,000 from 19)"
    )
    parser.add_argument("--later", type=int, help="queued jobs due later (default 0 / 10,000)")
    parser.add_argument("--running", type=int, help="leased jobs (default 0 / 5,000)")
    parser.add_argument("--sample-ms", type=float, default=20.0, help="pg_locks poll interval")
    parser.add_argument("--probe-ms", type=float, default=50.0, help="probe interval")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    a = parser.parse_args(argv)
    for option, default in zip(("live", "later", "running"), DEFAULTS[a.before], strict=True):
        if getattr(a, option) is None:
            setattr(a, option, default)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the cluster on a kill

    when = dt.datetime.now(dt.UTC)
    with running_cluster() as cluster:
        print(f"PostgreSQL {cluster.version} in {cluster.folder}", flush=True)
        pg = {"version": cluster.version, "shared_buffers": cluster.show("shared_buffers")}
        url = cluster.create_database("cronbase_upgrade")
        migrate_to(url, a.before)
        print(
            f"version {a.before}; filling {a.finished:,} finished jobs, {a.live:,} due, "
            f"{a.later:,} later, {a.running:,} running",
            flush=True,
        )
        started = time.monotonic()
        fill(url, a.before, a.finished, a.live, a.later, a.running)
        fill_s = time.monotonic() - started
        with psycopg.connect(url, autocommit=True) as conn:
            before = counts(conn)
        print(f"filled in {fill_s:.0f}s: {before}", flush=True)
        started = time.monotonic()
        steps = replay(cluster, "cronbase_upgrade", a.before)
        print(f"replayed on a copy in {time.monotonic() - started:.1f}s", flush=True)
        sampler = Sampler(url, a.sample_ms / 1000)
        probing = probes(url, a.before, a.probe_ms / 1000)
        sampler.start()
        for probe in probing:
            probe.start()
        time.sleep(2.0)  # the probes' figures before the migration
        baseline = time.monotonic() - 2.0
        print("cronbase migrate", flush=True)
        mig = run_migrate(url)
        time.sleep(0.5)
        sampler.stop.set()
        for probe in probing:
            probe.stop.set()
        sampler.join()
        for probe in probing:
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
        "locks": sampler.longest(mig["start"]),
        "replay": steps,
        "samples": sampler.samples,
        "sample_gap_ms": {
            "p50": harness.percentile(gaps, 50) * 1000,
            "p99": harness.percentile(gaps, 99) * 1000,
        },
        "probe": {
            **{p.name: probe_figures(p.runs, mig["start"], mig["end"], baseline) for p in probing},
            "errors": [f"{p.name}: {e}" for p in probing for e in p.errors],
        },
    }
    report.write_results(a.out, "upgrade", when, result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
