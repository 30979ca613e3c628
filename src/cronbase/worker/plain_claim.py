"""The plain claim (``claim_jobs``: tickets, ``db/sql/jobs.sql``), which also writes the worker's
waiting successes: one statement, one commit. A worker whose tasks are all fair runs it only to
carry those successes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .claim import claim_jobs, claim_params
from .claim_kind import Ask, ClaimKind, Scope, Taken, Turn

if TYPE_CHECKING:
    import psycopg

    from ..db.database import Database

# How soon a worker claims again when another claim was ticking (claim_jobs): that tick may have
# been before a job that came meanwhile, whose notification this claim has used up.
TICK_CONTENDED_RETRY = 0.01


class PlainKind(ClaimKind):
    """Jobs of the worker's tasks, in ticket order."""

    carries = True

    def __init__(self, db: Database, worker_id: str, tasks: list[str], *, claims: bool) -> None:
        self._db = db
        self._worker_id = worker_id
        self._tasks = tasks
        self._claims = claims  # False: every task is fair, this kind only carries successes

    def turn(self, scope: Scope, now: float) -> Turn:
        return Turn.LEAD if self._claims else Turn.CARRY

    async def claim(self, conn: psycopg.AsyncConnection[Any], ask: Ask) -> Taken:
        limit, queues, done = ask.limit, ask.queues, ask.done
        params = claim_params(
            done=done, limit=limit, worker=self._worker_id, queues=queues, tasks=self._tasks
        )
        db = self._db
        result = await claim_jobs(conn, db.queries, params, db.json_loads, db.open_payload)
        retry_in = None
        if len(result.jobs) < limit and result.took is not None:
            # Slots left. The claim took as many tickets as it asked for, some of jobs no longer
            # waiting: its lanes may hold more, look again at once (tickets of other workers'
            # tasks are no progress: they come back). Or another claim held a lane it wanted,
            # or was ticking (and a job committed after that tick's snapshot waits for the next,
            # this claim's notification spent): look again soon.
            if result.took == limit and result.passed:
                retry_in = 0.0
            elif result.held or result.ticked is False:
                retry_in = TICK_CONTENDED_RETRY
        return Taken(result, retry_in)
