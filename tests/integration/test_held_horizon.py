"""A transaction that holds the xmin horizon (an idle session, pg_dump, a long report) must not
make claims slower: vacuum removes nothing while it lasts, so a claim that walked an index of
jobs over the rows claimed before it read more with every job done (issue 35: pickup p99 from
60 ms to 44 s in three minutes). Measured in buffers, which do not depend on the machine's
speed: what the claim statement reads after thousands of jobs went through under a held horizon,
against what it read before they did."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.worker.claim import ClaimedJob, claim_params, claim_statement
from tests.conftest import claim_rows

JOBS = 3000
BATCH = 100


@pytest.fixture
def holder(database_url: str, db: psycopg.Connection[Any]) -> Iterator[psycopg.Connection[Any]]:
    """A session idle in a transaction that has an xid: the horizon stays where it is."""
    with psycopg.connect(database_url) as conn:
        conn.execute("SELECT txid_current()")
        yield conn
        conn.rollback()


def claim_buffers(app: cronbase.App, db: psycopg.Connection[Any]) -> int:
    """The pages the claim of 10 jobs reads (EXPLAIN ANALYZE in a transaction rolled back)."""
    statement = claim_statement(app.queries, None, 10)
    params = claim_params(limit=10, worker="measure")
    with db.transaction(force_rollback=True):
        row = db.execute(b"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, params)
        found = row.fetchone()
    assert found is not None
    plan = found[0] if not isinstance(found[0], str) else json.loads(found[0])
    top = plan[0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


def run_through(app: cronbase.App, db: psycopg.Connection[Any], jobs: int) -> None:
    """Defer ``jobs`` jobs and claim them in batches, each success carried by the next claim."""
    work = app.tasks["work"]
    done: list[ClaimedJob] = []
    for first in range(0, jobs, BATCH):
        work.defer_many([{"n": n} for n in range(first, first + BATCH)])
        claimed, _ = claim_rows(app, db, BATCH, "through", done=done)
        assert len(claimed) == BATCH
        done = claimed
    claim_rows(app, db, 0, "through", done=done)


def test_a_held_horizon_leaves_the_claim_reading_as_little_as_before(
    app: cronbase.App, db: psycopg.Connection[Any], holder: psycopg.Connection[Any]
) -> None:
    @app.task
    def work(n: int) -> None: ...

    run_through(app, db, 2 * BATCH)  # the lanes, the ticks and the plans exist
    work.defer_many([{"n": n} for n in range(10)])
    before = claim_buffers(app, db)

    run_through(app, db, JOBS)
    # Nothing could be removed: the held transaction is older than every one of these jobs.
    dead = db.execute(
        "SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = 'cronbase' "
        "AND relname = 'jobs'"
    ).fetchone()
    assert holder.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    after = claim_buffers(app, db)

    # The old claim walked jobs_due_idx from its start: after 3,000 jobs it read some thousands
    # of pages more (every claimed row's entry, each to its heap page). A claim of tickets reads
    # the same few, however many jobs went before it.
    assert after <= 2 * before + 20, (before, after, dead)
    # And it still claims the due jobs.
    assert len(claim_rows(app, db, 10, "last")[0]) == 10
