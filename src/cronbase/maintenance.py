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
from typing import TYPE_CHECKING

from .errors import CronbaseError
from .job import JobStatus

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from .app import App

logger = logging.getLogger("cronbase")

PRUNE_BATCH = 1000
PRUNABLE = (JobStatus.SUCCEEDED, JobStatus.CANCELLED, JobStatus.DEAD)


@dataclass(frozen=True)
class Retention:
    """How long finished jobs are kept; None keeps them forever."""

    succeeded: timedelta | None = timedelta(days=7)
    cancelled: timedelta | None = timedelta(days=7)
    dead: timedelta | None = timedelta(days=30)
    interval: timedelta = timedelta(minutes=5)  # how often a worker looks

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
        raise CronbaseError(
            f"cannot prune jobs in status {', '.join(map(repr, bad)) or '(none given)'}; "
            f"prunable: {', '.join(allowed)}"
        )
    return statuses


def lock_key(schema: str) -> int:
    # A stable 63-bit key per schema, apart from the migration lock's.
    return zlib.crc32(f"cronbase-maintenance:{schema}".encode())


def prune(app: App, older_than: timedelta, statuses: list[str], batch: int = PRUNE_BATCH) -> int:
    """Delete finished jobs of ``statuses`` that ended more than ``older_than`` ago."""
    check_statuses(statuses)
    if older_than < timedelta(0):
        raise CronbaseError(f"older_than must not be negative, got {older_than}")
    removed = 0
    params = {"statuses": statuses, "older_than": older_than, "limit": batch}
    with app.pool().connection() as conn:
        while True:
            n = conn.execute(app.queries.prune_jobs, params).rowcount
            removed += n
            if n < batch:
                return removed


async def prune_once(pool: AsyncConnectionPool, app: App, retention: Retention) -> int | None:
    """One worker's retention round; None when another worker holds the lock."""
    q = app.queries
    key = {"key": lock_key(app.schema)}
    removed = 0
    async with pool.connection() as conn:
        got = await (await conn.execute(q.try_lock_maintenance, key)).fetchone()
        if not got or not got[0]:
            return None
        try:
            for statuses, age in retention.rules():
                params = {"statuses": statuses, "older_than": age, "limit": PRUNE_BATCH}
                while True:
                    n = (await conn.execute(q.prune_jobs, params)).rowcount
                    removed += n
                    if n < PRUNE_BATCH:
                        break
                    await asyncio.sleep(0)  # let the worker's own statements through
        finally:
            await conn.execute(q.unlock_maintenance, key)
    if removed:
        logger.info("retention: pruned %d finished jobs", removed)
    return removed


async def run_retention(pool: AsyncConnectionPool, app: App, retention: Retention) -> None:
    """The worker's retention loop: a round every ``retention.interval`` until cancelled."""
    while True:
        try:
            await prune_once(pool, app, retention)
        except Exception as exc:  # the database may be away; the next round tries again
            logger.warning("retention round failed: %s", exc)
        await asyncio.sleep(retention.interval.total_seconds())
