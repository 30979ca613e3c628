"""Serve the dashboard with uvicorn until SIGINT/SIGTERM (what ``cronbase dashboard`` runs)."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import signal
import socket
import ssl
import threading
from collections.abc import Sequence
from datetime import timedelta

import uvicorn

from ..app import App
from ..errors import ConfigurationError
from .app import create_app
from .auth import Credentials, is_loopback_host
from .doors import allowed_host

logger = logging.getLogger("cronbase")


def check_bind(host: str, auth: Credentials | None) -> None:
    """Refuse to serve beyond this machine without credentials."""
    if auth is None and not is_loopback_host(host):
        raise ConfigurationError(
            f"refusing to serve the dashboard on {host}, which is not a loopback address, "
            "without credentials: set CRONBASE_DASHBOARD_TOKEN, or CRONBASE_DASHBOARD_USER and "
            "CRONBASE_DASHBOARD_PASSWORD (or bind 127.0.0.1)"
        )


def check_proxies(trusted_proxies: Sequence[str], auth: Credentials | None) -> list[str]:
    """The trusted proxies' addresses or networks, refused without credentials: behind a proxy
    every client's connection comes from the proxy, so none can be told to be on this machine."""
    if trusted_proxies and auth is None:
        raise ConfigurationError(
            f"refusing to trust proxy {trusted_proxies[0]} without credentials: behind a proxy "
            "every client looks local; set CRONBASE_DASHBOARD_TOKEN, or CRONBASE_DASHBOARD_USER "
            "and CRONBASE_DASHBOARD_PASSWORD"
        )
    found = []
    for proxy in trusted_proxies:
        try:
            found.append(str(ipaddress.ip_network(proxy.strip(), strict=False)))
        except ValueError:
            raise ConfigurationError(
                f"trusted proxy {proxy!r} is not an address or a network (10.0.0.5, 10.0.0.0/8)"
            ) from None
    return found


def check_tls(certfile: str | None, keyfile: str | None) -> None:
    """Refuse a key without a certificate, and a pair that does not load (named, one line)."""
    if keyfile is not None and certfile is None:
        raise ConfigurationError(f"a TLS key ({keyfile}) needs its certificate: give --certfile")
    if certfile is None:
        return
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as exc:
        why = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
        raise ConfigurationError(
            f"cannot load the TLS certificate {certfile}"
            f"{f' with the key {keyfile}' if keyfile else ''}: {str(why).lower()}"
        ) from None


def served_as(host: str, allowed_hosts: Sequence[str]) -> list[str]:
    """The hosts the dashboard answers beyond loopback: ``allowed_hosts``, and the address or
    name it binds unless that is every interface (0.0.0.0, ::)."""
    found = [allowed_host(h) for h in allowed_hosts]
    if host not in ("", "0.0.0.0", "::", "[::]") and not is_loopback_host(host):
        found.append(allowed_host(host))
    return found


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
    allowed_hosts: Sequence[str] = (),
    trusted_proxies: Sequence[str] = (),
    certfile: str | None = None,
    keyfile: str | None = None,
) -> None:
    """Blocks until SIGINT/SIGTERM; closes the App's pools on the way out.

    ``allowed_hosts``: names it answers beyond loopback (and ``host``). ``trusted_proxies``:
    the addresses whose ``X-Forwarded-For`` and ``-Proto`` are believed (needs ``auth``); no
    other's are. ``certfile``/``keyfile``: serve HTTPS.
    """
    check_bind(host, auth)
    proxies = check_proxies(trusted_proxies, auth)
    check_tls(certfile, keyfile)
    hosts = served_as(host, allowed_hosts)
    # Bound before the URL is announced: a port in use is one line, not a URL then exit 3.
    sock = bind(host, port)
    web = create_app(app, auth=auth, long_running_after=long_running_after, allowed_hosts=hosts)
    config = uvicorn.Config(
        web,
        host=host,
        port=port,
        log_level="info",
        lifespan="off",
        # uvicorn believes X-Forwarded-For from 127.0.0.1 by default (or FORWARDED_ALLOW_IPS):
        # a header would then name the client the audit log records. Only the proxies given.
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or None,
        ssl_certfile=certfile,
        ssl_keyfile=keyfile,
    )
    server = uvicorn.Server(config)
    how = "with credentials" if auth else "without credentials (this machine only)"
    scheme = "https" if certfile else "http"
    shown = f"[{host}]" if ":" in host else host
    logger.info("dashboard for schema %r on %s://%s:%d/ %s", app.schema, scheme, shown, port, how)

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
