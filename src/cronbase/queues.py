"""Queues an operator can pause or limit.

Pause: workers stop claiming from a paused queue until it is resumed. Jobs already running in it
finish; new jobs can still be enqueued and wait. The pause is a row in ``cronbase.queues`` that
every claim statement reads, so it takes effect at once everywhere.

Limits: ``set_limit(name, n)`` (at most n running jobs of the queue across all workers) and
``set_rate(name, "100/minute")`` (at most 100 starts in any minute); ``None`` removes one. Jobs
already waiting obey them; running jobs count at once. The plain claim stops taking the queue's
jobs as soon as the limit commits, and each worker's flow claim (``db/sql/flow.sql``) takes them
from its next reap on (``reap_interval``, 5 s by default).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from .db.database import Row
from .flow import Rate, check_limit, parse_rate
from .limits import check_name

if TYPE_CHECKING:
    from .db.database import Database


@dataclass(frozen=True)
class QueueState:
    name: str
    is_paused: bool
    paused_at: datetime | None = None
    paused_by: str | None = None
    # At most this many running jobs of the queue, fleet-wide; None: no limit.
    max_running: int | None = None
    # At most rate.n starts in any window of rate.period; None: no rate limit.
    rate: Rate | None = None

    @classmethod
    def from_row(cls, row: Row) -> QueueState:
        rate_n, period = row.get("rate_n"), row.get("rate_period")
        return cls(
            row["name"],
            row["is_paused"],
            row["paused_at"],
            row["paused_by"],
            row.get("max_running"),
            Rate(rate_n, period) if rate_n is not None and period is not None else None,
        )

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "is_paused": self.is_paused,
            "paused_at": self.paused_at.isoformat() if self.paused_at else None,
            "paused_by": self.paused_by,
            "max_running": self.max_running,
            "rate": None if self.rate is None else str(self.rate),
        }


def _check(name: str) -> None:
    check_name("queue", name)


def limit_params(name: str, max_running: int | None) -> dict[str, object]:
    _check(name)
    if max_running is not None:
        check_limit(f"queue {name!r} limit", max_running)
    return {"name": name, "max_running": max_running}


def rate_params(name: str, rate: str | Rate | None) -> dict[str, object]:
    _check(name)
    parsed = None if rate is None else parse_rate(rate, f"queue {name!r} rate")
    return {
        "name": name,
        "rate_n": parsed.n if parsed else None,
        "rate_period": parsed.period if parsed else None,
    }


class Queues:
    """``app.queues``: ``pause(name)``, ``resume(name)``, ``list()``, and ``_async`` twins."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def pause(self, name: str, *, actor: str = "api") -> QueueState:
        _check(name)
        row = self.db.fetch_one(self.db.queries.pause_queue, {"name": name, "actor": actor})
        assert row is not None
        return QueueState.from_row(row)

    async def pause_async(self, name: str, *, actor: str = "api") -> QueueState:
        _check(name)
        params = {"name": name, "actor": actor}
        row = await self.db.fetch_one_async(self.db.queries.pause_queue, params)
        assert row is not None
        return QueueState.from_row(row)

    def resume(self, name: str) -> QueueState:
        _check(name)
        row = self.db.fetch_one(self.db.queries.resume_queue, {"name": name})
        return QueueState.from_row(row) if row else QueueState(name, is_paused=False)

    async def resume_async(self, name: str) -> QueueState:
        _check(name)
        row = await self.db.fetch_one_async(self.db.queries.resume_queue, {"name": name})
        return QueueState.from_row(row) if row else QueueState(name, is_paused=False)

    def set_limit(self, name: str, max_running: int | None) -> QueueState:
        """At most ``max_running`` running jobs of queue ``name`` across all workers (None: no
        limit)."""
        row = self.db.fetch_one(self.db.queries.set_queue_limit, limit_params(name, max_running))
        assert row is not None
        return QueueState.from_row(row)

    async def set_limit_async(self, name: str, max_running: int | None) -> QueueState:
        params = limit_params(name, max_running)
        row = await self.db.fetch_one_async(self.db.queries.set_queue_limit, params)
        assert row is not None
        return QueueState.from_row(row)

    def set_rate(self, name: str, rate: str | Rate | None) -> QueueState:
        """At most ``rate`` starts of queue ``name``'s jobs (``"100/minute"``) in any window,
        across all workers (None: no rate limit)."""
        row = self.db.fetch_one(self.db.queries.set_queue_rate, rate_params(name, rate))
        assert row is not None
        return QueueState.from_row(row)

    async def set_rate_async(self, name: str, rate: str | Rate | None) -> QueueState:
        row = await self.db.fetch_one_async(self.db.queries.set_queue_rate, rate_params(name, rate))
        assert row is not None
        return QueueState.from_row(row)

    def list(self) -> list[QueueState]:
        return [QueueState.from_row(r) for r in self.db.fetch_all(self.db.queries.list_queues)]

    async def list_async(self) -> builtins.list[QueueState]:
        rows = await self.db.fetch_all_async(self.db.queries.list_queues)
        return [QueueState.from_row(r) for r in rows]
