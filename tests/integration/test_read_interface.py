"""The stable read interface (docs/guides/database.md, "Your own SQL"): ``jobs_all`` and ``job_attempts_all``
keep their columns, in order, across releases (one may be added at the end, none renamed or
dropped), and the guide's example queries run as printed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg

import cronbase
from tests.conftest import claim_rows

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "database.md"

JOBS_ALL = [
    "id",
    "task",
    "queue",
    "payload",
    "status",
    "priority",
    "run_at",
    "attempts",
    "max_attempts",
    "lease",
    "locked_by",
    "locked_until",
    "lease_token",
    "idempotency_key",
    "dedupe_key",
    "progress",
    "stage",
    "last_error",
    "error_type",
    "started_at",
    "created_at",
    "updated_at",
    "finished_at",
    "metadata",
    "flow_key",
    "result",
    "snoozes",
    "wait_notify",
    "unique_for_key",
    "parents_left",
    "has_dependents",
    "on_parent_failure",
    "receives",
    "workflow_id",
    "waiting_for",
    "task_version",
    "base_priority",
]
JOB_ATTEMPTS_ALL = [
    "id",
    "job_id",
    "attempt",
    "worker",
    "started_at",
    "finished_at",
    "outcome",
    "error",
    "error_type",
    "traceback",
]


def columns(db: psycopg.Connection[Any], view: str) -> list[str]:
    rows = db.execute(
        "SELECT column_name FROM information_schema.columns"
        " WHERE table_schema = 'cronbase' AND table_name = %s ORDER BY ordinal_position",
        [view],
    ).fetchall()
    return [name for (name,) in rows]


def section() -> str:
    text = GUIDE.read_text("utf-8")
    start = text.index("## Your own SQL: the stable read interface")
    return text[start : text.index("## Supported PostgreSQL versions", start)]


def test_the_views_keep_their_columns_and_the_guide_lists_them(
    db: psycopg.Connection[Any],
) -> None:
    assert columns(db, "jobs_all")[: len(JOBS_ALL)] == JOBS_ALL
    assert columns(db, "job_attempts_all")[: len(JOB_ATTEMPTS_ALL)] == JOB_ATTEMPTS_ALL
    # The engine's own column stays out of the interface.
    assert "ready_xid" not in columns(db, "jobs_all")
    listed = re.sub(r"\s+", " ", section())
    assert ", ".join(JOBS_ALL) in listed
    assert ", ".join(JOB_ATTEMPTS_ALL) in listed


def test_the_guide_queries_run_as_printed(app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    @app.task(queue="mail")
    def send(n: int) -> None: ...

    send.defer_many([{"n": n} for n in range(3)])
    claimed, _ = claim_rows(app, db, limit=1)
    assert len(claimed) == 1
    block = re.search(r"```sql\n(.*?)```", section(), re.S)
    assert block is not None
    statements = [s.strip() for s in block[1].split(";") if s.strip()]
    assert len(statements) == 2
    per_queue = db.execute(statements[0]).fetchall()
    assert [(queue, due, running) for queue, due, running, _ in per_queue] == [("mail", 2, 1)]
    _, written = claim_rows(app, db, limit=0, done=claimed)  # its success, as a worker writes it
    assert written == [claimed[0].id]
    assert db.execute(statements[1]).fetchall() == [(claimed[0].task, "succeeded", 1)]
