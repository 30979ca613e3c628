"""The overview's throughput chart: attempts per minute over the last hour, as inline SVG.

Drawn on the server from :attr:`cronbase.operations.stats.Overview.minutes` (no JavaScript, no chart
library): one stacked bar per minute, succeeded below, failed (retrying, dead or lost) above.
The scale has "nice" whole steps (1, 2 or 5 times a power of ten: attempts come whole), and
every label is kept inside the viewBox, whose width the page scales to the screen.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from markupsafe import Markup, escape

from ..operations.stats import Minute

WIDTH = 720
HEIGHT = 150
TOP = 20  # room above the plot for the top label and the axis title
BOTTOM = 20  # room below for the time labels
RIGHT = 4
# A generous width of one character of a label, at the largest size the stylesheet gives them
# (14px, on a phone, where the picture is drawn at about half size): digits are 0.6 to 0.64 em.
CHAR = 9.1
MOST_STEPS = 4  # at most this many steps from 0 to the top of the scale


def nice_ticks(peak: int, most: int = MOST_STEPS) -> list[int]:
    """The scale's ticks for a highest bar of ``peak``: whole numbers from 0, a step of 1, 2 or
    5 times a power of ten, the last one at or above ``peak``, at most ``most`` steps."""
    if peak <= 0:
        return [0, 1]
    power = 1
    while True:
        for factor in (1, 2, 5):
            step = factor * power
            steps = math.ceil(peak / step)
            if steps <= most:
                return [step * i for i in range(steps + 1)]
        power *= 10


def label_width(text: str) -> float:
    return len(text) * CHAR


def axis_width(ticks: list[int], label: Callable[[int], str] = str) -> int:
    """Room left of the plot for the longest tick label."""
    return math.ceil(max(label_width(label(t)) for t in ticks)) + 10


def y_axis(ticks: list[int], axis: int, label: Callable[[int], str] = str) -> str:
    """The scale: a line and a label per tick (the zero line solid, the others faint), from the
    zero line at the plot's bottom to the last tick at its top. Labels escaped."""
    plot_h = HEIGHT - TOP - BOTTOM
    parts = []
    for tick in ticks:
        y = TOP + plot_h - plot_h * tick / ticks[-1]
        parts.append(
            f'<line class="{"axis" if tick == 0 else "grid"}" x1="{axis}" y1="{y:.1f}" '
            f'x2="{WIDTH - RIGHT}" y2="{y:.1f}"/>'
            f'<text class="label" x="{axis - 4}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(label(tick))}</text>"
        )
    return "".join(parts)


def throughput_svg(minutes: Sequence[Minute]) -> Markup:
    """An ``<svg>`` element; every text in it is escaped."""
    peak = max((m.succeeded + m.failed for m in minutes), default=0)
    ticks = nice_ticks(peak)
    scale = ticks[-1]
    axis = axis_width(ticks)
    plot_h = HEIGHT - TOP - BOTTOM
    base = TOP + plot_h  # y of the zero line
    slot = (WIDTH - axis - RIGHT) / max(len(minutes), 1)
    bar = max(slot - 2, 1)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        'preserveAspectRatio="xMinYMin meet" role="img" xmlns="http://www.w3.org/2000/svg" '
        f'aria-label="attempts per minute over the last hour, at most {peak} in a minute">',
    ]
    parts.append(y_axis(ticks, axis))
    parts.append(f'<text class="label axis-title" x="{axis}" y="13">attempts per minute</text>')
    for i, minute in enumerate(minutes):
        x = axis + i * slot + 1
        ok_h = plot_h * minute.succeeded / scale
        bad_h = plot_h * minute.failed / scale
        title = escape(
            f"{minute.start:%H:%M} UTC: {minute.succeeded} attempts succeeded, "
            f"{minute.failed} attempts failed"
        )
        parts.append(f"<g><title>{title}</title>")
        # An invisible full-height bar, so hovering an empty minute shows its title too.
        parts.append(
            f'<rect class="hover" x="{x:.1f}" y="{TOP}" width="{bar:.1f}" height="{plot_h:.1f}"/>'
        )
        if ok_h:
            y = base - ok_h
            parts.append(
                f'<rect class="succeeded" x="{x:.1f}" y="{y:.1f}" '
                f'width="{bar:.1f}" height="{ok_h:.1f}"/>'
            )
        if bad_h:
            y = base - ok_h - bad_h
            parts.append(
                f'<rect class="failed" x="{x:.1f}" y="{y:.1f}" '
                f'width="{bar:.1f}" height="{bad_h:.1f}"/>'
            )
        parts.append("</g>")
    # The time axis: a tick and a label every ten minutes (UTC), the first one with its zone;
    # a label near an edge is moved in, so that it stays inside the picture.
    for i, minute in enumerate(minutes):
        if minute.start.minute % 10:
            continue
        x = axis + i * slot + slot / 2
        zone = " UTC" if not any(m.start.minute % 10 == 0 for m in minutes[:i]) else ""
        text = f"{minute.start:%H:%M}{zone}"
        half = label_width(text) / 2
        at = min(max(x, half + 1), WIDTH - half - 1)
        parts.append(
            f'<line class="axis" x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 4}"/>'
            f'<text class="label" x="{at:.1f}" y="{HEIGHT - 4}" text-anchor="middle">'
            f"{text}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))  # numbers and escaped text only
