"""The overview an operator looks at first: per queue, what waits, what died, how fast it goes.

Figures come from the database at the moment they are asked for (``app.stats()``), so every
dashboard, ``cronbase stats`` and the metrics endpoint agree, whichever process serves them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..db.database import Row
from ..flow import Aging, Rate
from ..job import JobStatus

if TYPE_CHECKING:
    from ..db.database import Database


@dataclass(frozen=True)
class QueueStats:
    """One queue: jobs per status, and waits in seconds (None when there is nothing to measure)."""

    queue: str
    counts: dict[JobStatus, int]
    is_paused: bool
    oldest_wait: float | None  # the oldest due job's wait so far
    wait_p50: float | None  # start minus due time, over jobs started in the last hour
    wait_p95: float | None
    # Fleet-wide limits (app.queues.set_limit / set_rate); None: none.
    max_running: int | None = None
    rate: Rate | None = None
    # Priority aging of its waiting jobs (app.queues.set_aging); None: none.
    aging: Aging | None = None
    # Of the queued jobs, those whose run_at is still ahead (deferred with a delay, snoozed,
    # sleeping, waiting for an event): counted in counts[QUEUED], not due yet.
    scheduled: int = 0

    @property
    def waiting(self) -> int:
        return self.counts[JobStatus.QUEUED] + self.counts[JobStatus.FAILED]

    @property
    def due(self) -> int:
        """Queued jobs due now (run_at reached): what workers can claim."""
        return self.counts[JobStatus.QUEUED] - self.scheduled

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
            max_running=row.get("max_running"),
            scheduled=int(row.get("scheduled") or 0),
            rate=(
                Rate(row["rate_n"], row["rate_period"])
                if row.get("rate_n") is not None and row.get("rate_period") is not None
                else None
            ),
            aging=(
                Aging(row["aging_every"], row["aging_step"])
                if row.get("aging_every") is not None and row.get("aging_step") is not None
                else None
            ),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "counts": {s.value: n for s, n in self.counts.items()},
            "due": self.due,
            "scheduled": self.scheduled,
            "is_paused": self.is_paused,
            "oldest_wait_seconds": self.oldest_wait,
            "wait_p50_seconds": self.wait_p50,
            "wait_p95_seconds": self.wait_p95,
            "max_running": self.max_running,
            "rate": None if self.rate is None else str(self.rate),
            "aging": None if self.aging is None else str(self.aging),
        }


@dataclass(frozen=True)
class Minute:
    """Attempts that ended in one minute."""

    start: datetime
    succeeded: int
    failed: int  # failed (will retry), dead or lost


# A worker counts as live when it renewed its leases (or said it idles) this recently; an idle
# worker says so every 10 seconds.
LIVE_WITHIN = timedelta(minutes=1)


@dataclass(frozen=True)
class UnservedJobs:
    """Due jobs of one task and queue that no live worker will claim: none registers the task
    (a deploy not finished, a renamed task, no worker running at all), or those that do serve
    other queues (``task_queues``: theirs; None when no live worker knows the task)."""

    task: str
    queue: str
    waiting: int
    oldest_run_at: datetime
    task_queues: list[str] | None

    @classmethod
    def from_row(cls, row: Row) -> UnservedJobs:
        return cls(
            row["task"],
            row["queue"],
            int(row["waiting"]),
            row["oldest_run_at"],
            row["task_queues"],
        )

    @property
    def reason(self) -> str:
        """Why no live worker claims them, in words."""
        if not self.task_queues:
            return "no live worker registers that task"
        return (
            f"no live worker serves queue {self.queue!r} (the live workers that know the task "
            f"serve: {', '.join(self.task_queues)})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "queue": self.queue,
            "waiting": self.waiting,
            "oldest_run_at": self.oldest_run_at.isoformat(),
            "task_queues": self.task_queues,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Overview:
    queues: list[QueueStats]
    # The last hour, one entry per minute, oldest first, minutes without attempts included.
    minutes: list[Minute] = field(default_factory=list)
    unserved: list[UnservedJobs] = field(default_factory=list)

    def totals(self) -> dict[JobStatus, int]:
        return {s: sum(q.counts[s] for q in self.queues) for s in JobStatus}

    @property
    def scheduled(self) -> int:
        return sum(q.scheduled for q in self.queues)

    def to_json(self) -> dict[str, Any]:
        return {
            "queues": [q.to_json() for q in self.queues],
            "totals": {s.value: n for s, n in self.totals().items()},
            "scheduled": self.scheduled,
            "unserved": [u.to_json() for u in self.unserved],
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


def overview(db: Database) -> Overview:
    q = db.queries
    queues = [QueueStats.from_row(r) for r in db.fetch_all(q.queue_overview)]
    now = db.fetch_all(q.database_now)[0]["now"]
    minutes = _minutes(db.fetch_all(q.throughput_by_minute), now)
    return Overview(queues, minutes, unserved_jobs(db))


async def overview_async(db: Database) -> Overview:
    q = db.queries
    queues = [QueueStats.from_row(r) for r in await db.fetch_all_async(q.queue_overview)]
    now = (await db.fetch_all_async(q.database_now))[0]["now"]
    minutes = _minutes(await db.fetch_all_async(q.throughput_by_minute), now)
    return Overview(queues, minutes, await unserved_jobs_async(db))


def unserved_jobs(db: Database) -> list[UnservedJobs]:
    """Due jobs, by task and queue, that no live worker will claim."""
    rows = db.fetch_all(db.queries.list_unserved_jobs, {"live_within": LIVE_WITHIN})
    return [UnservedJobs.from_row(r) for r in rows]


async def unserved_jobs_async(db: Database) -> list[UnservedJobs]:
    rows = await db.fetch_all_async(db.queries.list_unserved_jobs, {"live_within": LIVE_WITHIN})
    return [UnservedJobs.from_row(r) for r in rows]


# The windows task_stats is asked over, by name (the dashboard's selector, --window).
WINDOWS = {
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
}


@dataclass(frozen=True)
class TaskStats:
    """One task in one queue over a window: attempts that ended, and how long successes took."""

    task: str
    queue: str
    succeeded: int
    failed: int  # failed (retrying), dead or lost
    p50: float | None  # seconds, over the successes
    p95: float | None
    window: timedelta

    @property
    def per_minute(self) -> float:
        return (self.succeeded + self.failed) / (self.window.total_seconds() / 60)

    @property
    def failure_rate(self) -> float:
        ended = self.succeeded + self.failed
        return self.failed / ended if ended else 0.0

    @classmethod
    def from_row(cls, row: Row, window: timedelta) -> TaskStats:
        return cls(
            row["task"],
            row["queue"],
            int(row["succeeded"]),
            int(row["failed"]),
            row["p50"],
            row["p95"],
            window,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "queue": self.queue,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "per_minute": round(self.per_minute, 3),
            "failure_rate": round(self.failure_rate, 4),
            "p50_seconds": self.p50,
            "p95_seconds": self.p95,
            "window_seconds": self.window.total_seconds(),
        }


def task_stats(db: Database, window: timedelta) -> list[TaskStats]:
    rows = db.fetch_all(db.queries.task_stats, {"window": window})
    return [TaskStats.from_row(r, window) for r in rows]


async def task_stats_async(db: Database, window: timedelta) -> list[TaskStats]:
    rows = await db.fetch_all_async(db.queries.task_stats, {"window": window})
    return [TaskStats.from_row(r, window) for r in rows]
