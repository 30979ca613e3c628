"""The raw-SQL ceiling: a minimal job table driven from psycopg with no library in between.

Every subject module offers the same functions: ``setup``, ``reset``, ``enqueue_single``,
``enqueue_bulk``, ``preload``, ``count_done``, ``drain_child``, ``latency_child`` and
``latency_produce``. Here they are the fewest round trips a Python queue on PostgreSQL could
make: claim a batch (``UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED)``), do nothing, mark
the batch done (one ``UPDATE``), each statement its own durable commit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import psycopg

NAME = "raw SQL"
CHANNEL = "raw_jobs"

SCHEMA = """
CREATE TABLE jobs (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task        text        NOT NULL,
    payload     jsonb       NOT NULL,
    priority    smallint    NOT NULL DEFAULT 100,
    run_at      timestamptz NOT NULL DEFAULT now(),
    status      text        NOT NULL DEFAULT 'queued',
    attempts    integer     NOT NULL DEFAULT 0,
    locked_until timestamptz,
    finished_at timestamptz
);
CREATE INDEX jobs_due_idx ON jobs (priority, run_at, id) WHERE status = 'queued'
"""

INSERT_ONE = "INSERT INTO jobs (task, payload) VALUES (%s, %s::jsonb) RETURNING id"
# Arrays go in binary (%b): psycopg's text dump of a list runs a regex per element, and the
# ceiling should be the fastest raw SQL, not the most obvious (binary: ~1.4x on bulk inserts).
INSERT_UNNEST = (
    "INSERT INTO jobs (task, payload) "
    "SELECT 'noop', p FROM unnest(%b::text[]::jsonb[]) AS p RETURNING id"
)
INSERT_NOTIFY = (
    "WITH j AS (INSERT INTO jobs (task, payload) VALUES ('ping', %s::jsonb) RETURNING id) "
    "SELECT pg_notify('raw_jobs', '') FROM j"
)
CLAIM = """
WITH due AS MATERIALIZED (
    SELECT id FROM jobs WHERE status = 'queued' AND run_at <= now()
    ORDER BY priority, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED
)
UPDATE jobs j SET status = 'running', attempts = j.attempts + 1,
                  locked_until = now() + interval '1 minute'
FROM due WHERE j.id = due.id
RETURNING j.id, j.payload
"""
# The ids as an array literal, as cronbase sends its own (src/cronbase/db/arrays.py): psycopg
# adapts a list in Python element by element, a literal is one string (~6x cheaper at 10 ids).
COMPLETE = (
    "UPDATE jobs SET status = 'succeeded', finished_at = now(), locked_until = NULL "
    "WHERE id = ANY(%s::bigint[])"
)


def connect(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def setup(url: str) -> None:
    with connect(url) as conn:
        for statement in SCHEMA.split(";"):
            conn.execute(statement)


def reset(url: str) -> None:
    with connect(url) as conn:
        conn.execute("TRUNCATE jobs")


def enqueue_single(url: str, n: int) -> float:
    """Bare INSERT ... RETURNING id, one per transaction."""
    with connect(url) as conn:
        start = time.perf_counter()
        for i in range(n):
            conn.execute(INSERT_ONE, ("noop", json.dumps({"n": i}))).fetchone()
        return time.perf_counter() - start


def enqueue_bulk(url: str, n: int, chunk: int) -> float:
    """INSERT ... SELECT FROM unnest(jsonb[]) RETURNING id, ``chunk`` rows per statement."""
    with connect(url) as conn:
        start = time.perf_counter()
        for first in range(0, n, chunk):
            payloads = [json.dumps({"n": i}) for i in range(first, min(n, first + chunk))]
            conn.execute(INSERT_UNNEST, (payloads,)).fetchall()
        return time.perf_counter() - start


def enqueue_copy(url: str, n: int, chunk: int) -> float:
    """COPY FROM STDIN, ``chunk`` rows per COPY (no ids come back)."""
    with connect(url) as conn:
        start = time.perf_counter()
        for first in range(0, n, chunk):
            with conn.cursor().copy("COPY jobs (task, payload) FROM STDIN") as copy:
                for i in range(first, min(n, first + chunk)):
                    copy.write_row(("noop", json.dumps({"n": i})))
        return time.perf_counter() - start


def preload(url: str, n: int) -> None:
    with connect(url) as conn:
        conn.execute(
            "INSERT INTO jobs (task, payload) "
            "SELECT 'noop', jsonb_build_object('n', i) FROM generate_series(1, %s) i",
            (n,),
        )
        conn.execute("VACUUM ANALYZE jobs")


def count_done(url: str) -> int:
    with connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM jobs WHERE status = 'succeeded'").fetchone()
    assert row is not None
    return int(row[0])


def _ids(rows: list[Any]) -> str:
    return "{" + ",".join([str(r[0]) for r in rows]) + "}"


def drain_child(signal_ready: Callable[[], None], url: str, batch: int) -> int:
    """One connection: claim ``batch``, complete them, until nothing is claimed."""
    done = 0
    with connect(url) as conn:
        conn.execute("SELECT 1")
        signal_ready()
        while True:
            rows = conn.execute(CLAIM, (batch,)).fetchall()
            if not rows:
                return done
            conn.execute(COMPLETE, (_ids(rows),))
            done += len(rows)


def latency_child(
    signal_ready: Callable[[], None], url: str, expected: int, timeout: float
) -> list[float]:
    """LISTEN; on each notification claim until empty; record enqueue-to-start per job."""
    latencies: list[float] = []
    deadline = time.monotonic() + timeout
    with connect(url) as listener, connect(url) as conn:
        listener.execute(f"LISTEN {CHANNEL}")
        signal_ready()
        while len(latencies) < expected and time.monotonic() < deadline:
            for _ in listener.notifies(timeout=0.5, stop_after=1):
                while True:
                    rows = conn.execute(CLAIM, (10,)).fetchall()
                    if not rows:
                        break
                    now = time.time()
                    latencies.extend(now - payload["t"] for _, payload in rows)
                    conn.execute(COMPLETE, (_ids(rows),))
    return latencies


def latency_produce(url: str, n: int, rate: float) -> None:
    from ..harness import paced

    with connect(url) as conn:
        paced(n, rate, lambda t: conn.execute(INSERT_NOTIFY, (json.dumps({"t": t}),)).fetchall())
