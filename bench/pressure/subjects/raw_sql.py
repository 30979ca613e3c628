"""The raw-SQL ceiling's table under pressure: ``bench/subjects/raw.py``'s schema and its
claim and complete statements, driven by a minimal worker loop of our own (no library).

A worker process claims up to 10 due jobs (raw.py's CLAIM, which also counts the attempt),
runs them, marks the successes succeeded in one UPDATE (raw.py's COMPLETE) and puts a failed
first attempt back to 'queued' 1 s later. Nothing is deleted: finished jobs stay in ``jobs``,
as in the ceiling's table. Producers insert a call's jobs in one statement that also notifies;
an idle worker waits on LISTEN, and polls every POLL_SECONDS for scheduled and retried jobs
coming due (no notification marks that moment).
"""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg
from psycopg import sql

from ...subjects import raw
from ..mix import PRELOAD_PRODUCER
from ..producer import stop_on_sigterm
from ..reporter import HANDLER
from . import PythonSubject

BATCH = 10
POLL_SECONDS = 0.05
# raw.py's CLAIM with the attempt number returned: the first attempt is the one that fails.
CLAIM = raw.CLAIM.replace("RETURNING j.id, j.payload", "RETURNING j.id, j.payload, j.attempts")
if CLAIM == raw.CLAIM:
    raise RuntimeError(
        "bench/subjects/raw.py's CLAIM changed: update bench/pressure/subjects/raw_sql.py"
    )
# One statement per producer call: the jobs, due now or `delay` seconds ahead, and a wake-up.
INSERT = (
    "WITH j AS (INSERT INTO jobs (task, payload, run_at) "
    "SELECT 'pressure', p, now() + %s * interval '1 second' "
    "FROM unnest(%b::text[]::jsonb[]) AS p RETURNING 1) "
    "SELECT pg_notify(%s, '') FROM (SELECT FROM j LIMIT 1) AS any_job"
)
# The claim counted the attempt (attempts + 1); a retry only makes the job due again.
RETRY = (
    "UPDATE jobs SET status = 'queued', run_at = now() + interval '1 second', "
    "locked_until = NULL WHERE id = ANY(%s::bigint[])"
)


def _ids(ids: list[int]) -> str:
    """An array literal, as raw.py sends its ids (one string, not a list adapted per element)."""
    return "{" + ",".join(map(str, ids)) + "}"


def worker_main(out: Any, name: str, url: str) -> None:
    stopping = stop_on_sigterm()
    HANDLER.start(out)
    try:
        with raw.connect(url) as conn, raw.connect(url) as listener:
            listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(raw.CHANNEL)))
            out.put(("ready", name))
            while not stopping.is_set():
                rows = conn.execute(CLAIM, (BATCH,)).fetchall()
                if not rows:
                    for _ in listener.notifies(timeout=POLL_SECONDS, stop_after=1):
                        pass
                    continue
                done: list[int] = []
                again: list[int] = []
                for job_id, payload, attempts in rows:
                    (again if HANDLER.attempt(payload, attempts == 1) else done).append(job_id)
                if done:
                    conn.execute(raw.COMPLETE, (_ids(done),))
                if again:
                    conn.execute(RETRY, (_ids(again),))
    finally:
        HANDLER.close()


class Enqueuer:
    """A producer's handle (``subjects.Enqueuer``)."""

    def __init__(self, url: str) -> None:
        self.conn = raw.connect(url)

    def enqueue(self, payloads: list[dict[str, Any]], delay: float) -> None:
        self.conn.execute(
            INSERT, (delay, [json.dumps(p) for p in payloads], raw.CHANNEL)
        ).fetchall()

    def close(self) -> None:
        self.conn.close()


class _Prober:
    def __init__(self, url: str) -> None:
        self.conn = raw.connect(url)

    def claim(self) -> float:
        with self.conn.transaction(force_rollback=True):
            begin = time.perf_counter()
            self.conn.execute(CLAIM, (BATCH,)).fetchall()
            return time.perf_counter() - begin

    def close(self) -> None:
        self.conn.close()


class RawSubject(PythonSubject):
    worker_main = staticmethod(worker_main)
    prober_type = _Prober
    key = "raw"
    name = "raw SQL"
    schemas = ("public",)
    hot_tables = ("jobs",)
    setup_note = (
        f"a loop per process: claim {BATCH} (raw.py's CLAIM), UPDATE to succeeded (raw.py's "
        f"COMPLETE), no deletion; LISTEN + a {POLL_SECONDS * 1000:.0f} ms poll when idle; "
        "retry: back to 'queued' with run_at = now() + 1 s"
    )

    def setup(self, url: str) -> None:
        raw.setup(url)

    def preload(self, url: str, n: int) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO jobs (task, payload) SELECT 'pressure', jsonb_build_object("
                "'p', %s::int, 'n', i, 't', %s::float8, 'f', 0) FROM generate_series(0, %s - 1) i",
                (PRELOAD_PRODUCER, time.time(), n),
            )
            conn.execute("SELECT pg_notify(%s, '')", (raw.CHANNEL,))


SUBJECT = RawSubject()
