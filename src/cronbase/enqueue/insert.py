"""Enqueue: job options, pure builders (arguments -> statement + params) and thin shells.

Each insert has a sync and an async shell of a few lines over the same builder, as httpx splits
its clients. The caller's own connection, when given, is used as is: the job is written inside
the caller's transaction and exists only if that transaction commits.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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
) -> tuple[bytes, dict[str, Any]]:
    params = opts.insert_params.copy()
    params["task"] = task
    params["payload"] = encode_payload(task, payload, max_bytes, dumps)
    params["channel"] = q.channel
    if metadata is not None:
        params["metadata"] = encode_metadata(metadata)
    if opts.flow is not None:
        params["flow_key"] = opts.flow_key(payload)
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
    params["flow_keys"] = None if opts.flow is None else [opts.flow_key(p) for p in payloads]
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
    for _ in range(2):
        rows = _run_sync(caller, query, params) if caller is not None else db.rows(query, params)
        if not parents_missing(rows):
            break
    return inserted_ids(rows)


async def defer_graph_async(
    db: Database, graph: Graph, caller: psycopg.AsyncConnection[Any] | None
) -> list[int]:
    params = graph_params(db.queries, graph, db.max_payload_bytes, db.json_dumps)
    query = db.queries.insert_graph
    for _ in range(2):  # as in defer_graph_sync
        if caller is not None:
            rows = await _run_async(caller, query, params)
        else:
            rows = await db.rows_async(query, params)
        if not parents_missing(rows):
            break
    return inserted_ids(rows)
