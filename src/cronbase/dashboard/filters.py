"""How the templates show values: times, durations, JSON, tracebacks (pure functions)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from ..durations import duration_text
from ..operations.storage import human_bytes
from ..records import Encrypted, UndecodableJSON

TRACEBACK_LINES = 30  # the last lines of a traceback shown at first; the rest on demand


def when(moment: datetime | None) -> str:
    """A UTC time for people, to the second."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if moment else ""


def duration(value: timedelta | float | None) -> str:
    """``850 ms``, ``12.3 s``, ``4 min 05 s``, ``2 h 03 min``, ``3 d 4 h``; empty for None."""
    if value is None:
        return ""
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60:02d} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


def since(moment: datetime | None, now: datetime | None = None) -> str:
    """How long ago ``moment`` was (``duration``), empty for None."""
    if moment is None:
        return ""
    return duration((now or datetime.now(UTC)) - moment)


def until(moment: datetime | None, now: datetime | None = None) -> str:
    """How long until ``moment`` (``in 4 min 05 s``), ``due`` once it has come; empty for None."""
    if moment is None:
        return ""
    left = moment - (now or datetime.now(UTC))
    return "due" if left <= timedelta(0) else f"in {duration(left)}"


def relative(moment: datetime | None, now: datetime | None = None) -> str:
    """``3 min 05 s ago`` or ``in 4 min 05 s`` (the absolute time goes in the title)."""
    if moment is None:
        return ""
    gap = moment - (now or datetime.now(UTC))
    if abs(gap) < timedelta(seconds=1):
        return "now"
    return f"in {duration(gap)}" if gap > timedelta(0) else f"{duration(-gap)} ago"


def took(job: Any, now: datetime | None = None) -> str:
    """How long a job's last attempt ran (so far, while it runs); empty before it started."""
    if job.started_at is None:
        return ""
    end = job.finished_at if job.finished_at is not None else None
    if end is None and job.status.value != "running":
        return ""
    return duration((end or now or datetime.now(UTC)) - job.started_at)


def pretty_json(value: Any) -> str:
    if isinstance(
        value, UndecodableJSON | Encrypted
    ):  # marked, its start only: it may be a megabyte
        return str(value)
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def compact_json(value: Any) -> str:
    if isinstance(value, UndecodableJSON | Encrypted):
        return str(value)
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


PREVIEW = 60  # characters of a payload or result shown in a table's cell
PREVIEW_TITLE = 300  # and in its tooltip
_PREVIEW_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": "), default=str)


def preview(value: Any, limit: int = PREVIEW) -> str:
    """The start of ``value``'s compact JSON, at most ``limit`` characters, "…" when cut.

    Encoded piece by piece and stopped at the limit: a list page shows 50 payloads of up to
    1 MiB each, and neither the page nor the work to make it should grow with them.
    """
    if isinstance(value, UndecodableJSON | Encrypted):
        return shorten(str(value), limit)
    pieces: list[str] = []
    size = 0
    for piece in _PREVIEW_ENCODER.iterencode(value):
        pieces.append(piece)
        size += len(piece)
        if size > limit * 2:  # room for the spaces shorten() folds
            break
    return shorten("".join(pieces), limit)


def shorten(text: str | None, limit: int = 120) -> str:
    if not text:
        return ""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def trim_traceback(text: str | None, keep: int = TRACEBACK_LINES) -> tuple[str, int]:
    """The last ``keep`` lines of a traceback (where the error is) and how many were left out."""
    if not text:
        return "", 0
    lines = text.rstrip().splitlines()
    if len(lines) <= keep:
        return "\n".join(lines), 0
    return "\n".join(lines[-keep:]), len(lines) - keep


FILTERS = {
    "when": when,
    "duration": duration,
    "span_text": duration_text,
    "since": since,
    "until": until,
    "relative": relative,
    "took": took,
    "pretty_json": pretty_json,
    "compact_json": compact_json,
    "shorten": shorten,
    "preview": preview,
    "bytes": human_bytes,
}


def ago(moment: datetime | None, now: datetime | None = None) -> str:
    """Coarse and human: ``12 s ago``, ``21 min ago``, ``3 h ago``, ``2 d ago`` (``in 21 min``
    ahead); seconds only under a minute, ``now`` under one; empty for None. The exact time goes
    in the title (``when``)."""
    if moment is None:
        return ""
    gap = (moment - (now or datetime.now(UTC))).total_seconds()
    whole = int(abs(gap))
    if whole < 1:
        return "now"
    if whole < 60:
        amount = f"{whole} s"
    elif whole < 3600:
        amount = f"{whole // 60} min"
    elif whole < 86400:
        amount = f"{whole // 3600} h"
    else:
        amount = f"{whole // 86400} d"
    return f"in {amount}" if gap > 0 else f"{amount} ago"
