"""The claim of fair jobs (``db/sql/fair.sql`` says how keys share the slots and why it is
race-free): its parameters and its one statement, which also carries the waiting successes.

A worker runs it only when it has a task with a ``fair_key``; otherwise its claim is the plain
one, unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..db import arrays
from .claim import ClaimedJob, done_params, written_in

if TYPE_CHECKING:
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


def sized_statement(template: bytes, limit: int) -> bytes:
    """claim_fair_jobs with its sizes (%(limit)s, %(probe)s, %(scan)s) written in as numbers
    (:func:`~cronbase.worker.claim.written_in`: so the prepared claim gets a generic plan)."""
    probe = max(limit, 1) * PROBE_FACTOR
    return written_in(template, (("limit", limit), ("probe", probe), ("scan", SCAN_KEYS)))


def fair_statement(queries: Queries, limit: int, queues: Sequence[str] | None) -> bytes:
    """claim_fair_jobs for a claim of ``limit`` jobs, its sizes written in, or
    claim_fair_jobs_in_queues for a worker of some ``queues`` (run it with
    :func:`~cronbase.worker.claim.run_claim`; params from :func:`fair_params`)."""
    template = queries.claim_fair_jobs_in_queues if queues else queries.claim_fair_jobs
    return sized_statement(template, limit)
