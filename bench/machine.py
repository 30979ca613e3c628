"""What a result file says about where it was measured: processor, memory, versions, commit."""

from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DISTRIBUTIONS = ("cronbase", "pgqueuer", "procrastinate", "bullmq", "psycopg", "asyncpg")


def _commit(where: Path) -> str:
    """The short commit of the checkout holding ``where``, marked when its src has changes."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=where
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", ":/src"],
            capture_output=True,
            text=True,
            cwd=where,
        ).stdout.strip()
    except OSError:
        return ""
    return commit + (" + uncommitted src changes" if commit and dirty else "")


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    commit = _commit(HERE)
    # The library measured may come from another checkout (PYTHONPATH=other/src, as a paired
    # before-and-after run does): name its commit when it differs from the bench's.
    spec = importlib.util.find_spec("cronbase")
    library = _commit(Path(spec.origin).parent) if spec and spec.origin else ""
    if library and library != commit:
        commit = f"{commit} (cronbase from {library})"
    versions = {}
    for dist in DISTRIBUTIONS:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory": mem,
        "os": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
        "commit": commit,
    }
