"""Enqueue: job options, pure builders (arguments -> statement + params) and thin shells.

Each insert has a sync and an async shell of a few lines over the same builder, as httpx splits
its clients. The caller's own connection, when given, is used as is: the job is written inside
the caller's transaction and exists only if that transaction commits.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import TupleRow, tuple_row

from ..checks import DEFAULT_MAX_PAYLOAD_BYTES, check_key
from ..db.connections import async_connection, sync_connection
from ..errors import ConfigurationError, JobStateError, PayloadError
from ..flow import render_key
from ..job import Payload
from ..payload.encode import JSONDumps
from ..payload.encode import (
    encode_payload as encode_payload,  # re-exported: callers know it as client's
)
from ..payload.sealing import SealingKeys, sealed_payload
from .graph import Graph, Node, graph_params, inserted_ids, parents_missing
from .options import JobOptions

if TYPE_CHECKING:
    from ..db.database import Database
    from ..db.queries import Queries

# How often a keyed insert is retried when the conflicting row was committed after this
# statement's snapshot, or finished between the conflict and the look-up.
_UNIQUE_TRIES = 5


def encode_metadata(metadata: dict[str, Any]) -> str:
    """jobs.metadata as JSON text (what integrations store: small, plain JSON)."""
    try:
        return json.dumps(metadata, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"job metadata cannot be stored as JSON: {exc}") from None


def build_insert(
    q: Queries,
    task: str,
    opts: JobOptions,
    payload: Payload,
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    metadata: dict[str, Any] | None = None,
    dumps: JSONDumps | None = None,
    keys: SealingKeys | None = None,
) -> tuple[bytes, dict[str, Any]]:
    params = opts.insert_params.copy()
    params["task"] = task
    params["payload"] = encode_payload(task, payload, max_bytes, dumps)
    if opts.encrypt:
        params["payload"] = sealed_payload(params["payload"], task, keys)
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
    keys: SealingKeys | None = None,
) -> tuple[bytes, dict[str, Any]]:
    if opts.unique_for is not None:
        raise ConfigurationError(
            f"task {task!r} is unique_for {opts.unique_for}: defer its jobs one by one (each "
            "defer returns the window's job when there is one), not with defer_many"
        )
    if opts.has_keys:
        raise ConfigurationError(
            "defer_many takes no idempotency_key or dedupe_key (one key cannot fit many jobs); "
            "defer keyed jobs one by one"
        )
    params = opts.insert_params.copy()
    params["task"] = task
    params["payloads"] = [encode_payload(task, p, max_bytes, dumps) for p in payloads]
    if opts.encrypt:
        params["payloads"] = [sealed_payload(p, task, keys) for p in params["payloads"]]
    params["flow_keys"] = [opts.flow_key(p, task) for p in payloads] if opts.has_flow_key else None
    params["channel"] = q.channel
    if metadata is not None:
        params["metadata"] = encode_metadata(metadata)
    return q.insert_jobs, params


def _keyed_miss(task: str, opts: JobOptions) -> JobStateError:
    return JobStateError(
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


def _rows_sync(
    db: Database, caller: psycopg.Connection[Any] | None, query: bytes, params: dict[str, Any]
) -> list[TupleRow]:
    """The statement's rows, run on the caller's connection when given, else on the pool."""
    return _run_sync(caller, query, params) if caller is not None else db.rows(query, params)


async def _rows_async(
    db: Database, caller: psycopg.AsyncConnection[Any] | None, query: bytes, params: dict[str, Any]
) -> list[TupleRow]:
    if caller is not None:
        return await _run_async(caller, query, params)
    return await db.rows_async(query, params)


@dataclass(frozen=True, slots=True)
class Insert:
    """What one defer (``many=False``: one payload) or defer_many writes: jobs of one task with
    the same options."""

    task: str
    opts: JobOptions
    payloads: list[Payload]
    many: bool = False
    metadata: dict[str, Any] | None = None  # jobs.metadata of every job (defer hooks')

    def statement(self, db: Database) -> tuple[bytes, dict[str, Any]]:
        rest = (db.max_payload_bytes, self.metadata, db.json_dumps, db.sealing_keys)
        if self.many:
            return build_insert_many(db.queries, self.task, self.opts, self.payloads, *rest)
        return build_insert(db.queries, self.task, self.opts, self.payloads[0], *rest)

    def graph(self) -> Graph:
        """The jobs as a graph, each waiting for ``configure(after=...)``'s jobs."""
        return after_graph(self.task, self.opts, self.payloads, self.metadata)

    def ids(self, rows: list[TupleRow]) -> list[int] | None:
        """The new jobs' ids from the statement's rows; None when a keyed insert neither
        inserted nor found its job (the conflicting one is gone or not yet visible: try again)."""
        if self.many:
            return [int(r[0]) for r in rows]
        return [int(rows[0][0])] if rows else None


def defer_sync(db: Database, insert: Insert, connection: object | None) -> list[int]:
    """Write the jobs, in the caller's transaction when ``connection`` is given; their ids in
    payload order."""
    caller = None if connection is None else _sync_conn(connection)
    if not insert.payloads:
        return []
    if insert.opts.after:
        return defer_graph_sync(db, insert.graph(), caller)
    query, params = insert.statement(db)
    for _ in range(_UNIQUE_TRIES):
        ids = insert.ids(_rows_sync(db, caller, query, params))
        if ids is not None:
            return ids
    raise _keyed_miss(insert.task, insert.opts)


async def defer_async(db: Database, insert: Insert, connection: object | None) -> list[int]:
    caller = None if connection is None else await _async_conn(connection)
    if not insert.payloads:
        return []
    if insert.opts.after:
        return await defer_graph_async(db, insert.graph(), caller)
    query, params = insert.statement(db)
    for _ in range(_UNIQUE_TRIES):  # as in defer_sync
        ids = insert.ids(await _rows_async(db, caller, query, params))
        if ids is not None:
            return ids
    raise _keyed_miss(insert.task, insert.opts)


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
    params = graph_params(db.queries, graph, db.max_payload_bytes, db.json_dumps, db.sealing_keys)
    query = db.queries.insert_graph
    for _ in range(2):
        rows = _rows_sync(db, caller, query, params)
        if not parents_missing(rows):
            break
    return inserted_ids(rows)


async def defer_graph_async(
    db: Database, graph: Graph, caller: psycopg.AsyncConnection[Any] | None
) -> list[int]:
    params = graph_params(db.queries, graph, db.max_payload_bytes, db.json_dumps, db.sealing_keys)
    query = db.queries.insert_graph
    for _ in range(2):  # as in defer_graph_sync
        rows = await _rows_async(db, caller, query, params)
        if not parents_missing(rows):
            break
    return inserted_ids(rows)
