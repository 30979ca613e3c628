"""cronbase's own claim and finish statements from psycopg, with no library around them.

Not a system anyone runs: it splits cronbase's distance from the raw ceiling into what its SQL
costs (wider rows, more indexes, one attempt-history row per job) and what its Python costs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg

import cronbase
from cronbase.worker.claim import claim_jobs_sync, claim_params

from .cronbase_subject import count_done, preload, reset, setup

NAME = "cronbase SQL, no library"


def claim(
    conn: psycopg.Connection[Any], q: Any, limit: int, worker: str, done: list[Any]
) -> tuple[list[Any], int, bool]:
    """The worker's claim_jobs: write the successes of ``done`` (claimed jobs) and lease up to
    ``limit`` jobs. Returns the claimed jobs, how many successes were written, and whether
    another claim held what this one wanted (the tick or a lane: an empty claim then does not
    mean that no job is due; the worker looks again 10 ms later, as this does)."""
    result = claim_jobs_sync(conn, q, claim_params(done=done, limit=limit, worker=worker))
    contended = bool(result.held) or result.ticked is False
    return result.jobs, len(result.written_ids), contended


def succeed(conn: psycopg.Connection[Any], q: Any, rows: list[Any], worker: str) -> None:
    """What the worker's completer sends when no claim carries the successes: claim_jobs with
    limit 0."""
    claim(conn, q, 0, worker, rows)  # a claim of none does not tick nor take a lane


__all__ = [
    "NAME",
    "claim",
    "count_done",
    "drain_child",
    "enqueue_bulk",
    "enqueue_single",
    "preload",
    "reset",
    "setup",
    "succeed",
]

_OPTIONS: dict[str, Any] = {
    "task": "noop",
    "queue": "default",
    "priority": 100,
    "run_at": None,
    "delay": timedelta(0),
    "max_attempts": 20,
    "lease": timedelta(minutes=1),
    "metadata": None,
    "flow_key": None,
    "task_version": None,
    "channel": "cronbase_jobs",
}


def enqueue_single(url: str, n: int) -> float:
    """cronbase's insert_job, one per transaction (it sends its NOTIFY)."""
    q = cronbase.App(database_url=url).queries
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.perf_counter()
        for i in range(n):
            conn.execute(q.insert_job, {**_OPTIONS, "payload": json.dumps({"n": i})}).fetchall()
        return time.perf_counter() - start


def enqueue_bulk(url: str, n: int, chunk: int) -> float:
    """cronbase's insert_jobs (unnest of a jsonb[]), ``chunk`` payloads per statement."""
    q = cronbase.App(database_url=url).queries
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.perf_counter()
        for first in range(0, n, chunk):
            payloads = [json.dumps({"n": i}) for i in range(first, min(n, first + chunk))]
            conn.execute(
                q.insert_jobs, {**_OPTIONS, "payloads": payloads, "flow_keys": None}
            ).fetchall()
        return time.perf_counter() - start


def drain_child(signal_ready: Callable[[], None], url: str, batch: int) -> int:
    """One connection: claim_jobs(limit=batch), each claim carrying the previous batch's
    successes as the worker's claims do, until none is due."""
    q = cronbase.App(database_url=url).queries
    done = 0
    with psycopg.connect(url, autocommit=True) as conn:
        signal_ready()
        rows: list[Any] = []
        while True:
            rows, written, contended = claim(conn, q, batch, "raw", rows)
            done += written
            if not rows and not contended:
                return done
            if not rows:
                time.sleep(0.01)  # the harness's cap bounds the whole drain
