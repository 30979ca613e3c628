"""The queue page (``/queue?name=...``): a queue's depth, running jobs, pickup waits (p50, p95)
and attempts started, over the last hour or day, from the minutes the workers roll up
(operations/queue_minutes.py). It reloads itself while open."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..app import App
from ..checks import check_key
from ..errors import InvalidNameError
from ..operations.queue_minutes import SPANS, QueuePoint
from .filters import duration
from .queue_charts import Line, lines_svg
from .render import Renderer


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _wait_label(ms: int) -> str:
    return duration(ms / 1000) if ms else "0"


class QueuePage:
    def __init__(self, app: App, renderer: Renderer) -> None:
        self.app = app
        self.renderer = renderer

    async def show(self, request: Request) -> Response:
        # In the query, not the path: a queue written by other SQL may hold a slash, a "?" or
        # anything else, which query() encodes.
        name = request.query_params.get("name") or ""
        try:
            check_key("queue", name)
        except InvalidNameError as exc:
            raise HTTPException(400, str(exc)) from None
        span = request.query_params.get("span") or "1h"
        if span not in SPANS:
            raise HTTPException(400, f"span must be one of {', '.join(SPANS)}, got {span!r}")
        window, step = SPANS[span]
        points = await self.app.queues.minutes_async(name, window=window, step=step)
        start = datetime.now(UTC) - window
        context = {
            "section": "overview",
            "queue": name,
            "span": span,
            "spans": list(SPANS),
            "step_minutes": int(step.total_seconds() // 60),
            "points": points,
            "last": points[-1] if points else None,
            "started": sum(p.started for p in points),
            "charts": self._charts(start, window, step, points),
        }
        return self.renderer.page(request, "queue.html", context)

    @staticmethod
    def _charts(
        start: datetime, window: timedelta, step: timedelta, points: list[QueuePoint]
    ) -> list[object]:
        # Every span of the window, so a span with no point breaks the lines (None); each
        # drawn at its middle.
        found = {p.at: p for p in points}
        starts: list[datetime] = []
        at = points[0].at if points else start  # the spans are aligned on the points'
        while at - step >= start:
            at -= step
        while at <= start + window:
            starts.append(at)
            at += step
        spans = [found.get(at) for at in starts]
        times = [at + step / 2 for at in starts]
        per_minute = step.total_seconds() / 60

        def values(read: Callable[[QueuePoint], float | None]) -> list[float | None]:
            return [None if p is None else read(p) for p in spans]

        return [
            lines_svg(
                start,
                window,
                times,
                [
                    Line("due", "due", values(lambda p: p.due)),
                    Line("running", "running", values(lambda p: p.running)),
                ],
                "jobs due and running",
            ),
            lines_svg(
                start,
                window,
                times,
                [
                    Line("p50", "p50", values(lambda p: _ms(p.wait_p50))),
                    Line("p95", "p95", values(lambda p: _ms(p.wait_p95))),
                ],
                "pickup wait of the attempts started (p50, p95)",
                _wait_label,
            ),
            lines_svg(
                start,
                window,
                times,
                [Line("started", "started", values(lambda p: p.started / per_minute))],
                "attempts started per minute",
            ),
        ]
