"""One test's hosts: a network (``network.py``), PostgreSQL 15 on its ``db`` host with the
database ``hosts`` (migrated, with the tier's tables), worker processes of ``hosts_app`` on other
hosts, and the test's own view of the database through the server's Unix socket (which no cut
of the network reaches).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, LiteralString

import psycopg
import pytest

import cronbase
from tests.conftest import wait_for
from tests.e2e.harness import WorkerProcess, WorkerProcesses
from tests.hosts.hosts_app import SCHEDULE_KEY, TABLES, make_app
from tests.hosts.network import Host, Network
from tests.servers import PostgresCluster

DBNAME = "hosts"
# How the workers notice a silent peer: within ~3 s, where cronbase's defaults take ~30 s
# (db/pool.py, TCP_DEFAULTS), so that a cut of a few seconds (past a 3 s lease) is noticed,
# said, and recovered from at once when it heals. The URL is where a team tunes them too.
QUICK_TCP = "keepalives_idle=1&keepalives_interval=1&keepalives_count=2&tcp_user_timeout=3000"
# Lines of a worker's log shown when a test fails: its warnings and errors, then its last lines.
LOG_LINES = 40


class HostWorkers(WorkerProcesses):
    """WorkerProcesses whose logs, shown when a test fails, are cut to what matters."""

    def report(self, process: WorkerProcess) -> None:
        lines = process.log().splitlines()
        notable = [line for line in lines if " WARNING " in line or " ERROR " in line]
        print(f"---- worker {process.name} (exit {process.popen.returncode}), {process.log_path}")
        print("\n".join([*notable[-LOG_LINES:], "...", *lines[-5:]]))


class World:
    """The database host and its cluster, worker hosts added with :meth:`start_worker`."""

    def __init__(self, network: Network, cluster: PostgresCluster, folder: Path) -> None:
        self.network = network
        self.cluster = cluster
        self.folder = folder
        self.url = cluster.create_database(DBNAME)  # the Unix socket: the test's side
        # What the other hosts use: quick to notice a silent peer, or with cronbase's defaults.
        self.tcp_url = f"{cluster.tcp_url(DBNAME)}?{QUICK_TCP}"
        self.plain_tcp_url = cluster.tcp_url(DBNAME)
        migrator = cronbase.App(self.url)
        migrator.migrate()
        migrator.close()
        self.conn = psycopg.connect(self.url, autocommit=True)
        self.conn.execute(TABLES)
        self.app = make_app(self.url)
        self.workers = HostWorkers(self.tcp_url, folder, module="tests.hosts.hosts_app")
        self.on: dict[str, Host] = {}  # worker name -> its host

    # -- the test's view -------------------------------------------------------------------------

    def rows(
        self, query: LiteralString, params: Sequence[Any] | None = None
    ) -> list[tuple[Any, ...]]:
        cur = self.conn.execute(query, params)
        return cur.fetchall() if cur.description else []

    def value(self, query: LiteralString, params: Sequence[Any] | None = None) -> Any:
        rows = self.rows(query, params)
        assert rows, f"no row from {query}"
        return rows[0][0]

    def now(self) -> datetime:
        """The database's clock: the one that decides."""
        now: datetime = self.value("SELECT clock_timestamp()")
        return now

    def statuses(self, ids: Sequence[int] | None = None) -> dict[str, int]:
        if ids is None:
            rows = self.rows("SELECT status, count(*) FROM cronbase.jobs_all GROUP BY status")
        else:
            rows = self.rows(
                "SELECT status, count(*) FROM cronbase.jobs_all WHERE id = ANY(%s) GROUP BY status",
                [list(ids)],
            )
        return {status: int(n) for status, n in rows}

    def held(self, worker: str) -> list[tuple[int, int]]:
        """(job id, attempt) of the running jobs leased to ``worker``."""
        rows = self.rows(
            "SELECT id, attempts FROM cronbase.jobs_all WHERE status = 'running' AND locked_by = %s "
            "ORDER BY id",
            [worker],
        )
        return [(int(i), int(a)) for i, a in rows]

    # -- workers ---------------------------------------------------------------------------------

    def start_worker(
        self,
        host: Host,
        *options: str,
        env: dict[str, str] | None = None,
        name: str | None = None,
        quick_tcp: bool = True,
    ) -> WorkerProcess:
        """A worker process on ``host``, named after it unless given a ``name``; without
        ``quick_tcp`` it has cronbase's own TCP settings (db/pool.py, TCP_DEFAULTS)."""
        name = name or host.name
        self.on[name] = host
        environment = {"HOSTS_HOST": host.name, **(env or {})}
        if not quick_tcp:
            environment["CRONBASE_DATABASE_URL"] = self.plain_tcp_url
        return self.workers.start(name, *options, prefix=host.prefix, env=environment)

    def wait_registered(self, processes: Iterable[WorkerProcess], *, timeout: float = 60) -> None:
        processes = list(processes)
        names = [p.name for p in processes]

        def registered() -> bool:
            for process in processes:
                if process.popen.poll() is not None:
                    pytest.fail(f"worker {process.name} exited at start:\n{process.log()}")
            found = self.value("SELECT count(*) FROM cronbase.workers WHERE id = ANY(%s)", [names])
            return bool(found == len(names))

        wait_for(registered, timeout=timeout, what=f"workers {', '.join(names)} to register")

    def first_slot(self) -> datetime:
        """The first whole second after the test schedule was declared: its first slot. A worker
        registers before its scheduler's first tick declares the schedule, so this waits for it."""
        slot: datetime = wait_for(
            lambda: self.value(
                "SELECT date_trunc('second', min(created_at)) + interval '1 second' "
                "FROM cronbase.schedules WHERE key = %s",
                [SCHEDULE_KEY],
            ),
            timeout=30,
            what="the schedule to be declared",
        )
        return slot

    def wait_drained(self, ids: Sequence[int], *, timeout: float) -> None:
        """Every job of ``ids`` succeeded; the failure says what is left."""
        ids = list(ids)

        def drained() -> bool:
            return self.statuses(ids).get("succeeded", 0) == len(ids)

        try:
            wait_for(drained, timeout=timeout, what=f"{len(ids)} jobs to succeed")
        except pytest.fail.Exception:
            pytest.fail(f"not drained after {timeout}s: {self.statuses(ids)}")

    def effects_per_key(self) -> dict[str, int]:
        rows = self.rows("SELECT key, count(*) FROM hosts_effects GROUP BY key")
        return {key: int(n) for key, n in rows}

    def duplicate_effects(self) -> dict[str, int]:
        return {key: n for key, n in self.effects_per_key().items() if n > 1}

    def close(self) -> None:
        self.workers.__exit__(None, None, None)  # SIGKILL what still runs, show the logs
        self.app.close()
        self.conn.close()


def log_lines(process: WorkerProcess, pattern: str) -> list[str]:
    """The lines of a worker's log that match ``pattern`` (a regular expression)."""
    found = re.compile(pattern)
    return [line for line in process.log().splitlines() if found.search(line)]


def seconds(delta: timedelta) -> float:
    return round(delta.total_seconds(), 2)
