"""A real high-availability PostgreSQL: three PostgreSQL 15 nodes managed by Patroni (Debian's
Patroni 3), with one etcd as Patroni's store, all on 127.0.0.1, with short timeouts so that a
failover takes seconds. Nodes are killed the hard way (their Patroni and their PostgreSQL,
SIGKILL) and started again, when they rejoin as replicas (rewound by pg_rewind if need be).

    with PatroniCluster(synchronous=True) as cluster:
        url = cluster.url("app")          # multi-host, target_session_attrs=read-write
        old = cluster.leader()
        old.kill()
        new = cluster.wait_leader(other_than=old)
        old.start()
        cluster.wait_healthy()

The configuration each node gets is :meth:`PatroniCluster._config`; docs/ha-and-hosts.md says
which of its settings a team should keep.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import psycopg
from psycopg import sql

from tests.servers import (
    PG_BIN,
    ServerError,
    _children,
    _make_folder,
    _reap,
    _require,
    _spawn,
    _tail,
    free_port,
    wait_until,
)

ETCD = Path("/usr/bin/etcd")
PATRONI = Path("/usr/bin/patroni")
PATRONICTL = Path("/usr/bin/patronictl")
START_TIMEOUT = 90.0
# Patroni's timing (its DCS settings): the leader key lives TTL seconds unless renewed (every
# LOOP_WAIT); a leader that cannot renew it for RETRY_TIMEOUT demotes itself. Patroni needs
# loop_wait + 2 * retry_timeout <= ttl. Production uses 30/10/10; these make a failover take
# about TTL seconds.
TTL = 8
LOOP_WAIT = 1
RETRY_TIMEOUT = 3


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=3) as response:
        return json.loads(response.read() or b"null")


def _send(url: str, method: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method=method)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read()
    try:
        return json.loads(text)
    except ValueError:
        return text.decode(errors="replace")


class Etcd:
    """One etcd member on 127.0.0.1 (v3 API), its data in ``folder``."""

    def __init__(self, folder: Path) -> None:
        _require(ETCD, "etcd-server")
        self.folder = folder
        self.port = free_port()
        self.peer_port = free_port()
        self.log = folder / "etcd.log"
        self._process: subprocess.Popen[bytes] | None = None
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.argv: list[str | Path] = [
            ETCD,
            *("--name", "etcd1", "--data-dir", folder / "etcd"),
            *("--listen-client-urls", self.url, "--advertise-client-urls", self.url),
            *("--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer),
            *("--initial-cluster", f"etcd1={peer}", "--initial-cluster-state", "new"),
            # Patroni 3 talks to etcd's v3 API through its JSON gateway.
            *("--enable-grpc-gateway", "--logger", "zap", "--log-outputs", "stderr"),
        ]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._process = _spawn(self.argv, self.folder, self.log)

        def healthy() -> bool:
            if self._process is not None and self._process.poll() is not None:
                raise ServerError(f"etcd exited at start; {self.log}:\n{_tail(self.log)}")
            try:
                return bool(_get(f"{self.url}/health").get("health") == "true")
            except (OSError, ValueError):
                return False

        try:
            wait_until(healthy, timeout=START_TIMEOUT, what=f"etcd on {self.url}")
        except TimeoutError as error:
            raise ServerError(f"{error}; {self.log}:\n{_tail(self.log)}") from None

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            _reap(self._process, "etcd")


class PatroniNode:
    """One Patroni and the PostgreSQL it runs (started by :meth:`start`)."""

    def __init__(self, cluster: PatroniCluster, name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.folder = cluster.folder / name
        self.folder.mkdir()
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        self.data = self.folder / "data"
        self.port = free_port()
        self.rest_port = free_port()
        self.config = self.folder / "patroni.yml"  # JSON is YAML
        self.log = self.folder / "patroni.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def rest(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{quote(dbname, safe='')}"

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start its Patroni, which starts PostgreSQL (a new cluster, a replica, or the data
        directory it finds); returns at once."""
        self._process = _spawn([PATRONI, self.config], self.folder, self.log)

    def postmaster(self) -> int | None:
        """The pid of its PostgreSQL, from postmaster.pid, when that process exists."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid

    def kill(self) -> None:
        """SIGKILL its Patroni and its PostgreSQL (every backend too), as when the machine dies:
        the leader key stays in etcd until its TTL runs out."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(30)
        pid = self.postmaster()
        if pid is not None:
            # Stopped first, the postmaster can neither restart its children nor start new ones
            # (see tests/servers.py, PostgresCluster.kill).
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
            for child in [*_children(pid), pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            # Not our child (Patroni starts it as pg_ctl does): its new parent reaps it.
            wait_until(
                lambda: not Path(f"/proc/{pid}").exists(),
                timeout=30,
                what=f"PostgreSQL of {self.name} (pid {pid}) to be gone",
            )

    def stop(self) -> None:
        """Stop Patroni (SIGTERM: it stops PostgreSQL first, fast), or kill what is left."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(60)
        self.kill()

    def state(self) -> dict[str, Any] | None:
        """Its REST API's view of itself (role, state, timeline...), or None when it is down."""
        try:
            answer: dict[str, Any] = _get(f"{self.rest}/patroni")
        except urllib.error.HTTPError as error:  # 503: a replica or a stopped node answers too
            answer = json.loads(error.read() or b"{}")
        except (OSError, ValueError):
            return None
        return answer

    def __repr__(self) -> str:
        return f"<PatroniNode {self.name} :{self.port}>"


class PatroniCluster:
    """etcd and three Patroni nodes, bootstrapped and healthy; ``close()`` removes everything."""

    def __init__(self, *, synchronous: bool = True, names: tuple[str, ...] = ("pg1", "pg2", "pg3")):
        for program, package in ((PATRONI, "patroni"), (PATRONICTL, "patroni")):
            _require(program, package)
        _require(PG_BIN / "postgres", "postgresql-15")
        self.folder = _make_folder("cronbase-patroni-")
        self.scope = f"cronbase-{os.getpid()}-{self.folder.name[-6:]}"
        self.synchronous = synchronous
        self.etcd = Etcd(self.folder)
        self.nodes = [PatroniNode(self, name) for name in names]
        try:
            self.etcd.start()
            for node in self.nodes:
                node.config.write_text(json.dumps(self._config(node), indent=2))
            # The first bootstraps (initdb); the others then copy it (pg_basebackup).
            self.nodes[0].start()
            wait_until(
                lambda: self.leader() is self.nodes[0],
                timeout=START_TIMEOUT,
                what=f"{self.nodes[0].name} to bootstrap",
            )
            for node in self.nodes[1:]:
                node.start()
            self.wait_healthy()
        except BaseException as error:
            self.close()
            if isinstance(error, TimeoutError):
                raise ServerError(f"{error}\n{self.logs()}") from None
            raise

    def _config(self, node: PatroniNode) -> dict[str, Any]:
        """The node's patroni.yml. What a team should keep of it: docs/ha-and-hosts.md."""
        hba = [
            "local all all trust",
            "host all all 127.0.0.1/32 trust",
            "host replication all 127.0.0.1/32 trust",
        ]
        return {
            "scope": self.scope,
            "namespace": "/cronbase-tests/",
            "name": node.name,
            "log": {"level": "INFO", "format": "%(asctime)s %(levelname)s: %(message)s"},
            "restapi": {
                "listen": f"127.0.0.1:{node.rest_port}",
                "connect_address": f"127.0.0.1:{node.rest_port}",
            },
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd.port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": LOOP_WAIT,
                    "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 1024 * 1024,
                    "synchronous_mode": self.synchronous,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_level": "replica",
                            "hot_standby": "on",
                            "wal_log_hints": "on",
                            "max_wal_senders": 10,
                            "max_replication_slots": 10,
                            "wal_keep_size": "256MB",
                            "max_connections": 200,
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.port}",
                "connect_address": f"127.0.0.1:{node.port}",
                "data_dir": str(node.data),
                "bin_dir": str(PG_BIN),
                "pgpass": str(node.folder / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "replicator", "password": "replicator"},
                    "rewind": {"username": "postgres", "password": "postgres"},
                },
                "parameters": {
                    "unix_socket_directories": str(node.folder),
                    # Processes are killed, never the machine: the page cache survives.
                    "fsync": "off",
                },
                "pg_hba": hba,
                "remove_data_directory_on_rewind_failure": True,
                "remove_data_directory_on_diverged_timelines": True,
            },
            "watchdog": {"mode": "off"},
        }

    # -- who is who ------------------------------------------------------------------------------

    def members(self) -> list[dict[str, Any]]:
        """The cluster as a live node's REST API sees it (``GET /cluster``), or [] if none
        answers."""
        for node in self.nodes:
            if not node.is_running:
                continue
            try:
                members: list[dict[str, Any]] = _get(f"{node.rest}/cluster")["members"]
            except (OSError, ValueError, KeyError):
                continue
            return members
        return []

    def node(self, name: str) -> PatroniNode:
        return next(node for node in self.nodes if node.name == name)

    def leader(self) -> PatroniNode | None:
        """The running leader whose PostgreSQL accepts writes, or None."""
        for member in self.members():
            if member.get("role") == "leader" and member.get("state") == "running":
                node = self.node(member["name"])
                if node.is_running and self._writable(node):
                    return node
        return None

    def _writable(self, node: PatroniNode) -> bool:
        try:
            with psycopg.connect(node.url(), connect_timeout=2, autocommit=True) as conn:
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        except psycopg.OperationalError:
            return False
        return row is not None and not row[0]

    def wait_leader(
        self, *, other_than: PatroniNode | None = None, timeout: float = 60
    ) -> PatroniNode:
        def found() -> PatroniNode | None:
            leader = self.leader()
            return leader if leader is not None and leader is not other_than else None

        return wait_until(found, timeout=timeout, what="a (new) leader that accepts writes")

    def healthy(self) -> bool:
        """Every node running; every replica streaming from the leader with no lag; in
        synchronous mode, one of them the synchronous standby."""
        members = self.members()
        if len(members) != len(self.nodes) or any(
            m.get("state") not in ("running", "streaming") for m in members
        ):
            return False
        leader = self.leader()
        if leader is None:
            return False
        with psycopg.connect(leader.url(), connect_timeout=2, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT application_name, state, sync_state FROM pg_stat_replication"
            ).fetchall()
        streaming = {name for name, state, _ in rows if state == "streaming"}
        replicas = {node.name for node in self.nodes if node is not leader}
        if streaming != replicas:
            return False
        if self.synchronous:
            return any(sync == "sync" for _, _, sync in rows) and any(
                m.get("role") == "sync_standby" for m in members
            )
        return True

    def wait_healthy(self, timeout: float = START_TIMEOUT) -> None:
        wait_until(self.healthy, timeout=timeout, what="every Patroni node running and streaming")

    # -- changes ---------------------------------------------------------------------------------

    def set_synchronous(self, synchronous: bool) -> None:
        """Turn synchronous_mode on or off (PATCH /config: the cluster's DCS settings)."""
        leader = self.wait_leader()
        _send(f"{leader.rest}/config", "PATCH", {"synchronous_mode": synchronous})
        self.synchronous = synchronous
        if not synchronous:
            # Until the leader's synchronous_standby_names is empty, commits still wait.
            def no_sync_standby() -> bool:
                with psycopg.connect(leader.url(), connect_timeout=2, autocommit=True) as conn:
                    row = conn.execute("SHOW synchronous_standby_names").fetchone()
                return row == ("",)

            wait_until(no_sync_standby, timeout=60, what="the leader to stop waiting for a standby")
        self.wait_healthy()

    def switchover(self, candidate: PatroniNode) -> PatroniNode:
        """``patronictl switchover`` from the current leader to ``candidate``; the old leader."""
        leader = self.wait_leader()
        result = subprocess.run(
            [
                PATRONICTL,
                *("-c", leader.config, "switchover", self.scope),
                *("--leader", leader.name, "--candidate", candidate.name, "--force"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0 or "Successfully switched over" not in result.stdout:
            raise ServerError(f"patronictl switchover failed:\n{result.stdout}{result.stderr}")
        return leader

    def sync_standby(self) -> PatroniNode:
        """The synchronous standby: in synchronous mode, the only node Patroni promotes."""
        name = wait_until(
            lambda: next(
                (m["name"] for m in self.members() if m.get("role") == "sync_standby"), None
            ),
            timeout=60,
            what="a synchronous standby",
        )
        return self.node(name)

    # -- for clients -----------------------------------------------------------------------------

    def url(self, dbname: str) -> str:
        """The multi-host URL an application uses: every node, only the one that accepts writes
        taken (the documented setup, README "Failover")."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"postgresql://postgres@{hosts}/{quote(dbname, safe='')}?target_session_attrs=read-write"

    def create_database(self, name: str) -> str:
        leader = self.wait_leader()
        with psycopg.connect(leader.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def logs(self, lines: int = 15) -> str:
        parts = [f"--- {self.etcd.log}:\n{_tail(self.etcd.log, lines)}"]
        for node in self.nodes:
            parts.append(f"--- {node.log}:\n{_tail(node.log, lines)}")
        return "\n".join(parts)

    def close(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.kill()
        self.etcd.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
