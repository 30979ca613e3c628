"""Serve the dashboard with uvicorn until SIGINT/SIGTERM (what ``cronbase dashboard`` runs)."""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
import threading
from datetime import timedelta

import uvicorn

from ..app import App
from ..errors import ConfigurationError
from .app import create_app
from .auth import Credentials, is_loopback_host

logger = logging.getLogger("cronbase")


def check_bind(host: str, auth: Credentials | None) -> None:
    """Refuse to serve beyond this machine without credentials."""
    if auth is None and not is_loopback_host(host):
        raise ConfigurationError(
            f"refusing to serve the dashboard on {host}, which is not a loopback address, "
            "without credentials: set CRONBASE_DASHBOARD_TOKEN, or CRONBASE_DASHBOARD_USER and "
            "CRONBASE_DASHBOARD_PASSWORD (or bind 127.0.0.1)"
        )


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; ConfigurationError naming them when it is taken."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise ConfigurationError(f"cannot serve the dashboard on {host!r}: {exc}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        why = (
            "the port is in use (another dashboard?)"
            if exc.errno == errno.EADDRINUSE
            else (exc.strerror or type(exc).__name__).lower()
        )
        raise ConfigurationError(
            f"cannot serve the dashboard on {host}:{port}: {why}; choose another with --port"
        ) from None
    return sock


def serve(
    app: App,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    auth: Credentials | None = None,
    long_running_after: timedelta = timedelta(minutes=10),
) -> None:
    """Blocks until SIGINT/SIGTERM; closes the App's pools on the way out."""
    check_bind(host, auth)
    # Bound before the URL is announced: a port in use is one line, not a URL then exit 3.
    sock = bind(host, port)
    web = create_app(app, auth=auth, long_running_after=long_running_after)
    config = uvicorn.Config(web, host=host, port=port, log_level="info", lifespan="off")
    server = uvicorn.Server(config)
    how = "with credentials" if auth else "without credentials (this machine only)"
    logger.info("dashboard for schema %r on http://%s:%d/ %s", app.schema, host, port, how)

    async def run() -> None:
        try:
            await server.serve(sockets=[sock])
        finally:
            sock.close()
            await app.aclose()

    if threading.current_thread() is not threading.main_thread():
        asyncio.run(run())
        return
    # uvicorn shuts down on SIGINT/SIGTERM, then raises the signal again under the handler it
    # found. Finding this one, the process goes on to close its pools and exits 0, as
    # `cronbase worker` does.
    previous = {sig: signal.signal(sig, _stopped) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        asyncio.run(run())
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stopped(signum: int, frame: object) -> None:
    """The signal's work (a graceful shutdown) is done by the time this runs."""
