"""Who may use the dashboard: basic auth or a bearer token, or, with neither, loopback clients only.

The middleware decides who the caller is before any page runs and stores it in the ASGI scope
as the *actor* the audit log names: the basic-auth user, ``token@<client ip>``, or, without
credentials, ``dashboard@<client ip>`` (a loopback address).

Loopback trust is decided from the connection, never from a header, and a request that names a
proxy in its headers is not trusted at all: a server that believes ``X-Forwarded-For`` (uvicorn
does, from 127.0.0.1 by default) writes the header's address into the connection's, and a proxy
on this machine makes every client's connection come from 127.0.0.1.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass

from starlette.requests import HTTPConnection
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import ConfigurationError
from .middleware import HttpMiddleware

ACTOR_KEY = "cronbase.actor"
ENV_USER = "CRONBASE_DASHBOARD_USER"
ENV_PASSWORD = "CRONBASE_DASHBOARD_PASSWORD"
ENV_TOKEN = "CRONBASE_DASHBOARD_TOKEN"
REALM = 'Basic realm="cronbase dashboard", charset="UTF-8"'
MIN_SECRET_LENGTH = 16  # of a token or a password: they are tried online, with no lockout
# Headers a proxy adds: a request carrying one came through a proxy, so its connection's address
# (the proxy's, or one a server took from the header) says nothing of where the client is.
PROXY_HEADERS = (
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-real-ip",
    "x-client-ip",
    "true-client-ip",
    "cf-connecting-ip",
)


@dataclass(frozen=True)
class Credentials:
    """What a caller must present: a user and password (basic auth), a token, or either.

    A token is accepted as ``Authorization: Bearer <token>`` and, so that a browser can log in
    with it, as the password of basic auth with any user name.

    >>> Credentials(user="ops", password="correct horse battery")  # doctest: +SKIP
    >>> Credentials.from_env()  # CRONBASE_DASHBOARD_USER / _PASSWORD / _TOKEN  # doctest: +SKIP
    """

    user: str | None = None
    password: str | None = None
    token: str | None = None

    def __post_init__(self) -> None:
        if (self.user is None) != (self.password is None):
            given, missing = ("user", "password") if self.user is not None else ("password", "user")
            raise ConfigurationError(
                f"dashboard credentials: a {given} without a {missing}; give both "
                f"({ENV_USER} and {ENV_PASSWORD}), or a token ({ENV_TOKEN})"
            )
        for name, value in (("user", self.user), ("password", self.password)):
            if value == "":
                raise ConfigurationError(f"dashboard credentials: the {name} is empty")
        if self.user is not None and ":" in self.user:
            raise ConfigurationError(
                f"dashboard user {self.user!r} contains ':', which basic auth cannot carry"
            )
        for name, value in (("token", self.token), ("password", self.password)):
            if value is not None and len(value) < MIN_SECRET_LENGTH:
                raise ConfigurationError(
                    f"dashboard {name} is {len(value)} characters; use at least "
                    f"{MIN_SECRET_LENGTH} (e.g. python -c 'import secrets; "
                    "print(secrets.token_urlsafe(32))')"
                )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Credentials | None:
        """Credentials from the environment variables, or None when none is set."""
        env = os.environ if environ is None else environ
        user, password, token = (env.get(n) or None for n in (ENV_USER, ENV_PASSWORD, ENV_TOKEN))
        if user is None and password is None and token is None:
            return None
        return cls(user=user, password=password, token=token)

    def actor_for(self, authorization: str, client: str) -> str | None:
        """The actor these credentials admit for an ``Authorization`` header, or None."""
        scheme, _, value = authorization.strip().partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer" and self.token is not None:
            return f"token@{client}" if _same(value, self.token) else None
        if scheme.lower() != "basic":
            return None
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, sep, password = decoded.partition(":")
        if not sep:
            return None
        # Both compared whatever the first says (&, not and): timing tells nothing of the user.
        if (
            self.user is not None
            and self.password is not None
            and _same(user, self.user) & _same(password, self.password)
        ):
            return self.user
        if self.token is not None and _same(password, self.token):
            return f"token@{client}"
        return None


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def is_loopback_host(host: str) -> bool:
    """Whether binding ``host`` serves this machine only (127.0.0.0/8, ::1, localhost)."""
    host = host.lower().rstrip(".")
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False  # another host name: it may resolve to any interface
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def actor(connection: HTTPConnection) -> str:
    """The actor the middleware admitted for this request."""
    return str(connection.scope[ACTOR_KEY])


class AuthMiddleware(HttpMiddleware):
    """Admit a request (and name its actor) or answer 401/403 before any page runs."""

    def __init__(self, app: ASGIApp, credentials: Credentials | None) -> None:
        super().__init__(app)
        self.credentials = credentials

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        connection = HTTPConnection(scope)
        client = connection.client.host if connection.client else "unknown"
        refusal: Response | None = None
        if self.credentials is None:
            proxied = next((h for h in PROXY_HEADERS if h in connection.headers), None)
            if proxied is not None:
                refusal = PlainTextResponse(
                    f"this dashboard has no credentials configured, and the request came "
                    f"through a proxy (its {proxied} header), so it cannot tell whether the "
                    "client is on this machine; configure a user and password or a token",
                    status_code=403,
                )
            elif is_loopback_host(client):
                scope[ACTOR_KEY] = f"dashboard@{client}"
            else:
                refusal = PlainTextResponse(
                    "this dashboard has no credentials configured, so it serves only this "
                    "machine (loopback clients); configure a user and password or a token",
                    status_code=403,
                )
        else:
            found = self.credentials.actor_for(connection.headers.get("authorization", ""), client)
            if found is not None:
                scope[ACTOR_KEY] = found
            else:
                refusal = PlainTextResponse(
                    "authentication required",
                    status_code=401,
                    headers={"WWW-Authenticate": REALM},
                )
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)
