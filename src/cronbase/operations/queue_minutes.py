"""Each queue's minute by minute (migration 0022, ``db/sql/queue_minutes.sql``): its depth and
running jobs, the attempts it started and their pickup waits (start minus due time), for the
console's queue page and :meth:`cronbase.operations.queues.Queues.minutes`.

One worker a minute writes the fleet's rows (``worker/rollup.py``): nothing on the claim or the
completion path. Waits are stored as counts per bucket of :data:`WAIT_BOUNDS`, so a percentile
over any span of minutes comes from their summed counts (:func:`percentile`), to within the
bucket that holds it.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..checks import check_key
from ..db.database import Row
from ..db.queries import lock_key
from ..db.steps import drive, drive_async
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..db.database import Database

# Pickup wait buckets, in seconds: waits[0] is below the first bound, waits[i] from bound i - 1
# to bound i, the last at or above an hour. Fine below a second, where a healthy queue lives.
WAIT_BOUNDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
KEEP = timedelta(days=8)  # a week's page and a day to spare
# The console's spans: how far back, and how many minutes a point sums.
SPANS = {
    "1h": (timedelta(hours=1), timedelta(minutes=1)),
    "1d": (timedelta(days=1), timedelta(minutes=15)),
}

Step = tuple[bytes, dict[str, Any]]


def roll_up_params(db: Database) -> dict[str, Any]:
    """The parameters of mark_queue_minute (its advisory lock key) and roll_up_queue_minute."""
    return {"key": lock_key(db.schema, "queue-minutes"), "bounds": list(WAIT_BOUNDS), "keep": KEEP}


def percentile(waits: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0 to 1) of the waits counted in ``waits``, placed linearly within
    its bucket; the open last bucket answers its lower bound. None when nothing was counted."""
    total = sum(waits)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for i, n in enumerate(waits):
        if n > 0 and seen + n >= rank:
            lower = 0.0 if i == 0 else WAIT_BOUNDS[i - 1]
            if i >= len(WAIT_BOUNDS):
                return lower
            return lower + (WAIT_BOUNDS[i] - lower) * max(rank - seen, 0) / n
        seen += n
    return WAIT_BOUNDS[-1]


@dataclass(frozen=True)
class QueuePoint:
    """A span of a queue's minutes: due and running as of its last minute, attempts started in
    it and their waits by bucket."""

    at: datetime  # the span's first minute
    due: int = 0
    running: int = 0
    started: int = 0
    waits: tuple[int, ...] = field(default=(0,) * (len(WAIT_BOUNDS) + 1))

    @property
    def wait_p50(self) -> float | None:
        return percentile(self.waits, 0.5)

    @property
    def wait_p95(self) -> float | None:
        return percentile(self.waits, 0.95)

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "due": self.due,
            "running": self.running,
            "started": self.started,
            "wait_p50_seconds": self.wait_p50,
            "wait_p95_seconds": self.wait_p95,
        }


def _add(point: QueuePoint, row: Row) -> QueuePoint:
    waits = tuple(row["waits"] or ())
    if len(waits) != len(point.waits):  # a row written by other code: its counts, not its waits
        waits = (0,) * len(point.waits)
    return QueuePoint(
        point.at,
        int(row["due"]),  # rows come oldest first: the span's last minute stays
        int(row["running"]),
        point.started + int(row["started"]),
        tuple(a + b for a, b in zip(point.waits, waits, strict=True)),
    )


def _span_start(minute: datetime, step: timedelta) -> datetime:
    seconds = step.total_seconds()
    epoch = minute.timestamp()
    return datetime.fromtimestamp(epoch - epoch % seconds, UTC)


def series(rows: Sequence[Row], queue: str, step: timedelta) -> list[QueuePoint]:
    """``queue``'s points, one per ``step`` with a rolled-up minute (a span no worker rolled
    up is absent, not zero), oldest first."""
    points: dict[datetime, QueuePoint] = {}
    for row in rows:
        at = _span_start(row["minute"], step)
        point = points.setdefault(at, QueuePoint(at))
        if row["queue"] == "":
            # A minute's marker sorts before its rows: with no row of the queue after it,
            # nothing of the queue was due or running then.
            points[at] = replace(point, due=0, running=0)
        elif row["queue"] == queue:
            points[at] = _add(point, row)
    return [points[at] for at in sorted(points)]


def _minutes(
    db: Database, queue: str, window: timedelta, step: timedelta
) -> Generator[Step, list[Row], list[QueuePoint]]:
    # Any text a queue can hold, not only today's names: rows written by other SQL (or an older
    # release) name queues too, and this only reads.
    check_key("queue", queue)
    if not timedelta(minutes=1) <= window <= KEEP:
        raise ConfigurationError(f"window must be from 1 minute to {KEEP.days} days, got {window}")
    if not timedelta(minutes=1) <= step <= window:
        raise ConfigurationError(f"step must be from 1 minute to the window, got {step}")
    rows = yield (db.queries.queue_minutes, {"window": window, "queues": [queue]})
    return series(rows, queue, step)


def minutes(db: Database, queue: str, window: timedelta, step: timedelta) -> list[QueuePoint]:
    """``queue``'s last ``window`` in points of ``step`` (whole minutes)."""
    return drive(_minutes(db, queue, window, step), lambda s: db.fetch_all(*s))


async def minutes_async(
    db: Database, queue: str, window: timedelta, step: timedelta
) -> list[QueuePoint]:
    """Async twin of :func:`minutes`."""
    return await drive_async(_minutes(db, queue, window, step), lambda s: db.fetch_all_async(*s))
