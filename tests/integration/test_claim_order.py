"""A claim hands its jobs back in the order it took them: by priority, then by when they
came due (run_at), then id, within what one tick made ready (claim_tickets, migration 0020).
The worker starts them in that order, so a batch is not reshuffled by the lease's UPDATE,
which returns its rows in no particular order (by primary key, as it reads them)."""

from __future__ import annotations

from typing import Any

import psycopg

import cronbase
from tests.conftest import claim_rows


def test_a_claim_returns_its_jobs_in_priority_then_due_order(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    # Ids ascending, run_at descending: the order the claim owes is the ids' reverse.
    ids = [
        db.execute(
            "INSERT INTO cronbase.jobs (task, queue, payload, priority, run_at)"
            " VALUES ('t', 'default', '{}', 5, now() - %s * interval '1 minute') RETURNING id",
            [minutes],
        ).fetchone()[0]  # type: ignore[index]
        for minutes in range(1, 9)
    ]
    urgent = db.execute(
        "INSERT INTO cronbase.jobs (task, queue, payload, priority, run_at)"
        " VALUES ('t', 'default', '{}', 1, now()) RETURNING id"
    ).fetchone()[0]  # type: ignore[index]
    claimed, _ = claim_rows(app, db, limit=9)
    assert [job.id for job in claimed] == [urgent, *reversed(ids)]
