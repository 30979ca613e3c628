"""The dashboard's doors, checked before anyone is asked who they are: the host names it answers
(against DNS rebinding), the origin a POST must come from (against cross-site requests), and what
a request may carry (no NUL in its query, a bounded body).

DNS rebinding: a page on ``attacker.example`` points its name at 127.0.0.1 after loading, and the
browser, which sees one origin, lets the page read this machine's dashboard. The browser still
sends ``Host: attacker.example``, so answering only the names the dashboard is served as (loopback
names and addresses by default) closes the door. Only the name is checked: rebinding changes
where a name points, not its port (the origin check, which guards actions, compares ports too).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlsplit

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import ConfigurationError
from .auth import is_loopback_host
from .middleware import HttpMiddleware

# What a browser may read or send without changing anything; every other method needs an origin.
SAFE_METHODS = frozenset({"GET", "HEAD"})
MAX_BODY_BYTES = 256 * 1024  # the largest form (500 job ids) is about 10 KB
DEFAULT_PORTS = {"http": 80, "https": 443}
_SHOWN = 80  # characters of a refused value a message shows


def _shown(value: str) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 4] + "...'"


def _address(name: str) -> str | None:
    """The one spelling of an IP address (``0:0::1`` is ``::1``); None for a name."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return None


def allowed_host(value: str) -> str:
    """A host name or address as ``allowed_hosts`` takes it (lower case, no brackets, no port);
    ConfigurationError naming it when it is something else."""
    name = value.strip().lower().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    address = _address(name)
    if address is not None:
        return address
    labels = name.split(".")
    if not name or any(
        not label
        or len(label) > 63
        or not all(c.isascii() and (c.isalnum() or c in "-_") for c in label)
        for label in labels
    ):
        raise ConfigurationError(
            f"allowed host {value!r} is not a host name or an address: give a name such as "
            "dashboard.example.com or an address such as 10.0.0.5 (no scheme, port or path)"
        )
    return name


def split_host(header: str) -> tuple[str, int | None] | None:
    """``Host: name[:port]`` as (name, port), the name lower case without brackets or a final
    dot; None when the header is not one."""
    text = header.strip().lower()
    if text.startswith("["):  # an IPv6 address: [::1]:8080
        name, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port = rest[1:] if rest else None
    elif text.count(":") == 1:
        name, _, port = text.partition(":")
    elif ":" in text:
        return None  # an IPv6 address without brackets
    else:
        name, port = text, None
    if port is not None and not (port.isascii() and port.isdigit() and 0 < int(port[:6]) < 65536):
        return None
    name = _address(name.rstrip(".")) or name.rstrip(".")
    return (name, int(port) if port is not None else None) if name else None


def origin_of(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an ``Origin`` or ``Referer`` value; None when it has none."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    host = parts.hostname.rstrip(".")
    return scheme, _address(host) or host, port or DEFAULT_PORTS[scheme]


# The headers that show where a request comes from, and what one from elsewhere is not.
_SOURCE_HEADERS = (
    ("origin", "is not this dashboard's own"),
    ("referer", "is not a page of this dashboard"),
)


class DoorsMiddleware(HttpMiddleware):
    """Refuse, before authentication, a request for a host the dashboard is not served as (400),
    a POST from another origin (403), a NUL in the query (400) and an oversized body (413)."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] = ()) -> None:
        super().__init__(app)
        self.allowed_hosts = frozenset(allowed_host(h) for h in allowed_hosts)

    def is_allowed(self, name: str) -> bool:
        return is_loopback_host(name) or name in self.allowed_hosts

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        refusal = self._host_refusal(headers) or self._query_refusal(scope)
        if refusal is None and scope["method"] not in SAFE_METHODS:
            refusal = self._origin_refusal(scope, headers)
        if refusal is None:
            refusal = self._size_refusal(headers)
        if refusal is not None:
            status, message = refusal
            await PlainTextResponse(message, status_code=status)(scope, receive, send)
            return
        await self.app(scope, _bounded(receive), send)

    def _host_refusal(self, headers: Headers) -> tuple[int, str] | None:
        raw = headers.get("host")
        if raw is None:
            return 400, "the request has no Host header: the dashboard answers only its own names"
        host = split_host(raw)
        if host is None:
            return 400, f"Host header {_shown(raw)} is not a host name with an optional port"
        if self.is_allowed(host[0]):
            return None
        more = ", ".join(sorted(self.allowed_hosts))
        return 400, (
            f"host {_shown(host[0])} is not one this dashboard is served as (localhost and "
            f"loopback addresses{', ' + more if more else ''}); add it with --allowed-host or "
            "create_app(allowed_hosts=[...])"
        )

    def _origin_refusal(self, scope: Scope, headers: Headers) -> tuple[int, str] | None:
        host = split_host(headers["host"])  # checked by _host_refusal
        assert host is not None
        scheme = str(scope.get("scheme") or "http")
        own = (scheme, host[0], host[1] or DEFAULT_PORTS.get(scheme, 80))
        shown_own = f"{scheme}://{headers['host']}"
        # The Origin header when the browser sends one, else the Referer.
        for header, is_not in _SOURCE_HEADERS:
            value = headers.get(header)
            if value is not None:
                if origin_of(value) == own:
                    return None
                return 403, (
                    f"cross-origin {scope['method']} refused: {header.title()} {_shown(value)} "
                    f"{is_not} ({shown_own})"
                )
        return 403, (
            f"{scope['method']} refused: it has neither an Origin nor a Referer header to show "
            f"it comes from this dashboard's own pages ({shown_own})"
        )

    @staticmethod
    def _query_refusal(scope: Scope) -> tuple[int, str] | None:
        query = scope.get("query_string", b"").decode("latin-1")
        if "%00" not in query and "\x00" not in query:
            return None
        for name, value in parse_qsl(query, keep_blank_values=True):
            if "\x00" in name or "\x00" in value:
                return 400, (
                    f"the query parameter {_shown(name)} contains a NUL character (\\x00), "
                    "which no name, key or search can hold"
                )
        return None

    @staticmethod
    def _size_refusal(headers: Headers) -> tuple[int, str] | None:
        length = headers.get("content-length", "")
        if length.isascii() and length.isdigit() and int(length[:12]) > MAX_BODY_BYTES:
            return 413, (
                f"the request body is {int(length[:12])} bytes; the dashboard's forms take at "
                f"most {MAX_BODY_BYTES}"
            )
        return None


def _bounded(receive: Receive) -> Receive:
    """``receive`` that stops a body (without a Content-Length) at MAX_BODY_BYTES with a 413."""
    total = 0

    async def receive_bounded() -> Message:
        nonlocal total
        message = await receive()
        if message["type"] == "http.request":
            total += len(message.get("body", b""))
            if total > MAX_BODY_BYTES:
                raise HTTPException(
                    413,
                    f"the request body is over {MAX_BODY_BYTES} bytes, the most the dashboard's "
                    "forms take",
                )
        return message

    return receive_bounded
