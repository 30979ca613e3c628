"""The claim of fair jobs (``db/sql/fair.sql`` says how keys share the slots and why it is
race-free): its parameters and its one statement, which also carries the waiting successes.

A worker runs it only when it has a task with a ``fair_key``; otherwise its claim is the plain
one, unchanged. :class:`FairPacing` decides how often it runs and how much it looks at.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..db import arrays
from .claim import ClaimedJob, ClaimResult, claimable_names, done_params, run_claim, written_in
from .claim_kind import Ask, ClaimKind, Scope, Taken, Turn

if TYPE_CHECKING:
    import psycopg

    from ..db.database import Database
    from ..db.queries import Queries
    from ..task import Task


# Keys of the jobs index a claim looks at (new keys, keys back from idle): a key is seen within
# (keys / SCAN_KEYS) claims. Busy keys a claim probes for a due job: twice its slots, so keys
# that went idle cannot crowd out the ones with work.
SCAN_KEYS = 32
PROBE_FACTOR = 2


def fair_tasks(tasks: Mapping[str, Task[Any, Any]]) -> frozenset[str]:
    """The tasks whose jobs the fair claim takes (those with a fair_key)."""
    return frozenset(name for name, t in tasks.items() if t.defaults.fair_key is not None)


def fair_params(
    *,
    done: Sequence[ClaimedJob] = (),
    limit: int,
    worker: str,
    tasks: Sequence[str] | None,
    queues: Sequence[str] | None,
    after: str | None = None,
) -> dict[str, Any]:
    """Parameters of claim_fair_jobs: successes to write (``done``), up to ``limit`` fair jobs of
    ``tasks`` (None: any) in ``queues`` (None: all) to lease; ``after``: where the last claim's
    look at the jobs index ended (its ``cursor``)."""
    return {
        **done_params(done),
        "limit": limit,
        "after": after or "",
        "worker": worker,
        "tasks": arrays.names(tasks),
        "queues": arrays.names(queues),
    }


def sized_statement(template: bytes, limit: int, *, scan: bool = True) -> bytes:
    """claim_fair_jobs with its sizes (%(limit)s, %(probe)s, %(scan)s) written in as numbers
    (:func:`~cronbase.worker.claim.written_in`: so the prepared claim gets a generic plan);
    without ``scan``, its look at the jobs index is one key, not SCAN_KEYS (its own prepared
    statement)."""
    probe = max(limit, 1) * PROBE_FACTOR
    sizes = (("limit", limit), ("probe", probe), ("scan", SCAN_KEYS if scan else 0))
    return written_in(template, sizes)


def fair_statement(
    queries: Queries, limit: int, queues: Sequence[str] | None, *, scan: bool = True
) -> bytes:
    """claim_fair_jobs for a claim of ``limit`` jobs, its sizes written in, or
    claim_fair_jobs_in_queues for a worker of some ``queues`` (run it with
    :func:`~cronbase.worker.claim.run_claim`; params from :func:`fair_params`); ``scan``: see
    :class:`FairPacing`."""
    template = queries.claim_fair_jobs_in_queues if queues else queries.claim_fair_jobs
    return sized_statement(template, limit, scan=scan)


class FairPacing:
    """When a worker's fair claim runs, and when it looks at the jobs index for keys it does not
    hold busy. Each costs a claim more than its own work: the look (the window, SCAN_KEYS keys
    of jobs_flow_due_idx after a cursor) was ~40% of a fair claim among 1,000 busy keys, and a
    fair claim that finds nothing is a second round trip and commit for a worker with plain
    tasks too (bench/README.md, "Fairness").

    - **The window** is how a key new or back from idle is seen. A claim looks while a pass
      over the keys is under way (its cursor handed from claim to claim), and a pass starts at
      the worker's start, at a notification (jobs deferred in its queues), a poll interval
      (``every``) after the last pass ended, and after a claim the busy keys could not fill.
      Between passes a claim serves the busy keys: a new key waits for the next pass, which a
      defer's notification starts at once; a key coming due by time (a delay, a retry) waits
      up to a poll interval, as a key a claim marked idle beside a defer it could not see yet.
    - **Resting**, for a worker with plain tasks too: a fair claim that looked from the first
      key to the last in one window and found no due job, and no busy key, lets the next claims
      leave the fair claim out (for the same queues) until a notification or a poll interval;
      the claimer also runs it when the other claims leave a slot free.
    """

    def __init__(self, *, has_plain: bool, every: float) -> None:
        self._has_plain = has_plain
        self._every = every
        self.after: str | None = None  # where the pass under way goes on (None: its start)
        self._in_pass = True
        self._pass_ended_at = -math.inf
        self._none_at: dict[Scope, float] = {}
        # Notifications so far, and how many there were when the pass under way began: one
        # that comes while a claim is in flight or a pass is under way (behind its cursor)
        # must not be answered by that claim or pass.
        self.notices = 0
        self._pass_began_at_notice = 0

    def notified(self) -> None:
        """Jobs were deferred (or released) in a queue the worker serves, or the listener
        reconnected (notifications may have been missed): some may be fair."""
        self.notices += 1
        self._none_at.clear()
        self._in_pass = True

    def rests(self, scope: Scope, now: float) -> bool:
        """Whether a claim for ``scope`` (its queues; None: all) may leave the fair claim out."""
        if not self._has_plain:
            return False
        at = self._none_at.get(scope)
        return at is not None and now - at < self._every

    def scans(self, now: float) -> bool:
        """Whether the next fair claim looks at the window."""
        return self._in_pass or now - self._pass_ended_at >= self._every

    def claimed(
        self,
        scope: Scope,
        *,
        scanned: bool,
        limit: int,
        result: ClaimResult,
        now: float,
        notices: int,
    ) -> bool:
        """Note a fair claim of up to ``limit`` jobs, with the window or not, begun when
        ``notices`` notifications had come; whether its window stopped short of the last key
        (the pass goes on from there)."""
        news = self.notices != notices  # a notification came while it was in flight
        whole = False
        if scanned:
            if self.after is None:
                self._pass_began_at_notice = notices
            whole = self.after is None and result.cursor is None
            self.after = result.cursor
            # A pass that ended goes round again when a notification came since it began: a
            # key deferred then may sort before the cursor's last place.
            self._in_pass = result.cursor is not None or self.notices != self._pass_began_at_notice
            if result.cursor is None:
                self._pass_ended_at = now
        if len(result.jobs) < limit or news:
            self._in_pass = True  # the busy keys could not fill it: look for others
        if whole and not result.jobs and not result.held and not news:
            self._none_at[scope] = now
        else:
            self._none_at.pop(scope, None)
        return scanned and result.cursor is not None


class FairKind(ClaimKind):
    """Fair jobs (tasks with a fair_key), round robin across their keys, paced by FairPacing;
    its statement writes the waiting successes too."""

    carries = True

    def __init__(
        self, db: Database, worker_id: str, tasks: Mapping[str, Task[Any, Any]], *, every: float
    ) -> None:
        fair = fair_tasks(tasks)
        self._db = db
        self._worker_id = worker_id
        # As the plain claim names them: a job deferred for version k >= 2 is `name@k`.
        self._names = claimable_names(
            {n: t.defaults.version for n, t in tasks.items() if n in fair}
        )
        self.pacing = FairPacing(has_plain=len(fair) < len(tasks), every=every)

    def turn(self, scope: Scope, now: float) -> Turn:
        # Resting: only the slots the other claims could not fill (fair jobs may have come due).
        return Turn.FILL if self.pacing.rests(scope, now) else Turn.LEAD

    def notified(self) -> None:
        self.pacing.notified()

    async def claim(self, conn: psycopg.AsyncConnection[Any], ask: Ask) -> Taken:
        limit, queues, done = ask.limit, ask.queues, ask.done
        pacing = self.pacing
        loop = asyncio.get_running_loop()
        scans = pacing.scans(loop.time())
        news = pacing.notices
        params = fair_params(
            done=done,
            limit=limit,
            worker=self._worker_id,
            tasks=self._names,
            queues=queues,
            after=pacing.after,
        )
        statement = fair_statement(self._db.queries, limit, queues, scan=scans)
        result = await run_claim(
            conn, statement, params, self._db.json_loads, self._db.open_payload
        )
        retry_in = None
        if result.held and not result.jobs:
            # Keys thought busy had no due job (now idle): the next keys may have some, so claim
            # again at once. Each such claim retires the keys it probed, so this ends. (It was
            # 50 ms: when many keys run out together, as a drain's do at its end, the worker
            # idled 50 ms per 20 keys, 2.5 s of a 6 s drain over 1,000 keys.)
            retry_in = 0.0
        scope = tuple(queues) if queues else None
        more = pacing.claimed(
            scope, scanned=scans, limit=limit, result=result, now=loop.time(), notices=news
        )
        if more and not result.jobs:
            # Its window had no due job but did not reach the last key: the next windows may
            # (a burst worker would otherwise stop here, with fair jobs due further on).
            retry_in = 0.0
        return Taken(result, retry_in)
