"""Rendering pages: the Jinja2 environment (autoescape on), what every page gets, error pages.

Every error is a page (or, for an htmx request, a line in the page's flash area) with one line
that names the bad value; the security headers are added around all of them (app.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolTimeout
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.templating import Jinja2Templates
from starlette.types import ExceptionHandler

from ..errors import DatabaseUnavailableError, DatabaseURLError
from . import filters
from .auth import actor
from .csrf import FIELD, token

logger = logging.getLogger("cronbase")

TEMPLATES = Path(__file__).parent / "templates"

# What ?done= after an action may say: fixed texts, so a link cannot put words on the page.
NOTICES = {
    "retried": "Job queued again; it runs as soon as a worker is free.",
    "cancelled": "Job cancelled.",
    "requeued": "{count} dead job(s) queued again.",
    "queue-paused": "Queue paused: workers take no more of its jobs until it is resumed.",
    "queue-resumed": "Queue resumed.",
    "queue-limited": "Queue limit saved: it holds for all workers from their next claim.",
    "queue-rated": "Queue rate saved: it holds for all workers from their next claim.",
    "queue-aged": "Queue aging saved: workers apply it from their next reaper round.",
    "schedule-paused": "Schedule paused: its slots are skipped until it is resumed.",
    "schedule-resumed": "Schedule resumed from its next slot.",
    "schedule-run": "The schedule's job was enqueued to run now; its slots stay as they were.",
    "bulk-retry": "{count} job(s) queued again; {refused} refused (see the audit log).",
    "bulk-cancel": "{count} job(s) cancelled; {refused} refused (see the audit log).",
    "bulk-delete": "{count} job(s) deleted; {refused} refused (see the audit log).",
}


def route_path(request: Request, name: str, /, **params: Any) -> str:
    """The path of one of the dashboard's routes, under the prefix it is mounted at.

    Looked up in the dashboard's own router: ``request.url_for`` would ask the outermost
    application's router, which names the dashboard's routes differently when it is mounted.
    """
    path = request.app.router.url_path_for(name, **params)
    return str(request.scope.get("root_path", "")).rstrip("/") + str(path)


@jinja2.pass_context
def path_for(context: Mapping[str, Any], name: str, /, **params: Any) -> str:
    return route_path(context["request"], name, **params)


def query(**params: Any) -> str:
    """``?a=1&b=2`` of the parameters that have a value (empty when none)."""
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return "?" + urlencode(kept) if kept else ""


def is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def notice(request: Request) -> str | None:
    text = NOTICES.get(request.query_params.get("done", ""))
    if text is None:
        return None
    numbers = {
        name: int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else 0
        for name in ("count", "refused")
        for value in [request.query_params.get(name, "0")]
    }
    return text.format(**numbers)


def where(url: str, schema: str) -> str:
    """Which database and schema the pages show, for the header (no user, no password)."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return f"schema {schema}"
    host = str(parts.get("host") or "local socket")
    if host.startswith("/"):
        host = "local socket"
    port = parts.get("port")
    at = f"{host}:{port}" if port else host
    return f"schema {schema} · database {parts.get('dbname') or '?'} on {at}"


class Renderer:
    def __init__(self, where: str = "") -> None:
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(TEMPLATES),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        env.filters.update(filters.FILTERS)
        env.filters["ago"] = filters.ago  # coarse: "21 min ago" (relative keeps the seconds)
        env.globals.update(path_for=path_for, query=query, csrf_field=FIELD, where=where)
        self.templates = Jinja2Templates(env=env)

    def page(
        self, request: Request, name: str, context: dict[str, Any], status_code: int = 200
    ) -> Response:
        shown = {
            "csrf_token": token(request),
            "actor": actor(request),
            "notice": notice(request),
            "section": "",
            **context,
        }
        return self.templates.TemplateResponse(request, name, shown, status_code=status_code)

    def error(
        self,
        request: Request,
        status_code: int,
        message: str,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """An error: a page, or for an htmx action a message put in the page's flash area."""
        if is_htmx(request):
            html = self.templates.get_template("_flash.html").render(message=message)
            # HX-Reselect: a polling region's own hx-select would find nothing in the message.
            flash = {"HX-Retarget": "#flash", "HX-Reswap": "innerHTML", "HX-Reselect": "p.error"}
            return HTMLResponse(html, headers={**(headers or {}), **flash})
        context = {"status": status_code, "message": message}
        response = self.page(request, "error.html", context, status_code)
        response.headers.update(headers or {})
        return response

    def exception_handlers(self) -> dict[Any, ExceptionHandler]:
        async def http_error(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, HTTPException)
            return self.error(request, exc.status_code, exc.detail, exc.headers)

        async def refused_data(request: Request, exc: Exception) -> Response:
            # The values that reach SQL are checked where they come in (inputs.py, doors.py);
            # this is the net under them: a value the database refuses as data (SQLSTATE 22) is
            # the request's fault, a 400 that names it, not a 500.
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            logger.warning(
                "dashboard: %s %s: the database refused a value: %s",
                request.method,
                request.url.path,
                reason,
            )
            return self.error(request, 400, f"the database refused a value: {reason}")

        async def server_error(request: Request, exc: Exception) -> Response:
            # Runs in Starlette's outermost layer, which logs the traceback after it: a plain
            # response, so that a template or a middleware that failed is not needed again.
            return PlainTextResponse(
                "500 Internal Server Error: the dashboard failed on this request; the server's "
                "log has the traceback",
                status_code=500,
            )

        async def database_down(request: Request, exc: Exception) -> Response:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            if is_htmx(request):  # a live part's refresh: keep the page, say so in the flash
                return self.error(request, 503, f"database unreachable, retrying: {reason}")
            # A path, not a URL: the page asks its own origin again, whatever Host said.
            retry_url = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            context = {"status": 503, "message": reason, "retry_url": retry_url}
            return self.page(request, "unreachable.html", context, 503)

        return {
            HTTPException: http_error,
            psycopg.DataError: refused_data,
            Exception: server_error,
            psycopg.OperationalError: database_down,
            PoolTimeout: database_down,
            DatabaseURLError: database_down,
            DatabaseUnavailableError: database_down,
        }
