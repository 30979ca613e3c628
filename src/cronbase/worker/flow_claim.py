"""The claim of limited jobs (``db/sql/flow.sql`` says why it is race-free): its two statements
in one transaction, its parameters, and what the worker needs to know about its tasks' limits.

A worker runs it only when it has a limited task or some queue is limited; otherwise its claim
is the plain one, unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..db import arrays
from .claim import ClaimResult, Loads, Opener, column_names, read_rows
from .claim_kind import Ask, ClaimKind, Scope, Taken, Turn

if TYPE_CHECKING:
    import psycopg

    from ..db.database import Database
    from ..db.queries import Queries
    from ..flow import TaskFlow
    from ..task import Task
    from .outcomes import Outcome

# How many candidates a claim looks at per free slot: some are turned away (their scope filled
# up, or another worker holds its lock), and the rest should still fill the slots.
SCAN_FACTOR = 2
# How soon a worker looks again when another worker held the lock of a scope it wanted.
FLOW_CONTENDED_RETRY = 0.05


@dataclass(slots=True)
class FlowResult:
    """What one flow claim did."""

    result: ClaimResult = field(default_factory=lambda: ClaimResult([], [], []))
    # The greatest scope claimed in: where the next claim's round robin starts.
    last_scope: str | None = None
    # Candidates found but not claimed: their scopes were full, rate-limited, or being claimed
    # in by another worker (``contended``).
    held: int = 0
    contended: bool = False
    # Seconds until a rate that held a job back has room again; None when no rate did.
    open_in: float | None = None


def task_flows(tasks: Mapping[str, Task[Any, Any]]) -> dict[str, TaskFlow]:
    """The limits each task declares (tasks without any are left out)."""
    return {name: t.defaults.flow for name, t in tasks.items() if t.defaults.flow is not None}


def register_params(tasks: Mapping[str, Task[Any, Any]]) -> dict[str, Any]:
    """register_task_limits' parameters: the rows of the limited tasks, and the scopes of the
    others (whose limits, if an earlier deploy declared some, are removed)."""
    flows = task_flows(tasks)
    rows = [flow.limits_row() for flow in flows.values()]
    columns = (
        "max_running",
        "rate_n",
        "rate_period",
        "key_max_running",
        "key_rate_n",
        "key_rate_period",
    )
    params: dict[str, Any] = {"scopes": [r["scope"] for r in rows]}
    for column in columns:
        params[column] = [r[column] for r in rows]
    params["unlimited"] = [f"task:{name}" for name in tasks if name not in flows]
    return params


def per_scope(flows: Mapping[str, TaskFlow], free: int) -> int:
    """How many candidates to take from one scope: the largest limit a scope of these tasks can
    have (a rate or a queue limit alone: all free slots)."""
    most = 1
    for flow in flows.values():
        limit = flow.key_concurrency if flow.concurrency_key is not None else None
        if limit is None and flow.rate is None:
            limit = flow.global_concurrency
        most = max(most, free if limit is None else limit)
    return min(most, free)


def candidate_params(
    *,
    schema: str,
    limit: int,
    flows: Mapping[str, TaskFlow],
    after: str | None,
    tasks: Sequence[str] | None,
    queues: Sequence[str] | None,
) -> dict[str, Any]:
    return {
        "after": after or "",
        "per_scope": per_scope(flows, limit),
        "scan": limit * SCAN_FACTOR,
        "tasks": arrays.names(tasks),
        "queues": arrays.names(queues),
        # Advisory lock keys are per database: the schema keeps two cronbase schemas apart.
        "lock_space": f"cronbase:{schema}:",
    }


async def claim_flow_jobs(
    conn: psycopg.AsyncConnection[Any],
    queries: Queries,
    params: dict[str, Any],
    *,
    worker: str,
    limit: int,
    loads: Loads = json.loads,
    opener: Opener | None = None,
) -> FlowResult:
    """Lease up to ``limit`` limited jobs that fit in their limits, in one transaction: the
    candidates and their scopes' locks, then the claim on a snapshot taken after the locks."""
    async with conn.transaction():
        cur = await conn.execute(queries.claim_flow_candidates, params)
        row = await cur.fetchone()
        assert row is not None
        ids, locked, needed, _ = row
        if not ids:
            return FlowResult()
        contended = len(locked or ()) < needed
        if not locked:
            return FlowResult(held=len(ids), contended=contended)
        cur = await conn.execute(queries.claim_flow_jobs, _claim_params(ids, locked, limit, worker))
        names = column_names(cur, queries.claim_flow_jobs)
        result = read_rows(await cur.fetchall(), names, loads, opener)
    return _summed(result, contended)


def claim_flow_jobs_sync(
    conn: psycopg.Connection[Any],
    queries: Queries,
    params: dict[str, Any],
    *,
    worker: str,
    limit: int,
    loads: Loads = json.loads,
    opener: Opener | None = None,
) -> FlowResult:
    """The sync twin of :func:`claim_flow_jobs`, for tests and the bench."""
    with conn.transaction():
        row = conn.execute(queries.claim_flow_candidates, params).fetchone()
        assert row is not None
        ids, locked, needed, _ = row
        if not ids:
            return FlowResult()
        contended = len(locked or ()) < needed
        if not locked:
            return FlowResult(held=len(ids), contended=contended)
        cur = conn.execute(queries.claim_flow_jobs, _claim_params(ids, locked, limit, worker))
        names = column_names(cur, queries.claim_flow_jobs)
        result = read_rows(cur.fetchall(), names, loads, opener)
    return _summed(result, contended)


def _claim_params(ids: list[int], locked: list[str], limit: int, worker: str) -> dict[str, Any]:
    return {"ids": ids, "locked": locked, "limit": limit, "worker": worker}


def _summed(result: ClaimResult, contended: bool) -> FlowResult:
    scopes = [job.flow_key for job in result.jobs if job.flow_key is not None]
    return FlowResult(
        result=result,
        last_scope=max(scopes) if scopes else None,
        held=result.held,
        contended=contended,
        open_in=result.open_in,
    )


class FlowKind(ClaimKind):
    """Limited jobs (of its tasks' limits, or in a queue an operator limited) that fit in their
    limits, round robin across their scopes. Not run by a worker whose tasks are all fair."""

    def __init__(
        self,
        db: Database,
        worker_id: str,
        tasks: Mapping[str, Task[Any, Any]],
        names: list[str],
        *,
        serves: list[str] | None,
        fair_only: bool,
    ) -> None:
        self._db = db
        self._worker_id = worker_id
        self._flows = task_flows(tasks)
        self._names = names
        self._serves = serves
        self._fair_only = fair_only
        # The limited queues it serves (refresh), and where its next round robin starts.
        self._limited_queues: frozenset[str] = frozenset()
        self._after: str | None = None

    def turn(self, scope: Scope, now: float) -> Turn:
        if self._fair_only or not (self._flows or self._limited_queues):
            return Turn.SKIP
        return Turn.LEAD

    def wants_written(self, pending: Sequence[Outcome]) -> bool:
        # Successes of limited jobs first: the slots they held are free for this claim.
        return any(
            o.outcome == "succeeded"
            and (o.job.task in self._flows or o.job.queue in self._limited_queues)
            for o in pending
        )

    async def refresh(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Which queues are limited: their jobs are left to this claim. A limit an operator
        sets holds back the plain claim at once; this claim takes the queue's jobs from the
        next refresh on."""
        q = self._db.queries
        cur = await conn.execute(q.list_limited_queues)
        limited = {name for (name,) in await cur.fetchall()}
        if any(f.rate is not None and f.concurrency_key is not None for f in self._flows.values()):
            await conn.execute(q.prune_flow_logs)
        if self._serves is not None:
            limited &= set(self._serves)
        self._limited_queues = frozenset(limited)

    async def claim(self, conn: psycopg.AsyncConnection[Any], ask: Ask) -> Taken:
        limit, queues = ask.limit, ask.queues
        params = candidate_params(
            schema=self._db.schema,
            limit=limit,
            flows=self._flows,
            after=self._after,
            tasks=self._names,
            queues=queues,
        )
        flow = await claim_flow_jobs(
            conn,
            self._db.queries,
            params,
            worker=self._worker_id,
            limit=limit,
            loads=self._db.json_loads,
            opener=self._db.open_payload,
        )
        # The next claim's round robin starts after the last scope served (from the start
        # once none was).
        self._after = flow.last_scope
        # Another worker was claiming in a scope this one wanted: its transaction is short, so
        # look again soon. A rate held a job back: look again when its window has room.
        return Taken(flow.result, FLOW_CONTENDED_RETRY if flow.contended else flow.open_in)
