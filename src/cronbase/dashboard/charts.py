"""The overview's throughput chart: attempts per minute over the last hour, as inline SVG.

Drawn on the server from :attr:`cronbase.operations.stats.Overview.minutes` (no JavaScript, no chart
library): one stacked bar per minute, succeeded below, failed (retrying, dead or lost) above.
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

from ..operations.stats import Minute

WIDTH = 720
HEIGHT = 140
AXIS = 28  # room on the left for the scale
BOTTOM = 18  # room below for the time labels


def throughput_svg(minutes: Sequence[Minute]) -> Markup:
    """An ``<svg>`` element; every text in it is escaped."""
    peak = max((m.succeeded + m.failed for m in minutes), default=0)
    scale = max(peak, 1)
    plot_h = HEIGHT - BOTTOM - 4
    slot = (WIDTH - AXIS) / max(len(minutes), 1)
    bar = max(slot - 2, 1)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        'role="img" xmlns="http://www.w3.org/2000/svg" '
        f'aria-label="attempts per minute over the last hour, at most {peak} in a minute">',
        f'<line class="axis" x1="{AXIS}" y1="{plot_h + 4}" x2="{WIDTH}" y2="{plot_h + 4}"/>',
        f'<text class="label" x="{AXIS - 4}" y="12" text-anchor="end">{peak}</text>',
        f'<text class="label" x="{AXIS - 4}" y="{plot_h / 2 + 8:.0f}" text-anchor="end">'
        f"{peak / 2:g}</text>",
        f'<text class="label" x="{AXIS - 4}" y="{plot_h + 4}" text-anchor="end">0</text>',
        f'<text class="label axis-title" x="{AXIS + 4}" y="12">attempts per minute</text>',
    ]
    for i, minute in enumerate(minutes):
        x = AXIS + i * slot + 1
        ok_h = plot_h * minute.succeeded / scale
        bad_h = plot_h * minute.failed / scale
        title = escape(
            f"{minute.start:%H:%M} UTC: {minute.succeeded} succeeded, {minute.failed} failed"
        )
        parts.append(f"<g><title>{title}</title>")
        # An invisible full-height bar, so hovering an empty minute shows its title too.
        parts.append(
            f'<rect class="hover" x="{x:.1f}" y="4" width="{bar:.1f}" height="{plot_h:.1f}"/>'
        )
        if ok_h:
            y = plot_h + 4 - ok_h
            parts.append(
                f'<rect class="succeeded" x="{x:.1f}" y="{y:.1f}" '
                f'width="{bar:.1f}" height="{ok_h:.1f}"/>'
            )
        if bad_h:
            y = plot_h + 4 - ok_h - bad_h
            parts.append(
                f'<rect class="failed" x="{x:.1f}" y="{y:.1f}" '
                f'width="{bar:.1f}" height="{bad_h:.1f}"/>'
            )
        parts.append("</g>")
    # The time axis: a tick and a label every ten minutes (UTC), the first one with its zone.
    for i, minute in enumerate(minutes):
        if minute.start.minute % 10:
            continue
        x = AXIS + i * slot + slot / 2
        zone = " UTC" if not any(m.start.minute % 10 == 0 for m in minutes[:i]) else ""
        parts.append(
            f'<line class="axis" x1="{x:.1f}" y1="{plot_h + 4}" x2="{x:.1f}" y2="{plot_h + 8}"/>'
            f'<text class="label" x="{x:.1f}" y="{HEIGHT - 4}" text-anchor="middle">'
            f"{minute.start:%H:%M}{zone}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))  # numbers and escaped text only
