"""CSRF protection for the dashboard's actions: a signed token in a cookie, echoed by each POST.

Every page carries the token of the browser's cookie (a hidden form field, and an
``X-CSRF-Token`` header on htmx requests). A POST is admitted when the echoed token equals the
cookie's and the cookie's signature is ours: another site can make a browser send the cookie,
but cannot read it to echo it, and cannot plant a cookie of its own (from a sibling subdomain,
say) because it cannot sign one. The cookie is ``SameSite=Strict`` besides, and doors.py refuses
a POST from another origin before this check runs (so a proxy must pass on the ``Host`` the
browser asked for). The secret is made per process unless one is given (several processes behind
one address need the same).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from http.cookies import SimpleCookie

from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .inputs import form
from .middleware import HttpMiddleware

COOKIE = "cronbase_csrf"
FIELD = "csrf_token"
HEADER = "x-csrf-token"
TOKEN_KEY = "cronbase.csrf"


class CsrfTokens:
    """Makes and checks tokens ``<nonce>.<hmac-sha256(secret, nonce)>``."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    def _sign(self, nonce: str) -> str:
        return hmac.new(self._secret, nonce.encode("ascii"), hashlib.sha256).hexdigest()

    def new(self) -> str:
        nonce = secrets.token_urlsafe(24)
        return f"{nonce}.{self._sign(nonce)}"

    def is_ours(self, token: str) -> bool:
        nonce, _, signature = token.partition(".")
        if not nonce or not signature or not nonce.isascii():
            return False
        return hmac.compare_digest(signature.encode("ascii", "replace"), self._sign(nonce).encode())

    async def check(self, request: Request) -> None:
        """Refuse (403) a state-changing request that does not prove it came from our page."""
        cookie = request.cookies.get(COOKIE, "")
        echoed = request.headers.get(HEADER)
        if echoed is None:
            field = (await form(request)).get(FIELD)
            echoed = field if isinstance(field, str) else ""
        same = hmac.compare_digest(cookie.encode("utf-8"), echoed.encode("utf-8"))
        if not (cookie and same and self.is_ours(cookie)):
            raise HTTPException(403, "missing or stale CSRF token: reload the page and try again")


def token(connection: HTTPConnection) -> str:
    """The token a page must carry (the cookie's, or the one the middleware is about to set)."""
    return str(connection.scope[TOKEN_KEY])


class CsrfCookieMiddleware(HttpMiddleware):
    """Give every browser a signed token cookie, replacing a missing or foreign one."""

    def __init__(self, app: ASGIApp, tokens: CsrfTokens) -> None:
        super().__init__(app)
        self.tokens = tokens

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        current = HTTPConnection(scope).cookies.get(COOKIE, "")
        if current and self.tokens.is_ours(current):
            scope[TOKEN_KEY] = current
            await self.app(scope, receive, send)
            return
        fresh = scope[TOKEN_KEY] = self.tokens.new()
        cookie: SimpleCookie = SimpleCookie()
        cookie[COOKIE] = fresh
        morsel = cookie[COOKIE]
        morsel["path"] = (scope.get("root_path") or "") + "/"
        morsel["httponly"] = True
        morsel["samesite"] = "Strict"
        if scope.get("scheme") == "https":
            morsel["secure"] = True
        header = morsel.OutputString()

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).append("set-cookie", header)
            await send(message)

        await self.app(scope, receive, send_with_cookie)
