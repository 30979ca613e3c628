"""The claim's rows, read by name: what a claimed job is, the plain claim's parameters and
statement, and the decoding of the rows every claim statement returns (``claimed_columns``:
the ``lease_picked`` fragment in ``db/sql/jobs.sql``).

A row that cannot be decoded (a payload written by other SQL that Python's JSON cannot read, or
nested deeper than MAX_JSON_DEPTH, the rule payload/stored.py applies everywhere) comes back as
that job's own :class:`Undecodable`, to be recorded dead with the reason; its batch-mates run as
usual. Payload text is decoded by ``loads``: the Database's ``json_loads``.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from psycopg import sql

from ..db import arrays
from ..errors import PayloadError
from ..job import Payload
from ..payload.sealing import MARK_IN_JSON
from ..payload.stored import depth_fault, read_stored, too_deep

if TYPE_CHECKING:
    import psycopg

    from ..context import JobContext
    from ..db.queries import Queries

DEFAULT_LEASE = timedelta(minutes=1)

# What every claim statement returns per job, by column name (the lease_picked fragment).
CLAIMED_COLUMNS = (
    "id",
    "task",
    "queue",
    "payload",
    "priority",
    "attempts",
    "max_attempts",
    "lease_token",
    "lease",
    "metadata",
    "flow_key",
    "task_version",
)
# What a claim's summary row (its job columns NULL) may carry: the successes it wrote
# (claim_jobs), candidates held back and when a rate has room again (claim_flow_jobs), keys
# turned idle and where the next claim looks for keys (claim_fair_jobs).
SUMMARY_COLUMNS = ("written", "held", "open_in", "cursor", "ticked", "took", "passed")


@dataclass(eq=False)
class ClaimedJob:
    """One leased attempt, as a claim returned it; equal only to itself (the worker keys its
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
    # The limit scope a limited job counts in (flow.py); None for an unlimited job.
    flow_key: str | None = None
    # The version of its task the job was deferred for (jobs.task_version); None: version 1.
    task_version: int | None = None
    # What the handler returned, as JSON text; None when it returned None (set by the executor).
    result: str | None = None
    # What the handler returned, as it returned it (set by the executor when not None): what
    # inline mode records (InlineJob.result).
    value: object = None
    # The handler's view of its job, made by the executor when the attempt starts.
    context: JobContext | None = None

    @property
    def completed(self) -> bool:
        """Finished by the handler's own transaction() (the context exists once it runs)."""
        return self.context is not None and self.context.completed


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A claimed job whose row cannot become a ClaimedJob; ``job`` carries an empty payload."""

    job: ClaimedJob
    error: BaseException


@dataclass(slots=True)
class ClaimResult:
    """What one claim statement did: jobs leased (decoded or not), successes written, and for a
    flow claim the candidates its limits held back and when a rate has room again."""

    jobs: list[ClaimedJob]
    undecodable: list[Undecodable]
    written_ids: list[int]
    held: int = 0
    open_in: float | None = None
    cursor: str | None = None
    # claim_jobs: whether it ticked, the tickets it took, those but the ones of tasks it does
    # not know (None: another statement); `held` is also its lanes another claim held.
    ticked: bool | None = None
    took: int | None = None
    passed: int | None = None


def claimable_names(versions: Mapping[str, int]) -> list[str]:
    """What a worker registers and claims by, from its tasks' versions: each task's name (its
    unversioned and version-1 jobs) and ``name@k`` for k from 2 to its version (the jobs
    deferred for version k; claim_jobs names a job so). Sorted."""
    names = list(versions)
    names.extend(f"{name}@{k}" for name, version in versions.items() for k in range(2, version + 1))
    return sorted(names)


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
    return {
        **done_params(done),
        "limit": limit,
        "worker": worker,
        # None for no queues as for all: claim_jobs has no queue test, claim_statement picks it.
        "queues": arrays.names(queues) if queues else None,
        "tasks": arrays.names(tasks),
    }


def done_params(done: Sequence[ClaimedJob]) -> dict[str, Any]:
    """The successes a statement writes (the complete_jobs fragment)."""
    # Results, only when some success returned one: a drain of handlers returning None sends a
    # NULL array (one test per job here, no per-job work in the statement).
    results = [j.result for j in done]
    return {
        "done_ids": arrays.numbers([j.id for j in done]),
        "done_tokens": arrays.uuids([j.lease_token for j in done]),
        "done_results": results if any(r is not None for r in results) else None,
    }


@functools.lru_cache(maxsize=256)
def written_in(template: bytes, sizes: tuple[tuple[str, int], ...]) -> bytes:
    """A claim statement with its sizes (``%(limit)s`` ...) written in as numbers.

    With a size as a parameter PostgreSQL never settles on a generic plan for the prepared
    statement (a LIMIT it cannot see is costed as 10% of the rows: the generic plan looks many
    times dearer), so it plans the statement on every claim. With the numbers in the text the
    generic plan is chosen after five claims: claim_jobs carrying 10 successes and leasing 10
    jobs went 1.02 -> 0.69 ms, claim_fair_jobs 3.7 -> 1.1 ms (p10, on a loaded machine). One
    prepared statement per size a worker claims with: at most its concurrency + 1.
    """
    for name, value in sizes:
        template = template.replace(f"%({name})s".encode(), sql.Literal(value).as_bytes(None))
    return template


def claim_statement(queries: Queries, queues: str | Sequence[str] | None, limit: int) -> bytes:
    """claim_jobs, for a claim of ``limit`` jobs (written in: :func:`written_in`); its queues
    are a parameter (claim_tickets reads them)."""
    return written_in(queries.claim_jobs, (("limit", limit),))


def _metadata(text: str) -> dict[str, Any] | None:
    """jobs.metadata as a dict; anything else other SQL wrote there (undecodable included) is
    ignored (it is not the job's data, and a job must not die of a bad trace context)."""
    value = read_stored(text)
    return value if isinstance(value, dict) else None


Loads = Callable[[str], Any]
# A decoded payload holding sealed parts, and its job's task -> the payload opened
# (Database.open_payload; payload/sealing.py): EncryptionError when it cannot be.
Opener = Callable[[Any, str], Any]


def _payload(text: str, loads: Loads, opener: Opener | None, task: str) -> Any:
    """A claimed payload, by the depth rule first: ``loads`` may recurse per level (json.loads
    does), and a payload deeper than the rule is one no defer could have written. ~0.2 us a job
    (depth_fault's two counts), of a claim's ~70. An encrypted task's is opened (``opener``),
    found by the marker in its text: a scan at C speed, not a walk of the decoded value."""
    at = depth_fault(text)
    if at is not None:
        raise PayloadError(f"the payload is {too_deep(at)}, the most cronbase reads")
    value = loads(text)
    if opener is not None and MARK_IN_JSON in text:
        return opener(value, task)
    return value


@functools.cache
def _getters(names: tuple[str, ...]) -> tuple[itemgetter[Any], int, dict[str, int]]:
    """For a statement's column names: a getter of CLAIMED_COLUMNS in their order, where the id
    is, and where each summary column is (built once per statement shape)."""
    missing = [c for c in CLAIMED_COLUMNS if c not in names]
    if missing:
        raise RuntimeError(f"a claim statement returns no {', '.join(missing)} column")
    index = {name: i for i, name in enumerate(names)}
    job_columns = itemgetter(*(index[c] for c in CLAIMED_COLUMNS))
    return job_columns, index["id"], {c: index[c] for c in SUMMARY_COLUMNS if c in index}


# Column names by (statement, number of columns): a statement's text fixes its columns.
_NAMES: dict[tuple[bytes, int], tuple[str, ...]] = {}


def column_names(
    cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any], statement: bytes
) -> tuple[str, ...]:
    """The column names of ``statement``'s rows, read from ``cursor`` the first time only:
    psycopg builds a Column object per column on every read of ``description`` (~4% of a
    worker's samples in a drain at concurrency 10). Keyed by the text and the width,
    so a statement whose text changed (a migration, another schema) is read afresh; the
    statements are few (claim_statement's sizes are bounded by the concurrency)."""
    result = cursor.pgresult
    key = (statement, result.nfields if result is not None else 0)
    names = _NAMES.get(key)
    if names is None:
        names = _NAMES[key] = tuple(column.name for column in cursor.description or ())
    return names


def read_rows(
    rows: Sequence[tuple[Any, ...]],
    names: tuple[str, ...],
    loads: Loads = json.loads,
    opener: Opener | None = None,
) -> ClaimResult:
    """Decode a claim's rows, by the column ``names`` of its statement: the claimed jobs, and
    the one summary row (its id NULL). ``loads`` decodes each payload (App(json_loads=...)),
    ``opener`` opens an encrypted task's."""
    job_columns, at_id, summary = _getters(names)
    result = ClaimResult([], [], [])
    for row in rows:
        if row[at_id] is None:
            if "written" in summary:
                result.written_ids = row[summary["written"]] or []
            if "held" in summary:
                result.held = row[summary["held"]] or 0
            if "open_in" in summary:
                result.open_in = row[summary["open_in"]]
            if "cursor" in summary:
                result.cursor = row[summary["cursor"]]
            if "ticked" in summary:
                result.ticked = row[summary["ticked"]]
                result.took = row[summary["took"]]
                result.passed = row[summary["passed"]]
            continue
        (
            job_id,
            task,
            queue,
            payload,
            priority,
            attempt,
            max_attempts,
            token,
            lease,
            meta,
            key,
            version,
        ) = job_columns(row)
        try:
            job = ClaimedJob(
                job_id,
                task,
                queue,
                _payload(payload, loads, opener, task),
                priority,
                attempt,
                max_attempts,
                token,
                timedelta(seconds=lease),
                None if meta is None else _metadata(meta),
                key,
                version,
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
    opener: Opener | None = None,
) -> ClaimResult:
    """Run the claim on ``conn`` (params from :func:`claim_params`; ``loads``: the Database's
    ``json_loads``; ``opener``: its open_payload)."""
    statement = claim_statement(queries, params["queues"], params["limit"])
    return await run_claim(conn, statement, params, loads, opener)


def claim_jobs_sync(
    conn: psycopg.Connection[Any],
    queries: Queries,
    params: dict[str, Any],
    loads: Loads = json.loads,
    opener: Opener | None = None,
) -> ClaimResult:
    """The sync twin of :func:`claim_jobs`, for tests and the bench."""
    statement = claim_statement(queries, params["queues"], params["limit"])
    return run_claim_sync(conn, statement, params, loads, opener)


async def run_claim(
    conn: psycopg.AsyncConnection[Any],
    statement: bytes,
    params: dict[str, Any],
    loads: Loads,
    opener: Opener | None = None,
) -> ClaimResult:
    """Run one claim statement (claim_jobs, claim_fair_jobs) and read its rows."""
    cur = await conn.execute(statement, params)
    return read_rows(await cur.fetchall(), column_names(cur, statement), loads, opener)


def run_claim_sync(
    conn: psycopg.Connection[Any],
    statement: bytes,
    params: dict[str, Any],
    loads: Loads,
    opener: Opener | None = None,
) -> ClaimResult:
    """The sync twin of :func:`run_claim`."""
    cur = conn.execute(statement, params)
    return read_rows(cur.fetchall(), column_names(cur, statement), loads, opener)
