"""The fleet's minute-by-minute queue figures (``operations/queue_minutes.py``), written by one
worker a minute from its reaper round: whichever first marks the minute (``mark_queue_minute``)
rolls it up and prunes what is older than a week and a day. Each worker tries at most every
:data:`TRY_EVERY`; the others' tries find the minute marked, or its lock taken, and write
nothing. No statement on the claim or the completion path: the drain does not pay for it.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..db.database import JIT_OFF
from ..operations.queue_minutes import roll_up_params

if TYPE_CHECKING:
    import psycopg

    from ..db.database import Database

# Four tries a minute: a minute is rolled up within a quarter of a minute of its turn.
TRY_EVERY = 15.0


async def roll_up(db: Database, conn: psycopg.AsyncConnection[Any]) -> datetime | None:
    """Roll up the last minute ended ten seconds ago, unless another worker has or is doing it;
    the minute rolled up, or None."""
    params = roll_up_params(db)
    async with conn.transaction():
        # JIT off: the roll-up's aggregates over the live table pass jit_above_cost on a big
        # backlog, and compiling them costs more than running them (see the reaper's aging).
        await conn.execute(JIT_OFF)
        cur = await conn.execute(db.queries.mark_queue_minute, params)
        row = await cur.fetchone()
        if row is None:
            return None
        minute: datetime = row[0]
        await conn.execute(db.queries.roll_up_queue_minute, {**params, "minute": minute})
        await conn.execute(db.queries.prune_queue_minutes, params)
    return minute


class QueueRollup:
    """A worker's tries, at most every ``every`` seconds of its own monotonic clock (the minute
    itself is the database's)."""

    def __init__(self, db: Database, every: float = TRY_EVERY) -> None:
        self._db = db
        self._every = every
        self._next = 0.0

    async def maybe_roll_up(self, conn: psycopg.AsyncConnection[Any]) -> datetime | None:
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + self._every
        return await roll_up(self._db, conn)
