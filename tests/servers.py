"""Real servers that a test may break: its own PostgreSQL clusters to restart, kill and fail over,
and a real pgbouncer in front of one. Never mocks; for the failures cronbase meets in deployments.

Debian's PostgreSQL 15 and pgbouncer run them (``make test`` installs both). Each test gets its
own servers from the function-scoped factories and they are gone after it::

    from tests.servers import make_cluster as make_cluster  # "as": a re-export, so ruff keeps it

    def test_failover(make_cluster):
        primary = make_cluster()
        replica = primary.make_replica()
        primary.kill()
        replica.promote()

The fixtures: ``make_cluster``, ``make_pgbouncer`` (factories) and ``pg_cluster``,
``pgbouncer_transaction``, ``pgbouncer_session`` (one of each, in front of ``pg_cluster``).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, TypeVar
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PGBOUNCER = Path("/usr/sbin/pgbouncer")
# PostgreSQL and pgbouncer refuse to run as root; Debian's postgresql-15 creates this user.
SERVER_USER = "postgres"
START_TIMEOUT = 60.0

T = TypeVar("T")
StopMode = Literal["smart", "fast", "immediate"]
# What `pg_ctl stop -m MODE` sends to the postmaster (PostgreSQL docs, "Shutting Down the Server").
STOP_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}


class ServerError(RuntimeError):
    """A server did not start, or a command to build one failed; the message has its log tail."""


def wait_until(predicate: Callable[[], T], *, timeout: float, what: str) -> T:
    """Poll ``predicate`` until it returns something truthy; TimeoutError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (free now: another process could take it before we bind)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _url(port: int, dbname: str, user: str = "postgres") -> str:
    return f"postgresql://{quote(user, safe='')}@127.0.0.1:{port}/{quote(dbname, safe='')}"


def _require(program: Path, package: str) -> None:
    # Not a skip: CI must not pass with these tests silently left out.
    if not os.access(program, os.X_OK):
        raise ServerError(
            f"{program} is missing: `make test` installs it (scripts/prerequisites.sh), "
            f"or run: sudo apt-get install -y {package}"
        )


def _as_server_user() -> dict[str, Any]:
    """subprocess options that run a program as the postgres user when we are root.

    Not ``runuser -u postgres --``: runuser stays as the server's parent, answers any signal by
    sending SIGTERM to it, and stops itself when its child is stopped (so kill()'s SIGSTOP left
    a zombie postmaster that nobody reaped). With these, the server is our own child.
    """
    if os.geteuid() != 0:
        return {}
    home = pwd.getpwnam(SERVER_USER).pw_dir
    env = {**os.environ, "HOME": home, "USER": SERVER_USER, "LOGNAME": SERVER_USER}
    return {"user": SERVER_USER, "group": SERVER_USER, "extra_groups": [], "env": env}


def _make_folder(prefix: str) -> Path:
    # Not pytest's tmp_path: its parents are root-only (0700), and the server user must enter.
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        shutil.chown(folder, SERVER_USER, SERVER_USER)
    return folder


def _run(argv: Sequence[str | Path], folder: Path) -> None:
    result = subprocess.run(
        [str(arg) for arg in argv],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        **_as_server_user(),
    )
    if result.returncode != 0:
        command = " ".join(str(arg) for arg in argv)
        raise ServerError(f"{command} exited {result.returncode}:\n{result.stdout}{result.stderr}")


def _children(pid: int) -> list[int]:
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):  # gone meanwhile
            # "pid (command) state ppid ...": the command may hold spaces and parentheses.
            if int(stat.read_text().rpartition(")")[2].split()[1]) == pid:
                children.append(int(stat.parent.name))
    return children


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"({path} was not written)"
    return "\n".join(text.splitlines()[-lines:])


def _spawn(
    argv: Sequence[str | Path], folder: Path, log: Path, *, as_server_user: bool = True
) -> subprocess.Popen[bytes]:
    """Start a server in the foreground, as our child: we reap it, so a killed server leaves no
    zombie whose pid would block the next start. Its own session: a Ctrl-C at the terminal
    interrupts pytest, whose fixtures then stop the servers, rather than the servers midway.
    Without ``as_server_user`` the command changes user itself (``setpriv`` after
    ``ip netns exec``, which needs root)."""
    with log.open("ab") as output:
        return subprocess.Popen(
            [str(arg) for arg in argv],
            cwd=folder,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **(_as_server_user() if as_server_user else {}),
        )


def in_netns(netns: str, argv: Sequence[str | Path]) -> list[str]:
    """``argv`` run in the network namespace ``netns`` as the server user (we are root: only
    root enters a namespace). ``ip`` and ``setpriv`` exec, fork nothing: the server keeps the
    pid we started, and stays our child."""
    drop = [
        "setpriv",
        f"--reuid={SERVER_USER}",
        f"--regid={SERVER_USER}",
        "--init-groups",
        "--reset-env",
        "--",
    ]
    return ["ip", "netns", "exec", netns, *drop, *(str(arg) for arg in argv)]


def _running(process: subprocess.Popen[bytes] | None) -> subprocess.Popen[bytes] | None:
    return process if process is not None and process.poll() is None else None


def _reap(process: subprocess.Popen[bytes], what: str) -> None:
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise ServerError(f"{what} did not stop within 30 s; killed it") from None


class PostgresCluster:
    """A throwaway PostgreSQL 15 cluster on 127.0.0.1 (a new one, or a streaming replica of
    ``primary``), started; ``close()`` (or leaving ``with``) stops it and deletes its folder.

    With ``netns`` (a network namespace, tests/hosts/network.py) it runs in that namespace,
    listening on ``address`` there, and accepts connections from any address: other namespaces
    reach it by TCP (:meth:`tcp_url`), the test through its Unix socket (:attr:`url`), which no
    cut of the network touches.
    """

    def __init__(
        self,
        *,
        primary: PostgresCluster | None = None,
        netns: str | None = None,
        address: str = "127.0.0.1",
    ) -> None:
        for program in ("initdb", "postgres", "pg_ctl", "pg_basebackup"):
            _require(PG_BIN / program, "postgresql-15")
        if netns is not None and os.geteuid() != 0:
            raise ServerError(f"a server in network namespace {netns!r} needs root")
        self.netns = netns
        self.address = address
        self.folder = _make_folder("cronbase-pg-")
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        self.port = free_port()
        self.replicas: list[PostgresCluster] = []
        self._process: subprocess.Popen[bytes] | None = None
        try:
            if primary is None:
                self._initdb()
            else:
                # -R writes standby.signal and primary_conninfo: the copy starts as a replica.
                conninfo = f"host=127.0.0.1 port={primary.port} user=postgres"
                self._run(
                    PG_BIN / "pg_basebackup",
                    *("-R", "-X", "stream", "--no-sync", "--checkpoint=fast"),
                    *("-D", self.data, "-d", conninfo),
                )
            self.start()
        except BaseException:
            self.close()
            raise

    def _initdb(self) -> None:
        self._run(
            PG_BIN / "initdb",
            *("-D", self.data, "--auth=trust", "-U", "postgres", "-E", "UTF8", "--no-sync"),
            # Not the environment's locale, which may not exist on this machine.
            "--locale=C.UTF-8",
        )
        # In a namespace of the test's own network, every address there is one of its hosts.
        hosts = "0.0.0.0/0" if self.netns is not None else "127.0.0.1/32"
        (self.data / "pg_hba.conf").write_text(
            "local all all trust\n"
            f"host all all {hosts} trust\n"
            "host replication all 127.0.0.1/32 trust\n"
        )

    def _run(self, program: Path, *args: str | Path) -> None:
        try:
            _run([program, *args], self.folder)
        except ServerError as error:
            raise ServerError(f"{error}\n--- {self.log}:\n{_tail(self.log)}") from None

    @property
    def url(self) -> str:
        if self.netns is not None:
            return self.socket_url("postgres")
        return _url(self.port, "postgres")

    def socket_url(self, dbname: str) -> str:
        """Database ``dbname`` through the Unix socket in the cluster's folder."""
        return (
            f"postgresql://postgres@/{quote(dbname, safe='')}?host={self.folder}&port={self.port}"
        )

    def tcp_url(self, dbname: str) -> str:
        """Database ``dbname`` by TCP at ``address``: how other hosts reach it."""
        return f"postgresql://postgres@{self.address}:{self.port}/{quote(dbname, safe='')}"

    @property
    def is_running(self) -> bool:
        return _running(self._process) is not None

    def start(self) -> None:
        """Start on ``self.port`` and return once the server accepts connections."""
        argv: list[str | Path] = [
            PG_BIN / "postgres",
            *("-D", self.data, "-p", str(self.port), "-k", self.folder),
            *("-c", f"listen_addresses={self.address}", "-c", "fsync=off"),
            *("-c", "max_connections=200", "-c", "wal_level=replica"),
            *("-c", "max_wal_senders=5", "-c", "hot_standby=on"),
        ]
        if self.netns is None:
            self._process = _spawn(argv, self.folder, self.log)
        else:
            self._process = _spawn(
                in_netns(self.netns, argv), self.folder, self.log, as_server_user=False
            )

        def accepts_connections() -> bool:
            if not self.is_running:
                raise ServerError(f"PostgreSQL exited at start; {self.log}:\n{_tail(self.log)}")
            try:
                # 2 s, libpq's least: what a port held by a program that never answers costs.
                with psycopg.connect(self.url, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
            except psycopg.OperationalError:
                return False  # not listening yet, or "the database system is starting up"
            return True

        try:
            wait_until(accepts_connections, timeout=START_TIMEOUT, what=f"PostgreSQL on {self.url}")
        except TimeoutError as error:
            raise ServerError(f"{error}; {self.log}:\n{_tail(self.log)}") from None

    def stop(self, mode: StopMode = "fast") -> None:
        """Shut down as ``pg_ctl stop -m mode`` does: smart waits for clients, fast disconnects
        them, immediate stops without a checkpoint (the next start runs crash recovery)."""
        if process := _running(self._process):
            process.send_signal(STOP_SIGNALS[mode])
            _reap(process, f"PostgreSQL on port {self.port}")

    def restart(self, mode: StopMode = "immediate") -> None:
        """Stop with ``mode``, then start on the same port: clients' connections are dropped."""
        self.stop(mode)
        self.start()

    def kill(self) -> None:
        """SIGKILL the postmaster and all its processes, as when the machine dies: clients'
        connections break at once, and the next start runs crash recovery."""
        process = _running(self._process)
        if process is None:
            return
        # Every backend is a session of its own (PostgreSQL calls setsid), so killpg misses
        # them, and a backend outlives its postmaster long enough to answer a query. Stopped
        # first, the postmaster can neither restart its children nor start new ones.
        process.send_signal(signal.SIGSTOP)
        for pid in [*_children(process.pid), process.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _reap(process, f"PostgreSQL on port {self.port}")

    def make_replica(self) -> PostgresCluster:
        """A streaming replica of this (running) cluster on its own port; closed with this one."""
        replica = PostgresCluster(primary=self)
        self.replicas.append(replica)
        return replica

    def promote(self) -> None:
        """Turn this replica into a primary; return once it accepts writes."""
        self._run(PG_BIN / "pg_ctl", "promote", "-w", "-D", self.data)

        def is_primary() -> bool:
            with psycopg.connect(self.url) as conn:
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
                return row is not None and not row[0]

        wait_until(is_primary, timeout=START_TIMEOUT, what=f"{self.url} to leave recovery")

    def create_database(self, name: str) -> str:
        """Create database ``name``; its URL (through the Unix socket in a namespace)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.socket_url(name) if self.netns is not None else _url(self.port, name)

    def close(self) -> None:
        """Stop this cluster and its replicas at once and delete their folders."""
        for replica in self.replicas:
            replica.close()
        self.replicas.clear()
        if self.is_running:
            self.stop("immediate")
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

    def __repr__(self) -> str:
        state = "running" if self.is_running else "stopped"
        return f"<PostgresCluster {self.url} {state}>"


PoolMode = Literal["transaction", "session"]


class PgBouncer:
    """A real pgbouncer on 127.0.0.1 in front of ``cluster``, started; ``close()`` stops it.

    ``users`` may connect (auth_file with trust: pgbouncer only asks that the user be listed);
    the first is the admin of the console that ``show()`` queries.
    """

    def __init__(
        self,
        cluster: PostgresCluster,
        *,
        pool_mode: PoolMode = "transaction",
        default_pool_size: int = 20,
        users: Sequence[str] = ("postgres",),
    ) -> None:
        _require(PGBOUNCER, "pgbouncer")
        self.cluster = cluster
        self.pool_mode = pool_mode
        self.folder = _make_folder("cronbase-pgbouncer-")
        self.ini = self.folder / "pgbouncer.ini"
        self.log = self.folder / "pgbouncer.log"
        self.pidfile = self.folder / "pgbouncer.pid"
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        (self.folder / "users.txt").write_text("".join(f'"{user}" ""\n' for user in users))
        self.ini.write_text(
            f"""\
[databases]
* = host=127.0.0.1 port={cluster.port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
; TCP only: no socket in /var/run/postgresql (root's, and shared with other runs)
unix_socket_dir =
auth_type = trust
auth_file = {self.folder / "users.txt"}
admin_users = {users[0]}
pool_mode = {pool_mode}
max_client_conn = 500
default_pool_size = {default_pool_size}
; psycopg sends no parameter pgbouncer rejects; JDBC and psycopg2 send this one. Not options:
; pgbouncer would drop it silently (a search_path lost); unlisted, the client fails loudly.
ignore_startup_parameters = extra_float_digits
; server_reset_query: the default (DISCARD ALL), run in session mode only.
; No logfile: pgbouncer runs in the foreground and logs to stderr, which goes to pgbouncer.log.
pidfile = {self.pidfile}
"""
        )
        try:
            self.start()
        except BaseException:
            self.close()
            raise

    def url(self, dbname: str = "postgres", user: str = "postgres") -> str:
        return _url(self.port, dbname, user)

    @property
    def is_running(self) -> bool:
        return _running(self._process) is not None

    def start(self) -> None:
        """Start on ``self.port`` and return once the admin console answers."""
        self._process = _spawn([PGBOUNCER, self.ini], self.folder, self.log)

        def answers() -> bool:
            if not self.is_running:
                raise ServerError(f"pgbouncer exited at start; {self.log}:\n{_tail(self.log)}")
            try:
                self.show("VERSION")
            except psycopg.OperationalError:
                return False
            return True

        try:
            wait_until(answers, timeout=START_TIMEOUT, what=f"pgbouncer on port {self.port}")
        except TimeoutError as error:
            raise ServerError(f"{error}; {self.log}:\n{_tail(self.log)}") from None

    def stop(self) -> None:
        """Immediate shutdown (SIGTERM): clients and server connections are closed at once."""
        if process := _running(self._process):
            process.send_signal(signal.SIGTERM)
            _reap(process, f"pgbouncer on port {self.port}")

    def show(self, what: str) -> list[dict[str, Any]]:
        """``SHOW <what>`` on the admin console (POOLS, CLIENTS, SERVERS, STATS...): rows as dicts.

        The console speaks only the simple query protocol and knows no BEGIN (so: autocommit).
        psycopg 3.3 sends a query without parameters by the simple protocol (``prepare=False``
        included), but the extended one with parameters, with ``binary=True``, and once it
        prepares the statement (its 6th run by default): hence ``prepare_threshold=None``.
        """
        with (
            psycopg.connect(
                self.url("pgbouncer"), autocommit=True, prepare_threshold=None, connect_timeout=5
            ) as conn,
            conn.cursor() as cursor,
        ):
            cursor.execute(sql.SQL("SHOW {}").format(sql.SQL(what)))
            columns = [column.name for column in cursor.description or ()]
            return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]

    def close(self) -> None:
        self.stop()
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

    def __repr__(self) -> str:
        return f"<PgBouncer {self.pool_mode} {self.url()} -> {self.cluster.url}>"


@pytest.fixture
def make_cluster() -> Iterator[Callable[[], PostgresCluster]]:
    """Call it for a new running cluster; all it made (and their replicas) close after the test."""
    # An ExitStack closes all even when one close fails, the last made first.
    with contextlib.ExitStack() as made:

        def make() -> PostgresCluster:
            return made.enter_context(PostgresCluster())

        yield make


@pytest.fixture
def make_pgbouncer() -> Iterator[Callable[..., PgBouncer]]:
    """``make_pgbouncer(cluster, pool_mode=..., default_pool_size=...)``; closed after the test."""
    with contextlib.ExitStack() as made:

        def make(cluster: PostgresCluster, **options: Any) -> PgBouncer:
            return made.enter_context(PgBouncer(cluster, **options))

        yield make


@pytest.fixture
def pg_cluster(make_cluster: Callable[[], PostgresCluster]) -> PostgresCluster:
    """A running cluster of this test's own."""
    return make_cluster()


@pytest.fixture
def pgbouncer_transaction(
    pg_cluster: PostgresCluster, make_pgbouncer: Callable[..., PgBouncer]
) -> PgBouncer:
    """pgbouncer in transaction mode in front of ``pg_cluster``."""
    return make_pgbouncer(pg_cluster, pool_mode="transaction")


@pytest.fixture
def pgbouncer_session(
    pg_cluster: PostgresCluster, make_pgbouncer: Callable[..., PgBouncer]
) -> PgBouncer:
    """pgbouncer in session mode in front of ``pg_cluster``."""
    return make_pgbouncer(pg_cluster, pool_mode="session")
