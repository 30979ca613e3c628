"""Bounds with reasons: what a worker command asks for (processes, jobs at once, connections)
weighed against the machine and the server before anything starts. Too much is refused with the
arithmetic that shows why; ``--force`` runs it anyway.

The limits are about cost, not correctness: a process beyond two per core only adds connections
and memory (one process runs on one core; more jobs at once is ``--concurrency``), and a worker
that would pass ``max_connections`` fails to connect half-way through its start, leaving the
server without connections for anyone else.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg

from ..errors import DatabaseURLError

if TYPE_CHECKING:
    from ..db.database import Database

logger = logging.getLogger("cronbase")

# Processes per core beyond which a supervisor is refused.
PROCESSES_PER_CORE = 2
# Jobs at once per process beyond which a worker is refused: one claim leases up to this many
# jobs and each lease renewal rewrites them all; past it, more processes share the work better.
MOST_CONCURRENCY = 10_000
# Connections one worker process may hold: its pool, the listener, and one for the start-up
# checks and the scheduler's sync statements; and the supervisor's own (its metrics' reads).
PER_PROCESS_BEYOND_POOL = 2
SUPERVISOR_CONNECTIONS = 1


@dataclass(frozen=True)
class ConnectionRoom:
    """The server's connection slots as a worker command sees them at its start."""

    max_connections: int
    reserved: int
    in_use: int

    @property
    def free(self) -> int:
        return self.max_connections - self.reserved - self.in_use


def read_connection_room(db: Database) -> ConnectionRoom | None:
    """The server's slots now; None when it cannot tell: behind a transaction pooler (the
    pooler, not the server, bounds the connections then), or the database unreachable (the
    worker waits for it, and says so)."""
    if db.pooler == "transaction":
        return None
    try:
        # A connection of its own, not the pool: one attempt, and the worker's own start says
        # it when the database is away.
        with db.connect(application_name="cronbase-bounds") as conn:
            row = conn.execute(db.queries.connection_room).fetchone()
    except (psycopg.Error, DatabaseURLError) as exc:
        logger.debug("connection room unknown: %s", exc)
        return None
    if row is None:
        return None
    return ConnectionRoom(*row)


def refusals(
    *,
    processes: int,
    supervised: bool,
    concurrency: int,
    cores: int,
    pool_size: int,
    room: ConnectionRoom | None,
) -> list[str]:
    """Why the command should not start, each a sentence with its arithmetic (empty: fine)."""
    found = []
    if supervised and processes > PROCESSES_PER_CORE * cores:
        found.append(
            f"--processes {processes:,}: each worker process runs on one core, and this "
            f"process may use {cores}; more than {PROCESSES_PER_CORE * cores} "
            f"({PROCESSES_PER_CORE} per core) only add connections and memory. For more jobs "
            f"at once raise --concurrency"
        )
    if concurrency > MOST_CONCURRENCY:
        found.append(
            f"--concurrency {concurrency:,}: a claim leases up to that many jobs at once and "
            f"each lease renewal rewrites them all; above {MOST_CONCURRENCY:,} per process run "
            f"more processes"
        )
    if room is not None:
        per_process = pool_size + PER_PROCESS_BEYOND_POOL
        needed = processes * per_process + (SUPERVISOR_CONNECTIONS if supervised else 0)
        if needed > room.free:
            supervisor = f" + {SUPERVISOR_CONNECTIONS} (supervisor)" if supervised else ""
            found.append(
                f"{processes:,} worker process{'es' if processes > 1 else ''} need up to "
                f"{processes:,} x ({pool_size} pool + {PER_PROCESS_BEYOND_POOL}){supervisor} = "
                f"{needed:,} connections; the server has {room.free:,} free (max_connections "
                f"{room.max_connections:,} - {room.reserved} reserved - {room.in_use:,} in use). "
                f"Lower --processes or the App's pool_size, raise max_connections, or put a "
                f"pooler in between"
            )
    return found
