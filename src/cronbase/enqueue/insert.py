"""Enqueue: job options, pure builders (arguments -> statement + params) and thin shells.

Each insert has a sync and an async shell of a few lines over the same builder, as httpx splits
its clients. The caller's own connection, when given, is used as is: the job is written inside
the caller's transaction and exists only if that transaction commits.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import psycopg
from psycopg.rows import TupleRow, tuple_row

from ..checks import DEFAULT_MAX_PAYLOAD_BYTES, check_key, check_name
from ..db.connections import async_connection, sync_connection
from ..errors import CronbaseError
from ..flow import TaskFlow, fair_scope, render_key
from ..job import Payload
from ..payload.encode import JSONDumps
from ..payload.encode import (
    encode_payload as encode_payload,  # re-exported: callers know it as client's
)
from .graph import Graph, Node, graph_params, inserted_ids

if TYPE_CHECKING:
    from ..db.database import Database
    from ..db.queries import Queries

_INT4_MAX = 2**31 - 1  # max_attempts is an integer column
# The table's jobs_lease_range constraint: a claim adds the lease to now().
MAX_LEASE = timedelta(days=36500)

# How often a keyed insert is retried when the conflicting row was committed after this
# statement's snapshot, or finished between the conflict and the look-up.
_UNIQUE_TRIES = 5


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class JobOptions:
    """Everything about one job but its task and payload."""

    queue: str = "default"
    priority: int = 100
    max_attempts: int = 20
    lease: timedelta = timedelta(minutes=1)
    run_at: datetime | None = None
    delay: timedelta | None = None
    idempotency_key: str | None = None
    dedupe_key: str | None = None
    on_duplicate: Literal["ignore", "replace"] = "ignore"
    # The task's limits (flow.py) and this job's concurrency key, when configure gave one.
    flow: TaskFlow | None = None
    concurrency_key: str | None = None
    # The task's fair_key template (fair share between keys: db/sql/fair.sql); None: not fair.
    fair_key: str | None = None
    # One job per task, key (unique_key, a template over the payload) and window of unique_for.
    unique_for: timedelta | None = None
    unique_key: str | None = None
    # Existing jobs this one waits for (pending until they succeeded), and what their failure
    # does to it (graph.py).
    after: tuple[int, ...] = ()
    on_parent_failure: Literal["cancel", "run"] = "cancel"

    def check(self) -> None:
        """Refuse, naming the bad value, an option the database would refuse or misread."""
        check_name("queue", self.queue)
        if not _is_int(self.priority):
            raise CronbaseError(f"priority must be an integer, got {self.priority!r}")
        if not -32768 <= self.priority <= 32767:
            raise CronbaseError(f"priority must be within -32768..32767, got {self.priority}")
        if not _is_int(self.max_attempts) or not 1 <= self.max_attempts <= _INT4_MAX:
            raise CronbaseError(
                f"max_attempts must be an integer from 1 to {_INT4_MAX}, got {self.max_attempts!r}"
            )
        if not isinstance(self.lease, timedelta) or not timedelta(0) < self.lease <= MAX_LEASE:
            raise CronbaseError(
                f"lease must be a positive timedelta of at most 100 years, got {self.lease!r}"
            )
        if self.run_at is not None and self.delay is not None:
            raise CronbaseError(
                f"give run_at or delay, not both (run_at={self.run_at!r}, delay={self.delay!r})"
            )
        if self.run_at is not None:
            if not isinstance(self.run_at, datetime):
                raise CronbaseError(f"run_at must be a datetime, got {self.run_at!r}")
            if self.run_at.utcoffset() is None:
                raise CronbaseError(f"run_at must be timezone-aware, got naive {self.run_at!r}")
        if self.delay is not None and (
            not isinstance(self.delay, timedelta) or self.delay < timedelta(0)
        ):
            # A negative delay would put the job ahead of others due now: refuse it.
            raise CronbaseError(f"delay must be a timedelta of zero or more, got {self.delay!r}")
        for name, key in (
            ("idempotency_key", self.idempotency_key),
            ("dedupe_key", self.dedupe_key),
            ("concurrency_key", self.concurrency_key),
        ):
            if key is not None:
                check_key(name, key)
        if self.on_duplicate not in ("ignore", "replace"):
            raise CronbaseError(
                f"on_duplicate must be 'ignore' or 'replace', got {self.on_duplicate!r}"
            )
        if self.on_duplicate == "replace" and (
            self.dedupe_key is None or self.idempotency_key is not None
        ):
            raise CronbaseError("on_duplicate='replace' needs a dedupe_key and no idempotency_key")
        if self.after and self.has_keys:
            raise CronbaseError(
                f"after={list(self.after)} cannot be combined with idempotency_key, dedupe_key or "
                "unique_for: a job that waits for others is deferred as it is"
            )
        if self.on_duplicate == "replace" and self.unique_for is not None:
            raise CronbaseError(
                f"on_duplicate='replace' cannot be used with a unique_for task: the window's first "
                f"job stays (unique_for={self.unique_for})"
            )

    @property
    def has_keys(self) -> bool:
        return (
            self.idempotency_key is not None
            or self.dedupe_key is not None
            or self.unique_for is not None
        )

    @functools.cached_property
    def insert_params(self) -> dict[str, Any]:
        """The insert statements' parameters that come from the options, built once per options
        object (a Task reuses its defaults' one); callers copy it, never change it."""
        return {
            "queue": self.queue,
            "priority": self.priority,
            "run_at": self.run_at,
            "delay": self.delay or timedelta(0),
            "max_attempts": self.max_attempts,
            "lease": self.lease,
            "metadata": None,
            "flow_key": None,
            "unique_prefix": None,
            "unique_seconds": None,
        }

    @property
    def has_flow_key(self) -> bool:
        """Whether the task's jobs carry a flow_key: a limited or a fair task."""
        return self.flow is not None or self.fair_key is not None

    def flow_key(self, payload: Payload, task: str = "") -> str | None:
        """The job's claim scope (jobs.flow_key): its limit scope, or its fair key's scope;
        None for any other task (the plain claim takes its jobs)."""
        if self.fair_key is not None:
            key = render_key(task, self.fair_key, payload, "fair_key")
            return fair_scope(self.queue, key)
        flow = self.flow
        return None if flow is None else flow.scope(payload, self.concurrency_key)


def encode_metadata(metadata: dict[str, Any]) -> str:
    """jobs.metadata as JSON text (what integrations store: small, plain JSON)."""
    try:
        return json.dumps(metadata, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise CronbaseError(f"job metadata cannot be stored as JSON: {exc}") from None


def build_insert(
    q: Queries,
    task: str,
    opts: JobOptions,
    payload: Payload,
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    metadata: dict[str, Any] | None = None,
    dumps: JSONDumps | None = None,
) -> tuple[bytes, dict[str, Any]]:
    params = opts.insert_params.copy()
    params["task"] = task
    params["payload"] = encode_payload(task, payload, max_bytes, dumps)
    params["channel"] = q.channel
    if metadata is not None:
        params["metadata"] = encode_metadata(metadata)
    if opts.has_flow_key:
        params["flow_key"] = opts.flow_key(payload, task)
    if not opts.has_keys:
        return q.insert_job, params
    params["idempotency_key"] = opts.idempotency_key
    params["dedupe_key"] = opts.dedupe_key
    if opts.unique_for is not None:
        key = (
            ""
            if opts.unique_key is None
            else render_key(task, opts.unique_key, payload, "unique_key")
        )
        params["unique_prefix"] = f"{task}|{check_key('unique_key', key) if key else ''}|"
        params["unique_seconds"] = opts.unique_for.total_seconds()
    if opts.on_duplicate == "replace":
        return q.upsert_job_replace, params
    return q.insert_job_unique, params


def build_insert_many(
    q: Queries,
    task: str,
    opts: JobOptions,
    payloads: Sequence[Payload],
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    metadata: dict[str, Any] | None = None,
    dumps: JSONDumps | None = None,
) -> tuple[bytes, dict[str, Any]]:
    if opts.unique_for is not None:
        raise CronbaseError(
            f"task {task!r} is unique_for {opts.unique_for}: defer its jobs one by one (each "
            "defer returns the window's job when there is one), not with defer_many"
        )
    if opts.has_keys:
        raise CronbaseError(
            "defer_many takes no idempotency_key or dedupe_key (one key cannot fit many jobs); "
            "defer keyed jobs one by one"
        )
    params = opts.insert_params.copy()
    params["task"] = task
    params["payloads"] = [encode_payload(task, p, max_bytes, dumps) for p in payloads]
    params["flow_keys"] = [opts.flow_key(p, task) for p in payloads] if opts.has_flow_key else None
    params["channel"] = q.channel
    if metadata is not None:
        params["metadata"] = encode_metadata(metadata)
    return q.insert_jobs, params


def _keyed_miss(task: str, opts: JobOptions) -> CronbaseError:
    return CronbaseError(
        f"could not insert or find the job for task {task!r} with idempotency_key="
        f"{opts.idempotency_key!r} dedupe_key={opts.dedupe_key!r} (concurrent changes)"
    )


def _sync_conn(connection: object) -> psycopg.Connection[Any]:
    if isinstance(connection, psycopg.Connection):
        return connection
    # A SQLAlchemy Session or Connection, or a mistake: connections.py tells which.
    return sync_connection(connection)


async def _async_conn(connection: object) -> psycopg.AsyncConnection[Any]:
    if isinstance(connection, psycopg.AsyncConnection):
        return connection
    # A SQLAlchemy AsyncSession or AsyncConnection, or a mistake: connections.py tells which.
    return await async_connection(connection)


def _run_sync(
    conn: psycopg.Connection[Any], query: bytes, params: dict[str, Any]
) -> list[TupleRow]:
    # The caller's connection may have any row factory (dict_row is common): ask for tuples.
    with conn.cursor(row_factory=tuple_row) as cur:
        return cur.execute(query, params).fetchall()


async def _run_async(
    conn: psycopg.AsyncConnection[Any], query: bytes, params: dict[str, Any]
) -> list[TupleRow]:
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall()


def defer_one_sync(
    db: Database,
    task: str,
    opts: JobOptions,
    payload: Payload,
    connection: object | None,
    metadata: dict[str, Any] | None = None,
) -> int:
    caller = None if connection is None else _sync_conn(connection)
    if opts.after:
        return defer_graph_sync(db, after_graph(task, opts, [payload], metadata), caller)[0]
    query, params = build_insert(
        db.queries, task, opts, payload, db.max_payload_bytes, metadata, db.json_dumps
    )
    for _ in range(_UNIQUE_TRIES):
        rows = _run_sync(caller, query, params) if caller is not None else db.rows(query, params)
        if rows:
            return int(rows[0][0])
    raise _keyed_miss(task, opts)


async def defer_one_async(
    db: Database,
    task: str,
    opts: JobOptions,
    payload: Payload,
    connection: object | None,
    metadata: dict[str, Any] | None = None,
) -> int:
    caller = None if connection is None else await _async_conn(connection)
    if opts.after:
        graph = after_graph(task, opts, [payload], metadata)
        return (await defer_graph_async(db, graph, caller))[0]
    query, params = build_insert(
        db.queries, task, opts, payload, db.max_payload_bytes, metadata, db.json_dumps
    )
    for _ in range(_UNIQUE_TRIES):
        if caller is not None:
            rows = await _run_async(caller, query, params)
        else:
            rows = await db.rows_async(query, params)
        if rows:
            return int(rows[0][0])
    raise _keyed_miss(task, opts)


def defer_many_sync(
    db: Database,
    task: str,
    opts: JobOptions,
    payloads: Sequence[Payload],
    connection: object | None,
    metadata: dict[str, Any] | None = None,
) -> list[int]:
    caller = None if connection is None else _sync_conn(connection)
    if not payloads:
        return []
    if opts.after:
        return defer_graph_sync(db, after_graph(task, opts, payloads, metadata), caller)
    query, params = build_insert_many(
        db.queries, task, opts, payloads, db.max_payload_bytes, metadata, db.json_dumps
    )
    rows = _run_sync(caller, query, params) if caller is not None else db.rows(query, params)
    return [int(r[0]) for r in rows]


async def defer_many_async(
    db: Database,
    task: str,
    opts: JobOptions,
    payloads: Sequence[Payload],
    connection: object | None,
    metadata: dict[str, Any] | None = None,
) -> list[int]:
    caller = None if connection is None else await _async_conn(connection)
    if not payloads:
        return []
    if opts.after:
        return await defer_graph_async(db, after_graph(task, opts, payloads, metadata), caller)
    query, params = build_insert_many(
        db.queries, task, opts, payloads, db.max_payload_bytes, metadata, db.json_dumps
    )
    if caller is not None:
        rows = await _run_async(caller, query, params)
    else:
        rows = await db.rows_async(query, params)
    return [int(r[0]) for r in rows]


def after_graph(
    task: str, opts: JobOptions, payloads: Sequence[Payload], metadata: dict[str, Any] | None
) -> Graph:
    """Jobs of one task that wait for existing jobs (``configure(after=...)``)."""
    graph = Graph()
    stored = None if metadata is None else encode_metadata(metadata)
    for payload in payloads:
        graph.wait_for(graph.add(Node(task, opts, payload, metadata=stored)), opts.after)
    return graph


def defer_graph_sync(
    db: Database, graph: Graph, caller: psycopg.Connection[Any] | None
) -> list[int]:
    """Insert a graph of jobs in one statement (the caller's transaction when given); the
    nodes' ids in node order."""
    params = graph_params(db.queries, graph, db.max_payload_bytes, db.json_dumps)
    query = db.queries.insert_graph
    rows = _run_sync(caller, query, params) if caller is not None else db.rows(query, params)
    return inserted_ids(rows)


async def defer_graph_async(
    db: Database, graph: Graph, caller: psycopg.AsyncConnection[Any] | None
) -> list[int]:
    params = graph_params(db.queries, graph, db.max_payload_bytes, db.json_dumps)
    query = db.queries.insert_graph
    if caller is not None:
        rows = await _run_async(caller, query, params)
    else:
        rows = await db.rows_async(query, params)
    return inserted_ids(rows)
