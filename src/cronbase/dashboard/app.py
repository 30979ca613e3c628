"""``create_app(app)``: the dashboard as a Starlette application, to serve or to mount.

Layers, outermost first: security headers on every response, Starlette's own errors included;
the doors (doors.py: the hosts it answers, the origin of a POST, the size of a request);
authentication (who is asking, see auth.py); the CSRF cookie (csrf.py); then the routes:
pages.py (GET) and actions.py (POST).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path

from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..app import App
from ..errors import ConfigurationError
from .actions import Actions
from .auth import AuthMiddleware, Credentials
from .csrf import CsrfCookieMiddleware, CsrfTokens
from .doors import DoorsMiddleware, allowed_host
from .middleware import HttpMiddleware
from .pages import Pages
from .queue_page import QueuePage
from .render import Renderer, where

STATIC = Path(__file__).parent / "static"

# No inline script or style anywhere, so the policy can forbid them: an injected tag cannot run.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
}


class SecurityHeadersMiddleware(HttpMiddleware):
    """The headers above on every response; ``no-store`` on pages and errors."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    if name not in headers:
                        headers[name] = value
                is_page = headers.get("content-type", "").startswith("text/html")
                if is_page or message["status"] >= 400:
                    # Pages are live figures, and an error holds for one request; the static
                    # files may be cached (they revalidate).
                    headers["cache-control"] = "no-store"
            await send(message)

        await self.app(scope, receive, send_with_headers)


class JobIdConvertor(Convertor[int]):
    """A job id in a path: 1 to 19 digits, so a longer one finds no page (404) rather than
    failing in ``int()`` (which refuses more than 4,300 digits) or in the database."""

    regex = "[0-9]{1,19}"

    def convert(self, value: str) -> int:
        return int(value)

    def to_string(self, value: int) -> str:
        return str(int(value))


register_url_convertor("cronbase_job_id", JobIdConvertor())


class Dashboard(Starlette):
    """Starlette with the security headers outside its outermost layer, the one that answers an
    unhandled exception with a 500 (user middleware sits inside it and never sees that answer)."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeadersMiddleware(super().build_middleware_stack())


def create_app(
    app: App,
    *,
    auth: Credentials | None = None,
    allowed_hosts: Iterable[str] = (),
    long_running_after: timedelta = timedelta(minutes=10),
    page_size: int = 50,
    csrf_secret: bytes | None = None,
    debug: bool = False,
) -> Starlette:
    """The dashboard of ``app`` as an ASGI application.

    Without ``auth`` it answers loopback clients only (403 to any other address, and to any
    request that came through a proxy); with :class:`Credentials` every request must present
    them. It answers requests for ``localhost`` and loopback addresses, and for the names and
    addresses in ``allowed_hosts`` (the ``Host`` it is served as, without a port): any other
    ``Host`` is a 400, against DNS rebinding. A POST must come from the dashboard's own origin
    (its ``Origin``, or lacking it its ``Referer``). ``long_running_after`` is the default
    threshold of the "running longer than expected" page. Give ``csrf_secret`` when several
    processes serve one address. The ``App``'s pools stay yours to close.

    >>> from starlette.routing import Mount  # doctest: +SKIP
    >>> hosts = ["ops.example.com"]  # doctest: +SKIP
    >>> dashboard = create_app(app, auth=Credentials(...), allowed_hosts=hosts)  # doctest: +SKIP
    >>> web = Starlette(routes=[Mount("/jobs-admin", dashboard)])  # doctest: +SKIP
    """
    if long_running_after <= timedelta(0):
        raise ConfigurationError(f"long_running_after must be positive, got {long_running_after!r}")
    if page_size < 1:
        raise ConfigurationError(f"page_size must be at least 1, got {page_size}")
    renderer = Renderer(where(app.database_url, app.schema))
    if isinstance(allowed_hosts, str):
        raise ConfigurationError(
            f"allowed_hosts must be a list of host names, got the string {allowed_hosts!r}"
        )
    hosts = [allowed_host(h) for h in allowed_hosts]  # a bad one refused now, not at a request
    doors = Middleware(DoorsMiddleware, allowed_hosts=hosts)
    pages = Pages(app, renderer, long_running_after=long_running_after, page_size=page_size)
    actions = Actions(app, renderer, CsrfTokens(csrf_secret))
    queue_page = QueuePage(app, renderer)
    routes = [
        Route("/", pages.overview, name="overview"),
        Route("/jobs", pages.jobs, name="jobs"),
        Route("/jobs/{job_id:cronbase_job_id}", pages.job, name="job"),
        Route("/jobs/{job_id:cronbase_job_id}/live", pages.job_live, name="job_live"),
        Route("/dead", pages.dead, name="dead"),
        Route("/long-running", pages.long_running, name="long_running"),
        Route("/workers", pages.workers, name="workers"),
        Route("/storage", pages.storage, name="storage"),
        Route("/scheduled", pages.scheduled, name="scheduled"),
        Route("/tasks", pages.tasks, name="tasks"),
        Route("/queue", queue_page.show, name="queue"),
        Route("/schedules", pages.schedules, name="schedules"),
        Route("/effects", pages.effects, name="effects"),
        Route("/audit", pages.audit, name="audit"),
        Route("/metrics", pages.metrics, name="metrics"),
        Route(
            "/jobs/{job_id:cronbase_job_id}/retry",
            actions.retry_job,
            methods=["POST"],
            name="retry_job",
        ),
        Route(
            "/jobs/{job_id:cronbase_job_id}/cancel",
            actions.cancel_job,
            methods=["POST"],
            name="cancel_job",
        ),
        Route("/dead/requeue", actions.requeue_dead, methods=["POST"], name="requeue_dead"),
        Route("/jobs/bulk", actions.bulk_jobs, methods=["POST"], name="bulk_jobs"),
        Route("/queues/pause", actions.pause_queue, methods=["POST"], name="pause_queue"),
        Route("/queues/resume", actions.resume_queue, methods=["POST"], name="resume_queue"),
        Route("/queues/limit", actions.limit_queue, methods=["POST"], name="limit_queue"),
        Route("/queues/rate", actions.rate_queue, methods=["POST"], name="rate_queue"),
        Route("/queues/aging", actions.age_queue, methods=["POST"], name="age_queue"),
        Route("/schedules/pause", actions.pause_schedule, methods=["POST"], name="pause_schedule"),
        Route(
            "/schedules/resume", actions.resume_schedule, methods=["POST"], name="resume_schedule"
        ),
        Route("/schedules/run-now", actions.run_schedule, methods=["POST"], name="run_schedule"),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = [
        doors,
        Middleware(AuthMiddleware, credentials=auth),
        Middleware(CsrfCookieMiddleware, tokens=actions.tokens),
    ]
    return Dashboard(
        debug=debug,
        routes=routes,
        middleware=middleware,
        exception_handlers=renderer.exception_handlers(),
    )
