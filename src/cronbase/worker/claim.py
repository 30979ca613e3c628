"""The claim statement's one owner: its parameters, the statement for a worker's queues, and its
rows decoded one job at a time. The worker, the completer, the tests and the bench all call it.

A row that cannot be decoded (a payload written by other SQL that Python's JSON cannot read)
comes back as that job's own :class:`Undecodable`, to be recorded dead with the reason; its
batch-mates run as usual. Payload text is decoded by ``loads``: the Database's ``json_loads``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..job import Payload

if TYPE_CHECKING:
    import psycopg

    from ..context import JobContext
    from ..db.queries import Queries

DEFAULT_LEASE = timedelta(minutes=1)


@dataclass(eq=False)
class ClaimedJob:
    """One leased attempt, as claim_jobs returned it; equal only to itself (the worker keys its
    running attempts by it)."""

    id: int
    task: str
    queue: str
    payload: Payload
    priority: int
    attempt: int
    max_attempts: int
    lease_token: uuid.UUID
    lease: timedelta
    # jobs.metadata: what integrations stored with the job (a trace context); None when nothing.
    metadata: dict[str, Any] | None = None
    # What the handler returned, as JSON text; None when it returned None (set by the executor).
    result: str | None = None
    context: JobContext = field(init=False)

    @property
    def completed(self) -> bool:
        """Finished by the handler's own transaction() (the context exists once it runs)."""
        context: JobContext | None = self.__dict__.get("context")
        return context is not None and context.completed


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A claimed job whose row cannot become a ClaimedJob; ``job`` carries an empty payload."""

    job: ClaimedJob
    error: BaseException


@dataclass(slots=True)
class ClaimResult:
    """What one claim statement did: jobs leased (decoded or not) and successes written."""

    jobs: list[ClaimedJob]
    undecodable: list[Undecodable]
    written_ids: list[int]


def claim_params(
    *,
    done: Sequence[ClaimedJob] = (),
    limit: int,
    worker: str,
    queues: Sequence[str] | None = None,
    tasks: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Parameters of claim_jobs: successes to write (``done``), up to ``limit`` jobs to lease
    from ``queues`` (None: all) whose task is one of ``tasks`` (None: any)."""
    # Results, only when some success returned one: a drain of handlers returning None sends a
    # NULL array (one test per job here, no per-job work in the statement).
    results = [j.result for j in done]
    return {
        "done_ids": [j.id for j in done],
        "done_tokens": [j.lease_token for j in done],
        "done_results": results if any(r is not None for r in results) else None,
        "limit": limit,
        "worker": worker,
        "queues": list(queues) if queues is not None else None,
        "tasks": list(tasks) if tasks is not None else None,
    }


def claim_statement(queries: Queries, queues: Sequence[str] | None) -> bytes:
    """claim_jobs, or claim_jobs_in_queues (its own index) for a worker of some queues."""
    return queries.claim_jobs_in_queues if queues else queries.claim_jobs


def _metadata(text: str) -> dict[str, Any] | None:
    """jobs.metadata as a dict; anything else other SQL wrote there is ignored (it is not the
    job's data, and a job must not die of a bad trace context)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


Loads = Callable[[str], Any]


def read_rows(rows: Sequence[tuple[Any, ...]], loads: Loads = json.loads) -> ClaimResult:
    """Decode claim_jobs' rows: claimed jobs, then one row whose id is NULL carrying the ids of
    the successes written. ``loads`` decodes each payload (App(json_loads=...))."""
    result = ClaimResult([], [], [])
    for row in rows:
        if row[0] is None:
            result.written_ids = row[-1] or []
            continue
        (job_id, task, queue, payload, priority, attempt, max_attempts, token, lease, meta, _) = row
        try:
            job = ClaimedJob(
                job_id,
                task,
                queue,
                loads(payload),
                priority,
                attempt,
                max_attempts,
                token,
                timedelta(seconds=lease),
                None if meta is None else _metadata(meta),
            )
        except Exception as exc:  # RecursionError, ValueError (digits), OverflowError (lease)
            bare = ClaimedJob(
                job_id, task, queue, {}, priority, attempt, max_attempts, token, DEFAULT_LEASE
            )
            result.undecodable.append(Undecodable(bare, exc))
            continue
        result.jobs.append(job)
    return result


async def claim_jobs(
    conn: psycopg.AsyncConnection[Any],
    queries: Queries,
    params: dict[str, Any],
    loads: Loads = json.loads,
) -> ClaimResult:
    """Run the claim on ``conn`` (params from :func:`claim_params`; ``loads``: the Database's
    ``json_loads``)."""
    cur = await conn.execute(claim_statement(queries, params["queues"]), params)
    return read_rows(await cur.fetchall(), loads)


def claim_jobs_sync(
    conn: psycopg.Connection[Any],
    queries: Queries,
    params: dict[str, Any],
    loads: Loads = json.loads,
) -> ClaimResult:
    """The sync twin of :func:`claim_jobs`, for tests and the bench."""
    cur = conn.execute(claim_statement(queries, params["queues"]), params)
    return read_rows(cur.fetchall(), loads)
