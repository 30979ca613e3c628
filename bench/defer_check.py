"""Micro-benchmark of what a defer costs in Python: the payload check alone, and defer /
defer_many against a real PostgreSQL (the embedded server in a temporary folder, or
CRONBASE_BENCH_DATABASE_URL), and what the worker's ``task.arguments`` costs per job, for a task without annotations and one with ``int``, ``date`` and
``UUID`` arguments.

    .venv/bin/python -m bench.defer_check

Per-call microseconds, the best of several timeit repeats (a shared machine: the best is the
least disturbed). Not part of ``make bench``, which needs a quiet machine.
"""

from __future__ import annotations

import json
import os
import tempfile
import timeit
import uuid
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import psycopg

import cronbase
from cronbase.db import embedded, migrate
from cronbase.payload import encode_payload

SCHEMA = "cronbase_bench"
DAY = date(2026, 3, 1)
ID = uuid.UUID("0b8c7e1e-4f7a-4c55-9d43-5a1f0e2b6c11")


def best(call: Callable[[], object], number: int, repeat: int = 7) -> float:
    """Microseconds per call, the best of ``repeat`` runs of ``number`` calls."""
    return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e6


def database() -> str:
    url = os.environ.get("CRONBASE_BENCH_DATABASE_URL")
    if url is None:
        url = embedded.start(Path(tempfile.mkdtemp(prefix="cronbase-bench-pg-")) / "pgdata")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        migrate.apply_migrations(conn, SCHEMA)
    return url


def main() -> None:
    app = cronbase.App(database_url=database(), schema=SCHEMA)

    @app.task
    def plain(n, d, u):  # type: ignore[no-untyped-def]
        """No annotations: the keys are checked, the values pass as they are."""

    @app.task
    def typed(n: int, d: date, u: uuid.UUID) -> None:
        """Annotated: each value is checked against its annotation."""

    @app.task
    def ints(invoice_id: int, customer_id: int) -> None:
        """JSON's own types only: the common handler."""

    cases: list[tuple[str, cronbase.Task[Any, Any], dict[str, Any]]] = [
        ("unannotated", plain, {"n": 1, "d": DAY, "u": ID}),
        ("int, int", ints, {"invoice_id": 812, "customer_id": 7}),
        ("int, date, UUID (objects)", typed, {"n": 1, "d": DAY, "u": ID}),
        ("int, date, UUID (JSON text)", typed, {"n": 1, "d": DAY.isoformat(), "u": str(ID)}),
    ]
    print(
        f"{'task':<30} {'check_payload':>14} {'arguments':>12} {'defer':>10} "
        f"{'defer_many 1,000':>18}"
    )
    for label, task, payload in cases:
        check = best(lambda t=task, p=payload: t.check_payload(p), 20_000)
        # What the worker does with the stored payload before the handler runs.
        stored = json.loads(encode_payload(task.name, payload))
        run = best(lambda t=task, p=stored: t.arguments(p), 20_000)
        one = best(lambda t=task, p=payload: t.defer(**p), 200, repeat=5)
        many_payloads = [payload] * 1000
        many = best(lambda t=task, p=many_payloads: t.defer_many(p), 3, repeat=5)
        print(
            f"{label:<30} {check:>11.2f} us {run:>9.2f} us {one:>7.0f} us "
            f"{many / 1000:>12.2f} us/job"
        )
    app.close()


if __name__ == "__main__":
    main()
