"""Retention: finished jobs (and their attempt history) are deleted once old enough.

Workers prune in small batches, one worker at a time (an advisory lock), so the jobs table and
its indexes stay small without a long transaction or a burst of WAL. ``cronbase prune`` does the
same by hand.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..durations import DurationLike, duration, optional_duration
from ..errors import InvalidValueError
from ..job import JobStatus
from .audited import Action, perform

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from ..db.database import Database

logger = logging.getLogger("cronbase")

PRUNE_BATCH = 1000
PRUNABLE = (JobStatus.SUCCEEDED, JobStatus.CANCELLED, JobStatus.DEAD)


@dataclass(frozen=True, init=False)
class Retention:
    """How long finished jobs are kept; None keeps them forever. Durations are timedeltas or
    seconds: ``Retention(succeeded=3600, dead=timedelta(days=90))``."""

    succeeded: timedelta | None
    cancelled: timedelta | None
    dead: timedelta | None
    # Emitted events (app.events.emit): a handler that starts waiting for one after it was
    # pruned waits for a new emission.
    events: timedelta | None
    interval: timedelta  # how often a worker looks

    def __init__(
        self,
        succeeded: DurationLike | None = timedelta(days=7),
        cancelled: DurationLike | None = timedelta(days=7),
        dead: DurationLike | None = timedelta(days=30),
        events: DurationLike | None = timedelta(days=30),
        interval: DurationLike = timedelta(minutes=5),
    ) -> None:
        # Frozen: set once, here, as timedeltas.
        for name, value in (
            ("succeeded", succeeded),
            ("cancelled", cancelled),
            ("dead", dead),
            ("events", events),
        ):
            object.__setattr__(self, name, optional_duration(f"Retention {name}", value))
        object.__setattr__(
            self, "interval", duration("Retention interval", interval, positive=True)
        )

    def rules(self) -> list[tuple[list[str], timedelta]]:
        kept = {
            JobStatus.SUCCEEDED: self.succeeded,
            JobStatus.CANCELLED: self.cancelled,
            JobStatus.DEAD: self.dead,
        }
        return [([s.value], age) for s, age in kept.items() if age is not None]


def check_statuses(statuses: list[str]) -> list[str]:
    allowed = [s.value for s in PRUNABLE]
    bad = [s for s in statuses if s not in allowed]
    if bad or not statuses:
        raise InvalidValueError(
            f"cannot prune jobs in status {', '.join(map(repr, bad)) or '(none given)'}; "
            f"prunable: {', '.join(allowed)}"
        )
    return statuses


def lock_key(schema: str) -> int:
    # A stable 63-bit key per schema, apart from the migration lock's.
    return zlib.crc32(f"cronbase-maintenance:{schema}".encode())


def prune(
    db: Database,
    older_than: timedelta,
    statuses: list[str],
    batch: int = PRUNE_BATCH,
    *,
    actor: str | None = None,
) -> int:
    """Delete finished jobs of ``statuses`` that ended more than ``older_than`` ago, in batches
    (each its own short transaction, so locks and WAL stay small); the last batch's transaction
    writes the audit row (``jobs.prune``) with the total."""
    check_statuses(statuses)
    if older_than < timedelta(0):
        raise InvalidValueError(f"older_than must not be negative, got {older_than}")
    params = {"statuses": statuses, "older_than": older_than, "limit": batch}
    removed = 0
    while True:
        row = db.fetch_one(db.queries.prune_jobs, params)
        n = row["deleted"] if row else 0
        removed += n
        if n < batch:
            break
    target = "jobs:" + ",".join(statuses)
    return perform(db, actor, "jobs.prune", target, _last_batch(db, params, removed))


def _last_batch(db: Database, params: dict[str, Any], removed: int) -> Action[int]:
    """One more batch (what finished since: nothing, mostly), then the total and its audit."""
    ((row,)) = yield db.queries.prune_jobs, params
    total = removed + int(row["deleted"])
    older = params["older_than"]
    return total, {"statuses": params["statuses"], "older_than": str(older), "removed": total}


def count_prunable(db: Database, older_than: timedelta, statuses: list[str]) -> dict[str, int]:
    """What :func:`prune` would delete, by status (nothing is deleted)."""
    check_statuses(statuses)
    params = {"statuses": statuses, "older_than": older_than}
    return {r["status"]: int(r["n"]) for r in db.fetch_all(db.queries.count_prunable, params)}


async def prune_once(pool: AsyncConnectionPool, db: Database, retention: Retention) -> int | None:
    """One worker's retention round; None when another worker holds the lock.

    Each batch is its own short transaction that takes the lock for itself, so two workers never
    prune at once, and a round through a transaction pooler needs no session state.
    """
    removed = 0
    key = lock_key(db.schema)
    for statuses, age in retention.rules():
        params = {"key": key, "statuses": statuses, "older_than": age, "limit": PRUNE_BATCH}
        n = await _prune_batches(pool, db.queries.prune_jobs_exclusive, params)
        if n is None:
            return None
        removed += n
    if retention.events is not None:
        params = {"key": key, "older_than": retention.events, "limit": PRUNE_BATCH}
        if await _prune_batches(pool, db.queries.prune_events_exclusive, params) is None:
            return None
    if removed:
        logger.info("retention: pruned %d finished jobs", removed)
    return removed


async def _prune_batches(
    pool: AsyncConnectionPool, query: bytes, params: dict[str, Any]
) -> int | None:
    """Batches of one retention statement until one deletes less than a batch; None when
    another worker holds the lock."""
    removed = 0
    while True:
        async with pool.connection() as conn:
            cur = await conn.execute(query, params)
            locked, n = await cur.fetchone() or (False, 0)
        if not locked:
            return None
        removed += int(n)
        if n < PRUNE_BATCH:
            return removed
        await asyncio.sleep(0)  # let the worker's own statements through


async def run_retention(pool: AsyncConnectionPool, db: Database, retention: Retention) -> None:
    """The worker's retention loop: a round every ``retention.interval`` until cancelled."""
    failing = False
    while True:
        try:
            await prune_once(pool, db, retention)
            failing = False
        except Exception as exc:  # the database may be away; the next round tries again
            if not failing:  # once per run of failures, not every round
                logger.warning("retention round failed (%s); retrying next round", exc)
            failing = True
        await asyncio.sleep(retention.interval.total_seconds())
