"""A graph of jobs to insert in one statement (``insert_graph``): nodes, the edges between them,
and the existing jobs some of them wait for. Pure: builds the statement's parameters and reads
its rows; client.py runs it, workflow.py (chains, groups) and ``configure(after=...)`` build it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..checks import DEFAULT_MAX_PAYLOAD_BYTES
from ..errors import WorkflowError
from ..payload.encode import JSONDumps, encode_payload
from ..payload.sealing import SealingKeys, sealed_payload

if TYPE_CHECKING:
    from psycopg.rows import TupleRow

    from ..db.queries import Queries
    from ..job import Payload
    from .options import JobOptions

ON_PARENT_FAILURE = ("cancel", "run")


def check_after(after: object, on_parent_failure: object) -> tuple[int, ...]:
    """The parents' ids, checked and without repeats; WorkflowError naming a bad value."""
    if on_parent_failure not in ON_PARENT_FAILURE:
        raise WorkflowError(
            f"on_parent_failure must be 'cancel' or 'run', got {on_parent_failure!r}"
        )
    if isinstance(after, int | str | bytes) or not isinstance(after, Sequence | set | frozenset):
        raise WorkflowError(f"after must be a list of job ids, got {after!r}")
    ids: dict[int, None] = {}
    for job_id in after:
        if not isinstance(job_id, int) or isinstance(job_id, bool) or job_id < 1:
            raise WorkflowError(f"after must list job ids (positive integers), got {job_id!r}")
        ids[job_id] = None
    return tuple(ids)


@dataclass
class Node:
    task: str
    options: JobOptions
    payload: Payload
    # The payload key its parents' results arrive under; None: they are not passed.
    receives: str | None = None
    metadata: str | None = None


@dataclass
class Graph:
    """Nodes (1-based ordinals, in insert order) and edges: (child, parent node, parent job id,
    position); exactly one of the parent fields is set."""

    nodes: list[Node] = field(default_factory=list)
    edges: list[tuple[int, int | None, int | None, int | None]] = field(default_factory=list)
    # Existing jobs the nodes wait for.
    after: tuple[int, ...] = ()
    # The node whose id is the workflow's (jobs.workflow_id of every node); None: no workflow.
    workflow: int | None = None

    def add(self, node: Node) -> int:
        self.nodes.append(node)
        return len(self.nodes)

    def payloads(self) -> list[Payload]:
        return [node.payload for node in self.nodes]

    def set_metadata(self, stored: str | None) -> None:
        """Every job stores this (the defer middleware's metadata, as JSON text)."""
        for node in self.nodes:
            node.metadata = stored

    def link(self, child: int, parent: int, position: int | None) -> None:
        self.edges.append((child, parent, None, position))

    def wait_for(self, child: int, parents: tuple[int, ...]) -> None:
        """``child`` waits for existing jobs."""
        if any(parent is not None for _, parent, _, _ in self.edges):
            # A node cancelled at insert (its existing parent already failed) would leave its
            # children in the graph pending for ever: insert_graph fires no trigger.
            raise WorkflowError(
                "a graph may wait for existing jobs only when its jobs are independent"
            )
        self.after = tuple(dict.fromkeys(self.after + parents))
        self.edges.extend((child, None, parent, None) for parent in parents)


def graph_params(
    q: Queries,
    graph: Graph,
    max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    dumps: JSONDumps | None = None,
    keys: SealingKeys | None = None,
) -> dict[str, Any]:
    nodes = graph.nodes
    edges = graph.edges
    children = {e[0] for e in edges}
    return {
        "after": list(graph.after),
        "tasks": [n.task for n in nodes],
        "queues": [n.options.queue for n in nodes],
        "payloads": [_payload(n, max_bytes, dumps, keys) for n in nodes],
        "priorities": [n.options.priority for n in nodes],
        "run_ats": [n.options.run_at for n in nodes],
        "delays": [n.options.delay or timedelta(0) for n in nodes],
        "max_attempts": [n.options.max_attempts for n in nodes],
        "leases": [n.options.lease for n in nodes],
        "metadata": [n.metadata for n in nodes],
        "flow_keys": [n.options.flow_key(n.payload, n.task) for n in nodes],
        "task_versions": [n.options.insert_params["task_version"] for n in nodes],
        "receives": [n.receives for n in nodes],
        "on_parent_failure": [
            n.options.on_parent_failure if i in children else None for i, n in enumerate(nodes, 1)
        ],
        "edge_child": [e[0] for e in edges],
        "edge_parent": [e[1] for e in edges],
        "edge_parent_id": [e[2] for e in edges],
        "edge_position": [e[3] for e in edges],
        "workflow": graph.workflow,
        "channel": q.channel,
    }


def _payload(node: Node, max_bytes: int, dumps: JSONDumps | None, keys: SealingKeys | None) -> str:
    text = encode_payload(node.task, node.payload, max_bytes, dumps)
    if not node.options.encrypt:
        return text
    return sealed_payload(text, node.task, keys, node.receives)


def parents_missing(rows: list[TupleRow]) -> bool:
    """Whether insert_graph found some existing parents in neither table: then nothing was
    inserted, and the caller asks once more (a parent moving to the history as the statement ran
    is in neither of its snapshot's tables; a fresh statement finds it)."""
    return bool(rows) and rows[-1][1] is None


def inserted_ids(rows: list[TupleRow]) -> list[int]:
    """The nodes' ids in node order; WorkflowError when existing parents were not found."""
    if rows and rows[-1][1] is None:
        missing = ", ".join(str(i) for i in rows[-1][3])
        raise WorkflowError(f"unknown parent job(s) in after=: {missing}; nothing was deferred")
    return [int(r[1]) for r in rows]
