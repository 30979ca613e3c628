"""Handing leased jobs back to the queue, the attempt not counted: a stopping worker's unfinished
jobs, and jobs leased to a worker by a claim whose reply was lost."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .claim import ClaimedJob

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from ..db.database import Database

logger = logging.getLogger("cronbase")


async def hand_back(
    pool: AsyncConnectionPool, db: Database, worker: str, jobs: Sequence[ClaimedJob], reason: str
) -> bool:
    """Queue ``jobs`` again now, attempt not counted; False when the database could not be
    told (their leases then run out)."""
    try:
        async with pool.connection() as conn:
            await conn.execute(
                db.queries.release_jobs,
                {
                    "ids": [j.id for j in jobs],
                    "tokens": [j.lease_token for j in jobs],
                    "worker": worker,
                    "channel": db.channel,
                    "reason": reason,
                },
            )
    except Exception as exc:  # the database may be what failed
        logger.warning(
            "could not hand back jobs %s (%s); they run again when their leases expire",
            ", ".join(str(j.id) for j in jobs),
            str(exc).strip(),
        )
        return False
    return True


async def release_orphans(
    pool: AsyncConnectionPool, db: Database, worker: str, held: Sequence[ClaimedJob]
) -> bool:
    """Hand back jobs leased to ``worker`` by a claim whose reply was lost (every job leased to
    it but ``held``); False when the database could not be asked (tried again later)."""
    try:
        async with pool.connection() as conn:
            cur = await conn.execute(
                db.queries.release_orphaned_jobs,
                {
                    "worker": worker,
                    "tokens": [job.lease_token for job in held],
                    "channel": db.channel,
                },
            )
            released = [row[0] for row in await cur.fetchall()]
    except Exception as exc:  # tried again after the next claim; the leases expire anyway
        logger.warning("could not look for jobs claimed by a lost reply: %s", exc)
        return False
    if released:
        logger.warning(
            "handed back jobs %s: claimed by a statement whose reply was lost (attempt not "
            "counted)",
            ", ".join(map(str, released)),
        )
    return True
