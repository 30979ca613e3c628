"""Queues an operator can pause: workers stop claiming from a paused queue until it is resumed.

Jobs already running in it finish; new jobs can still be enqueued and wait. The pause is a row
in ``cronbase.queues`` that every claim statement reads, so it takes effect at once everywhere.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from .db.database import Row
from .limits import check_name

if TYPE_CHECKING:
    from .db.database import Database


@dataclass(frozen=True)
class QueueState:
    name: str
    is_paused: bool
    paused_at: datetime | None = None
    paused_by: str | None = None

    @classmethod
    def from_row(cls, row: Row) -> QueueState:
        return cls(row["name"], row["is_paused"], row["paused_at"], row["paused_by"])


def _check(name: str) -> None:
    check_name("queue", name)


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

    def list(self) -> list[QueueState]:
        return [QueueState.from_row(r) for r in self.db.fetch_all(self.db.queries.list_queues)]

    async def list_async(self) -> builtins.list[QueueState]:
        rows = await self.db.fetch_all_async(self.db.queries.list_queues)
        return [QueueState.from_row(r) for r in rows]
