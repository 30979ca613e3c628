"""The overview an operator looks at first: per queue, what waits, what died, how fast it goes.

Figures come from the database at the moment they are asked for (``app.stats()``), so every
dashboard, ``cronbase stats`` and the metrics endpoint agree, whichever process serves them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .db.fetch import Row, fetch_all, fetch_all_async
from .job import JobStatus

if TYPE_CHECKING:
    from .app import App


@dataclass(frozen=True)
class QueueStats:
    """One queue: jobs per status, and waits in seconds (None when there is nothing to measure)."""

    queue: str
    counts: dict[JobStatus, int]
    is_paused: bool
    oldest_wait: float | None  # the oldest due job's wait so far
    wait_p50: float | None  # start minus due time, over jobs started in the last hour
    wait_p95: float | None

    @property
    def waiting(self) -> int:
        return self.counts[JobStatus.QUEUED] + self.counts[JobStatus.FAILED]

    @classmethod
    def from_row(cls, row: Row) -> QueueStats:
        counts = {s: int(row["counts"].get(s.value, 0)) for s in JobStatus}
        return cls(
            queue=row["queue"],
            counts=counts,
            is_paused=row["is_paused"],
            oldest_wait=row["oldest_wait"],
            wait_p50=row["wait_p50"],
            wait_p95=row["wait_p95"],
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "counts": {s.value: n for s, n in self.counts.items()},
            "is_paused": self.is_paused,
            "oldest_wait_seconds": self.oldest_wait,
            "wait_p50_seconds": self.wait_p50,
            "wait_p95_seconds": self.wait_p95,
        }


@dataclass(frozen=True)
class Minute:
    """Attempts that ended in one minute."""

    start: datetime
    succeeded: int
    failed: int  # failed (will retry), dead or lost


@dataclass(frozen=True)
class Overview:
    queues: list[QueueStats]
    # The last hour, one entry per minute, oldest first, minutes without attempts included.
    minutes: list[Minute] = field(default_factory=list)

    def totals(self) -> dict[JobStatus, int]:
        return {s: sum(q.counts[s] for q in self.queues) for s in JobStatus}

    def to_json(self) -> dict[str, Any]:
        return {
            "queues": [q.to_json() for q in self.queues],
            "totals": {s.value: n for s, n in self.totals().items()},
            "minutes": [
                {"start": m.start.isoformat(), "succeeded": m.succeeded, "failed": m.failed}
                for m in self.minutes
            ],
        }


def _minutes(rows: list[Row], now: datetime | None) -> list[Minute]:
    # Fill the hour, so a chart shows quiet minutes as zero rather than skipping them.
    found = {r["minute"]: r for r in rows}
    last = now or (max(found) if found else None)
    if last is None:
        return []
    last = last.replace(second=0, microsecond=0)
    hour = [last - timedelta(minutes=59 - i) for i in range(60)]
    return [
        Minute(m, int(found[m]["succeeded"]), int(found[m]["failed"]))
        if m in found
        else Minute(m, 0, 0)
        for m in hour
    ]


def overview(app: App) -> Overview:
    q = app.queries
    queues = [QueueStats.from_row(r) for r in fetch_all(app, q.queue_overview)]
    now = fetch_all(app, q.database_now)[0]["now"]
    return Overview(queues, _minutes(fetch_all(app, q.throughput_by_minute), now))


async def overview_async(app: App) -> Overview:
    q = app.queries
    queues = [QueueStats.from_row(r) for r in await fetch_all_async(app, q.queue_overview)]
    now = (await fetch_all_async(app, q.database_now))[0]["now"]
    return Overview(queues, _minutes(await fetch_all_async(app, q.throughput_by_minute), now))
