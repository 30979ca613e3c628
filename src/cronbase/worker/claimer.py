"""The claimer owns a worker's claiming: how many jobs it may take per queue, the plain claim
(which carries the completer's waiting successes), the fair claim of fair_key tasks (which
carries them too), the flow claim of limited jobs, the limited
queues it must leave to the flow claim, jobs claimed by a statement whose reply was lost, and
handing jobs back. The worker's loop asks it for jobs and runs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Collection, Mapping
from typing import TYPE_CHECKING, Any

from ..db.pool import has_news
from .claim import ClaimedJob, claim_jobs, claim_params, claimable_names, run_claim
from .fair_claim import FairPacing, fair_params, fair_statement, fair_tasks
from .flow_claim import FlowClaim, candidate_params, claim_flow_jobs, task_flows
from .outcomes import undecodable

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import AsyncConnectionPool

    from ..db.database import Database
    from ..task import Task
    from .completer import Completer

logger = logging.getLogger("cronbase")

# How soon a worker looks again when another worker held the lock of a scope it wanted.
FLOW_CONTENDED_RETRY = 0.05
# How soon a worker claims again when another claim was ticking (claim_jobs): that tick may have
# been before a job that came meanwhile, whose notification this claim has used up.
TICK_CONTENDED_RETRY = 0.01
# The claimer keeps a connection of its own between claims when the pool has at least this
# many: the others stay for the completer, the heartbeat, the reaper and the scheduler.
KEEP_CONNECTION_FROM = 3


class Claimer:
    """Claims jobs for one worker: ``await claim(running)`` leases what fits in its free slots."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        db: Database,
        worker_id: str,
        tasks: Mapping[str, Task[Any, Any]],
        completer: Completer,
        *,
        concurrency: int,
        queues: list[str] | None,
        queue_caps: dict[str, int] | None,
        refresh_every: float,
        recheck_fair_every: float,
    ) -> None:
        self._pool = pool
        self._db = db
        self._worker_id = worker_id
        self._completer = completer
        self._concurrency = concurrency
        self._queues = queues
        self._queue_caps = queue_caps
        self._task_names = claimable_names({n: t.defaults.version for n, t in tasks.items()})
        # Fair share: the fair claim runs first when this worker has fair_key tasks; the plain
        # claim is skipped (but for carrying successes) when it has nothing else.
        self._fair = fair_tasks(tasks)
        self._has_plain = len(self._fair) < len(tasks)
        # As the plain claim names them: a job deferred for version k >= 2 is `name@k`.
        self._fair_names = claimable_names(
            {n: t.defaults.version for n, t in tasks.items() if n in self._fair}
        )
        self._fair_pacing = FairPacing(has_plain=self._has_plain, every=recheck_fair_every)
        # Flow control: the limits this worker's tasks declare, the limited queues it serves
        # (looked up every ``refresh_every`` seconds), where its next flow claim starts its round
        # robin, and when to look again for jobs a limit held back (None: on usual wake-ups).
        self._flows = task_flows(tasks)
        self._limited_queues: frozenset[str] = frozenset()
        self._refresh_every = refresh_every
        self._refresh_at = 0.0
        self._flow_after: str | None = None
        self.retry_in: float | None = None
        # Set when a claim failed with its connection: it may have committed unseen.
        self.may_hold_orphans = False
        # The connection kept between claims (see _connection), and whether to keep one.
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._keep = db.pool_size >= KEEP_CONNECTION_FROM

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The connection a claim runs on: kept from one claim to the next, not taken from the
        pool and given back each time (the pool's check and bookkeeping cost a claim loop at
        concurrency 10 ~8% of its rate, bench/README.md). Given back when a statement on it
        fails (the pool then decides whether it is still good), when the server said something
        while it idled (a restart's goodbye), at every refresh (so the pool can retire it at
        its max_lifetime), and by :meth:`close`. A pool of fewer than KEEP_CONNECTION_FROM
        connections lends one per claim, as before."""
        conn = self._conn
        if conn is not None and has_news(conn):
            # Closed first, so the pool discards it and opens another (its check would find it
            # dead only on a later getconn, after a backoff).
            await conn.close()
            await self.close()
            conn = None
        if conn is None:
            if not self._keep:
                async with self._pool.connection() as conn:
                    yield conn
                return
            conn = self._conn = await self._pool.getconn()
        try:
            yield conn
        except BaseException:
            self._conn = None
            await self._pool.putconn(conn)
            raise

    async def close(self) -> None:
        """Give the kept connection back to the pool (a stopping worker, a refresh)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._pool.putconn(conn)

    async def claim(self, running: Collection[ClaimedJob]) -> list[ClaimedJob]:
        """Lease due jobs for the free slots (per queue with per-queue concurrency), writing
        the completer's waiting successes on the way; sorted as they should start."""
        self.retry_in = None
        loop = asyncio.get_running_loop()
        if loop.time() >= self._refresh_at:
            await self.close()
            await self._refresh()
            self._refresh_at = loop.time() + self._refresh_every
        if self._queue_caps is None:
            free = self._concurrency - len(running)
            jobs = await self._claim(free, self._queues) if free > 0 else []
        else:
            # A claim per queue with free slots (no prefetch beyond them: graphile-worker's
            # shared prefetch broke its per-queue limits, #621).
            busy = Counter(job.queue for job in running)
            jobs = []
            for queue, cap in self._queue_caps.items():
                if cap > busy[queue]:
                    jobs += await self._claim(cap - busy[queue], [queue])
        jobs.sort(key=lambda j: (j.priority, j.id))
        return jobs

    def _is_limited(self, job: ClaimedJob) -> bool:
        return job.task in self._flows or job.queue in self._limited_queues

    def fair_jobs_may_be_new(self) -> None:
        """A notification said jobs were deferred (or released) in a queue this worker serves:
        some may be fair, so the next claim looks for them (FairPacing)."""
        self._fair_pacing.notified()

    async def _claim(self, limit: int, queues: list[str] | None) -> list[ClaimedJob]:
        jobs: list[ClaimedJob] = []
        now = asyncio.get_running_loop().time()
        fair_rests = bool(self._fair) and self._fair_pacing.rests(_scope(queues), now)
        if self._fair and not fair_rests:
            jobs = await self._claim_fair(limit, queues)
            limit -= len(jobs)
            if not self._has_plain:
                return jobs + await self._claim_plain(0, queues)
        if self._flows or self._limited_queues:
            if any(
                o.outcome == "succeeded" and self._is_limited(o.job)
                for o in self._completer.pending_jobs
            ):
                # Write the successes first: the slots they held are free for the flow claim.
                await self._claim_plain(0, queues)
            flow = await self._claim_flow(limit, queues)
            jobs += flow
            limit -= len(flow)
        plain = await self._claim_plain(limit, queues)
        if fair_rests and len(plain) < limit:
            # Slots the other claims could not fill: fair jobs may have come due meanwhile.
            plain += await self._claim_fair(limit - len(plain), queues)
        return jobs + plain

    async def _claim_fair(self, limit: int, queues: list[str] | None) -> list[ClaimedJob]:
        """claim_fair_jobs (fair.sql): up to ``limit`` fair jobs, round robin across their keys,
        carrying the waiting successes."""
        if limit <= 0:
            return []
        pacing = self._fair_pacing
        scans = pacing.scans(asyncio.get_running_loop().time())
        news = pacing.notices
        with self._completer.carrying() as carried:
            params = fair_params(
                done=carried.jobs,
                limit=limit,
                worker=self._worker_id,
                tasks=self._fair_names,
                queues=queues,
                after=pacing.after,
            )
            async with self._connection() as conn:
                statement = fair_statement(self._db.queries, limit, queues, scan=scans)
                result = await run_claim(conn, statement, params, self._db.json_loads)
            carried.written = result.written_ids
        for bad in result.undecodable:
            self._completer.add(undecodable(bad))
        if result.held and not result.jobs:
            # Keys thought busy had no due job (now idle): the next keys may have some, so claim
            # again at once. Each such claim retires the keys it probed, so this ends. (It was
            # 50 ms: when many keys run out together, as a drain's do at its end, the worker
            # idled 50 ms per 20 keys, 2.5 s of a 6 s drain over 1,000 keys.)
            self.retry_in = 0.0
        now = asyncio.get_running_loop().time()
        more = pacing.claimed(
            _scope(queues), scanned=scans, limit=limit, result=result, now=now, notices=news
        )
        if more and not result.jobs:
            # Its window had no due job but did not reach the last key: the next windows may
            # (a burst worker would otherwise stop here, with fair jobs due further on).
            self.retry_in = 0.0
        return result.jobs

    async def _claim_plain(self, limit: int, queues: list[str] | None) -> list[ClaimedJob]:
        """claim_jobs: up to ``limit`` unlimited jobs, carrying the waiting successes."""
        with self._completer.carrying() as carried:
            params = claim_params(
                done=carried.jobs,
                limit=limit,
                worker=self._worker_id,
                queues=queues,
                tasks=self._task_names,
            )
            if limit <= 0 and not carried.outcomes:
                return []
            async with self._connection() as conn:
                result = await claim_jobs(conn, self._db.queries, params, self._db.json_loads)
            carried.written = result.written_ids
        for bad in result.undecodable:
            # Its own outcome, written like any other; its batch-mates run on.
            self._completer.add(undecodable(bad))
        if len(result.jobs) < limit and result.took is not None:
            # Slots left. The claim took as many tickets as it asked for, some of jobs no longer
            # waiting: its lanes may hold more, look again at once (tickets of other workers'
            # tasks are no progress: they come back). Or another claim held a lane it wanted,
            # or was ticking (and a job committed after that tick's snapshot waits for the next,
            # this claim's notification spent): look again soon.
            if result.took == limit and result.passed:
                self._retry(0.0)
            elif result.held or result.ticked is False:
                self._retry(TICK_CONTENDED_RETRY)
        return result.jobs

    def _retry(self, seconds: float) -> None:
        self.retry_in = seconds if self.retry_in is None else min(seconds, self.retry_in)

    async def _claim_flow(self, limit: int, queues: list[str] | None) -> list[ClaimedJob]:
        """claim_flow_jobs (flow.py): up to ``limit`` limited jobs that fit in their limits."""
        params = candidate_params(
            schema=self._db.schema,
            limit=limit,
            flows=self._flows,
            after=self._flow_after,
            tasks=self._task_names,
            queues=queues,
        )
        async with self._connection() as conn:
            flow: FlowClaim = await claim_flow_jobs(
                conn,
                self._db.queries,
                params,
                worker=self._worker_id,
                limit=limit,
                loads=self._db.json_loads,
            )
        for bad in flow.result.undecodable:
            self._completer.add(undecodable(bad))
        # The next claim's round robin starts after the last scope served (from the start
        # once none was).
        self._flow_after = flow.last_scope
        # Another worker was claiming in a scope this one wanted: its transaction is short, so
        # look again soon. A rate held a job back: look again when its window has room.
        retry_in = FLOW_CONTENDED_RETRY if flow.contended else flow.open_in
        if retry_in is not None:
            # Not `self.retry_in or ...`: the fair claim's 0 (claim again at once) must stand.
            self.retry_in = retry_in if self.retry_in is None else min(retry_in, self.retry_in)
        return flow.result.jobs

    async def _refresh(self) -> None:
        """Which queues are limited: their jobs are left to the flow claim. A limit an operator
        sets holds back the plain claim at once; this worker's flow claim takes the queue's
        jobs from the next refresh on."""
        q = self._db.queries
        async with self._connection() as conn:
            cur = await conn.execute(q.list_limited_queues)
            limited = {name for (name,) in await cur.fetchall()}
            if any(
                f.rate is not None and f.concurrency_key is not None for f in self._flows.values()
            ):
                await conn.execute(q.prune_flow_logs)
        if self._queues is not None:
            limited &= set(self._queues)
        self._limited_queues = frozenset(limited)

    async def release_orphans(self, held: list[ClaimedJob]) -> None:
        """Hand back jobs leased to this worker by a claim whose reply was lost (all running
        jobs leased to it but ``held``)."""
        try:
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    self._db.queries.release_orphaned_jobs,
                    {
                        "worker": self._worker_id,
                        "tokens": [job.lease_token for job in held],
                        "channel": self._db.channel,
                    },
                )
                released = [row[0] for row in await cur.fetchall()]
        except Exception as exc:  # tried again after the next claim; the leases expire anyway
            logger.warning("could not look for jobs claimed by a lost reply: %s", exc)
            return
        self.may_hold_orphans = False
        if released:
            logger.warning(
                "handed back jobs %s: claimed by a statement whose reply was lost (attempt not "
                "counted)",
                ", ".join(map(str, released)),
            )

    async def hand_back(self, jobs: list[ClaimedJob], reason: str) -> bool:
        """Queue ``jobs`` again now, attempt not counted (a stopping worker's unfinished jobs);
        False when the database could not be told (their leases then run out)."""
        try:
            async with self._pool.connection() as conn:
                await conn.execute(
                    self._db.queries.release_jobs,
                    {
                        "ids": [j.id for j in jobs],
                        "tokens": [j.lease_token for j in jobs],
                        "worker": self._worker_id,
                        "channel": self._db.channel,
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


def _scope(queues: list[str] | None) -> tuple[str, ...] | None:
    return tuple(queues) if queues else None
