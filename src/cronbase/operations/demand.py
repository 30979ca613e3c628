"""Queue demand for autoscaling: per queue, the work in hand and the workers it needs.

``desired_slots = running + due``: the jobs a fleet should be running right now (those it runs,
and those it could claim), where a paused queue's due jobs do not count (no worker may claim
them) and a queue's ``max_running`` caps it (no more of its jobs may run at once, however many
workers). ``workers_needed = ceil(desired_slots / concurrency)``, where
``concurrency`` is each worker's (10 by default, as ``cronbase worker``'s). Arrival and
completion rates over the last ``window`` are reported beside it for the operator; they do not
enter the figure (a backlog is what a scaler should act on, and a rate of 0 must not scale a
busy queue to nothing). The statement is ``queue_demand`` in ``db/sql/operations.sql``.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..checks import check_name
from ..db.database import Row
from ..db.steps import drive, drive_async
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..db.database import Database

DEFAULT_CONCURRENCY = 10  # cronbase worker's default
MOST_CONCURRENCY = 10_000  # beyond this a figure is a typo, not a worker
DEFAULT_WINDOW = timedelta(minutes=5)

Step = tuple[bytes, dict[str, Any]]  # a statement and its parameters


@dataclass(frozen=True)
class QueueDemand:
    """One queue's work in hand and the workers of ``concurrency`` slots it needs."""

    queue: str
    due: int  # queued or failed, run_at reached
    running: int
    oldest_due_age: float | None  # seconds; None when nothing is due
    arrivals_per_minute: float  # jobs created, over the window
    completions_per_minute: float  # jobs finished succeeded or dead, over the window
    concurrency: int
    paused: bool = False
    max_running: int | None = None  # the queue's limit of running jobs (set_limit)

    @property
    def desired_slots(self) -> int:
        wanted = self.running + (0 if self.paused else self.due)
        if self.max_running is not None:  # what runs over a lowered limit still needs its slots
            wanted = min(wanted, max(self.max_running, self.running))
        return wanted

    @property
    def workers_needed(self) -> int:
        return math.ceil(self.desired_slots / self.concurrency)

    @classmethod
    def from_row(cls, row: Row, concurrency: int, window: timedelta) -> QueueDemand:
        minutes = window.total_seconds() / 60
        return cls(
            row["queue"],
            int(row["due"]),
            int(row["running"]),
            row["oldest_due_age"],
            int(row["arrivals"]) / minutes,
            int(row["completions"]) / minutes,
            concurrency,
            bool(row["is_paused"]),
            row["max_running"],
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "due": self.due,
            "running": self.running,
            "desired_slots": self.desired_slots,
            "oldest_due_age_seconds": self.oldest_due_age,
            "arrivals_per_minute": round(self.arrivals_per_minute, 3),
            "completions_per_minute": round(self.completions_per_minute, 3),
            "concurrency": self.concurrency,
            "paused": self.paused,
            "max_running": self.max_running,
            "workers_needed": self.workers_needed,
        }


def check_concurrency(concurrency: int) -> int:
    if isinstance(concurrency, bool) or not isinstance(concurrency, int):
        raise ConfigurationError(f"concurrency must be a whole number, got {concurrency!r}")
    if not 1 <= concurrency <= MOST_CONCURRENCY:
        raise ConfigurationError(
            f"concurrency must be from 1 to {MOST_CONCURRENCY:,}, got {concurrency}"
        )
    return concurrency


def demand_params(
    queues: Iterable[str] | None, concurrency: int, window: timedelta
) -> dict[str, Any]:
    check_concurrency(concurrency)
    if not isinstance(window, timedelta) or window <= timedelta(0):
        raise ConfigurationError(f"demand window must be a positive timedelta, got {window!r}")
    names = None if queues is None else sorted(set(queues))
    for name in names or ():
        check_name("queue", name)
    return {"queues": names, "window": window}


def _demand(
    db: Database, queues: Iterable[str] | None, concurrency: int, window: timedelta
) -> Generator[Step, list[Row], list[QueueDemand]]:
    """The demand as steps (``db/steps.py``): one ``queue_demand`` read, then its rows as
    :class:`QueueDemand`, sorted by queue."""
    params = demand_params(queues, concurrency, window)
    rows = yield (db.queries.queue_demand, params)
    found = {r["queue"]: QueueDemand.from_row(r, concurrency, window) for r in rows}
    for name in params["queues"] or ():  # a queue asked for with nothing in hand: zero, not absent
        found.setdefault(name, QueueDemand(name, 0, 0, None, 0.0, 0.0, concurrency))
    return [found[name] for name in sorted(found)]


def demand(
    db: Database,
    queues: Iterable[str] | None = None,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    window: timedelta = DEFAULT_WINDOW,
) -> list[QueueDemand]:
    """Per queue (``queues``, or every queue with work in hand), the work and workers it needs."""
    steps = _demand(db, queues, concurrency, window)
    return drive(steps, lambda step: db.fetch_all(*step))


async def demand_async(
    db: Database,
    queues: Iterable[str] | None = None,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    window: timedelta = DEFAULT_WINDOW,
) -> list[QueueDemand]:
    """Async twin of :func:`demand`."""
    steps = _demand(db, queues, concurrency, window)
    return await drive_async(steps, lambda step: db.fetch_all_async(*step))
