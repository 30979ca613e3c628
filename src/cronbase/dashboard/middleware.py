"""The base of the dashboard's own middleware (security headers, doors, authentication, the CSRF
cookie): each acts on HTTP requests only; the server's lifespan messages (and anything else) pass
straight through."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


class HttpMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One HTTP request: answer it, or pass it on to ``self.app``."""
        raise NotImplementedError
