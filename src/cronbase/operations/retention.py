"""Retention: finished jobs (and their attempt history) leave once old enough.

Finished jobs live in a history partitioned by status and day (migration 0015): a worker's round
makes the days ahead, drops whole days past each status's age (no DELETE, no dead rows to vacuum)
and deletes row by row only what no whole day covers (a default partition's rows, keys of ended
windows), one worker at a time (an advisory lock), in short transactions. It also moves the rows
a previous release finished in place into the history, and deletes the rows of workers gone for
long (``cronbase workers prune`` does that by hand). ``cronbase prune`` does it by hand, to the
row.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..db.outage import first_failure
from ..db.pool import raise_if_cancelled
from ..durations import DurationLike, duration, optional_duration
from ..errors import InvalidValueError
from ..job import JobStatus
from .audited import Action, perform
from .stats import LIVE_WITHIN

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from ..db.database import Database

logger = logging.getLogger("cronbase")

PRUNE_BATCH = 1000
PRUNABLE = (JobStatus.SUCCEEDED, JobStatus.CANCELLED, JobStatus.DEAD)


@dataclass(frozen=True, init=False)
class Retention:
    """How long finished jobs (and emitted events, and the rows of gone workers) are kept; None
    keeps them forever. Durations are timedeltas or seconds:
    ``Retention(succeeded=3600, dead=timedelta(days=90), workers=timedelta(hours=6))``."""

    succeeded: timedelta | None
    cancelled: timedelta | None
    dead: timedelta | None
    # Emitted events (app.events.emit): a handler that starts waiting for one after it was
    # pruned waits for a new emission.
    events: timedelta | None
    # Rows of workers gone (killed, or their host down) for this long, holding no job: the
    # Workers page lists them folded until then.
    workers: timedelta | None
    interval: timedelta  # how often a worker looks

    def __init__(
        self,
        succeeded: DurationLike | None = timedelta(days=7),
        cancelled: DurationLike | None = timedelta(days=7),
        dead: DurationLike | None = timedelta(days=30),
        events: DurationLike | None = timedelta(days=30),
        interval: DurationLike = timedelta(minutes=5),
        workers: DurationLike | None = timedelta(days=1),
    ) -> None:
        # Frozen: set once, here, as timedeltas.
        for name, value in (
            ("succeeded", succeeded),
            ("cancelled", cancelled),
            ("dead", dead),
            ("events", events),
            ("workers", workers),
        ):
            object.__setattr__(self, name, optional_duration(f"Retention {name}", value))
        object.__setattr__(
            self, "interval", duration("Retention interval", interval, positive=True)
        )

    def ages(self) -> dict[str, timedelta | None]:
        """How long each final status is kept (None: forever)."""
        return {
            JobStatus.SUCCEEDED.value: self.succeeded,
            JobStatus.CANCELLED.value: self.cancelled,
            JobStatus.DEAD.value: self.dead,
        }

    def longest(self) -> timedelta | None:
        """How long the longest-kept jobs are kept (None: some forever): the attempts' age."""
        ages = list(self.ages().values())
        return None if None in ages else max(a for a in ages if a is not None)


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
    """Delete finished jobs of ``statuses`` that ended more than ``older_than`` ago: the whole
    days of the history before the cutoff dropped, then what is left row by row in batches (each
    its own short transaction, so locks and WAL stay small); the last batch's transaction writes
    the audit row (``jobs.prune``) with the total."""
    check_statuses(statuses)
    if older_than < timedelta(0):
        raise InvalidValueError(f"older_than must not be negative, got {older_than}")
    removed = 0
    for status in statuses:
        params = {"key": lock_key(db.schema), "wait": True, "status": status}
        row = db.fetch_one(db.queries.drop_history_days, {**params, "older_than": older_than})
        removed += sum(((row and row["dropped"]) or {}).values())
    params = {"statuses": statuses, "older_than": older_than, "limit": batch}
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
    """One worker's retention round: how many finished jobs left; None when another worker holds
    the lock. Each statement is its own short transaction that takes the lock for itself, so two
    workers never prune at once, and a round through a transaction pooler needs no session state.
    """
    upkeep = _Upkeep(pool, db, lock_key(db.schema))
    if await upkeep.run(db.queries.create_history_days, first=None, last=None) is None:
        return None
    await move_finished(upkeep)  # first: what it moves may be old enough to drop below
    removed = 0
    for status, age in retention.ages().items():
        if age is not None:
            dropped = await upkeep.run(
                db.queries.drop_history_days, status=status, older_than=age, wait=False
            )
            removed += sum((dropped or {}).values())
    removed += await upkeep.batches(db.queries.prune_defaults_exclusive, **retention.ages())
    oldest = retention.longest()
    if oldest is not None:  # attempts are kept as long as the longest-kept jobs
        await upkeep.run(db.queries.drop_history_days, status=None, older_than=oldest, wait=False)
        await upkeep.batches(db.queries.prune_attempts, older_than=oldest)
    await upkeep.batches(db.queries.prune_job_keys)
    if retention.events is not None:
        await upkeep.batches(db.queries.prune_events_exclusive, older_than=retention.events)
    if retention.workers is not None:
        await upkeep.batches(
            db.queries.prune_gone_workers, older_than=retention.workers, live_within=LIVE_WITHIN
        )
    if removed:
        logger.info("retention: pruned %d finished jobs", removed)
    return removed


async def move_finished(upkeep: _Upkeep) -> int:
    """Move what the history's live-table era left: finished rows a previous release wrote in
    place (or there since before migration 0015) and the legacy attempts, their days made first.
    Nothing to move is one index probe each."""
    queries = upkeep.db.queries
    async with upkeep.pool.connection() as conn:  # the worker's pool, as every upkeep statement
        first, last = await (await conn.execute(queries.history_span)).fetchone() or (None, None)
    # A day at a time: creating a partition locks the whole history, and a month of days in one
    # call held that lock 1.2 s (bench-upgrade); a day's is some 40 ms.
    day = first
    while day is not None and day <= last:
        await upkeep.run(queries.create_history_days, first=day, last=day)
        day += timedelta(days=1)
    moved = await upkeep.batches(queries.move_finished_jobs)
    moved_attempts = await upkeep.batches(queries.move_legacy_attempts)
    if moved or moved_attempts:
        logger.info(
            "retention: moved %d finished jobs and %d attempts into the history",
            moved,
            moved_attempts,
        )
    return moved


def move_history(db: Database) -> int:
    """``cronbase migrate``: move now what the history's live-table era left (workers' retention
    rounds do it in the background otherwise); how many jobs moved."""

    async def run() -> int:
        opened = await db.open_async_pool(name="cronbase-migrate", min_size=1, max_size=1)
        try:
            return await move_finished(_Upkeep(opened, db, lock_key(db.schema), wait=True))
        finally:
            await opened.close()

    return asyncio.run(run())


class _Upkeep:
    """Runs the retention statements, each with the maintenance lock (``key``) in its own
    transaction; a statement's first column says whether it had the lock, its second what it
    did."""

    def __init__(
        self, pool: AsyncConnectionPool, db: Database, key: int, *, wait: bool = False
    ) -> None:
        self.pool, self.db, self.key, self.wait = pool, db, key, wait

    async def run(self, query: bytes, **params: Any) -> Any:
        """One statement; what it did, or None when another worker holds the lock (``wait``:
        once more after a moment, for `cronbase migrate`, until it has it)."""
        while True:
            async with self.pool.connection() as conn:
                cur = await conn.execute(query, {"key": self.key, "limit": PRUNE_BATCH, **params})
                locked, did = await cur.fetchone() or (False, None)
            if locked or not self.wait:
                return did if locked else None
            await asyncio.sleep(0.2)

    async def batches(self, query: bytes, **params: Any) -> int:
        """A batch statement until one does less than a batch (or loses the lock): the total."""
        total = 0
        while True:
            n = await self.run(query, **params)
            total += int(n or 0)
            if n is None or n < PRUNE_BATCH:
                return total
            await asyncio.sleep(0)  # let the worker's own statements through


async def run_retention(pool: AsyncConnectionPool, db: Database, retention: Retention) -> None:
    """The worker's retention loop: a round every ``retention.interval`` until cancelled."""
    failing = False
    while True:
        try:
            await prune_once(pool, db, retention)
            failing = False
        except Exception as exc:  # the database may be away; the next round tries again
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # A cancel that arrived mid-statement can surface as psycopg's QueryCanceled
                # (an Exception): the worker is stopping, so this round is the last.
                raise asyncio.CancelledError from exc
            if not failing:  # once per run of failures, not every round
                first_failure("retention", exc, "retention round failed (%s); retrying next round")
            failing = True
        raise_if_cancelled()  # a stop that psycopg_pool absorbed mid-round
        await asyncio.sleep(retention.interval.total_seconds())
