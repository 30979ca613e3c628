"""The queue page's charts: lines over the last hour or day, as inline SVG drawn on the server
(no JavaScript, no chart library), with the overview chart's whole-number scale and labels kept
inside the picture (charts.py).

A span no worker rolled up has no point: its line breaks there rather than drawing a zero that
was never measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from markupsafe import Markup, escape

from .charts import BOTTOM, HEIGHT, RIGHT, TOP, WIDTH, axis_width, label_width, nice_ticks, y_axis


@dataclass(frozen=True)
class Line:
    """One series: its values in the chart's whole unit (jobs, milliseconds), None where it has
    no value (no attempt started, so no wait to show)."""

    name: str
    css: str  # the stylesheet's class: its colour
    values: Sequence[float | None]


def _segments(xs: Sequence[float], ys: Sequence[float | None]) -> list[list[tuple[float, float]]]:
    runs: list[list[tuple[float, float]]] = [[]]
    for x, y in zip(xs, ys, strict=True):
        if y is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((x, y))
    return [r for r in runs if r]


def lines_svg(
    start: datetime,
    span: timedelta,
    times: Sequence[datetime],
    lines: Sequence[Line],
    title: str,
    label: Callable[[int], str] = str,
) -> Markup:
    """An ``<svg>`` of ``lines`` over ``start`` to ``start + span``, one point per time in
    ``times``; ``label`` writes a tick's value (``250 ms`` for a wait). Text is escaped."""
    peak = max((v for line in lines for v in line.values if v is not None), default=0)
    ticks = nice_ticks(math.ceil(peak))
    scale = ticks[-1]
    axis = axis_width(ticks, label)
    plot_h = HEIGHT - TOP - BOTTOM
    base = TOP + plot_h
    plot_w = WIDTH - axis - RIGHT
    seconds = span.total_seconds()

    def x_of(moment: datetime) -> float:
        return axis + plot_w * min(max((moment - start).total_seconds() / seconds, 0.0), 1.0)

    parts = [
        f'<svg class="chart lines" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" preserveAspectRatio="xMinYMin meet" role="img" '
        f'xmlns="http://www.w3.org/2000/svg" aria-label="{escape(title)}">',
        f'<text class="label axis-title" x="{axis}" y="13">{escape(title)}</text>',
    ]
    parts.append(y_axis(ticks, axis, label))
    xs = [x_of(t) for t in times]
    for line in lines:
        for run in _segments(xs, line.values):
            points = " ".join(f"{x:.1f},{base - plot_h * y / scale:.1f}" for x, y in run)
            if len(run) == 1:  # a lone point: a dot, where a polyline would draw nothing
                x, y = run[0]
                parts.append(
                    f'<circle class="line {line.css}" cx="{x:.1f}" '
                    f'cy="{base - plot_h * y / scale:.1f}" r="2"/>'
                )
            else:
                parts.append(f'<polyline class="line {line.css}" points="{points}"/>')
    # Time labels: every 10 minutes of an hour, every 3 hours of a day (UTC, said once).
    every = timedelta(minutes=10) if span <= timedelta(hours=2) else timedelta(hours=3)
    step = every.total_seconds()
    first = math.ceil(start.timestamp() / step) * step
    tick_at = first
    said_zone = False
    while tick_at <= start.timestamp() + seconds:
        moment = start + timedelta(seconds=tick_at - start.timestamp())
        x = x_of(moment)
        text = f"{moment:%H:%M}" + ("" if said_zone else " UTC")
        said_zone = True
        half = label_width(text) / 2
        at = min(max(x, axis + half), WIDTH - half - 1)
        parts.append(
            f'<line class="axis" x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 4}"/>'
            f'<text class="label" x="{at:.1f}" y="{HEIGHT - 4}" text-anchor="middle">'
            f"{text}</text>"
        )
        tick_at += step
    parts.append("</svg>")
    return Markup("".join(parts))  # numbers and escaped text only
