"""The audit log: every operator action (dashboard, command line) with who, what and when."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..records import Record

if TYPE_CHECKING:
    from ..db.database import Database


@dataclass(frozen=True)
class AuditEntry(Record):
    id: int
    at: datetime
    actor: str
    action: str
    target: str
    detail: dict[str, Any]


class Audit:
    """``app.audit``: ``list()``, newest first. Rows are written by the actions themselves, in their
    own transactions (``audited.py``)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def list(self, limit: int = 100) -> list[AuditEntry]:
        rows = self.db.fetch_all(self.db.queries.list_audit, {"limit": limit})
        return [AuditEntry.from_row(r) for r in rows]

    async def list_async(self, limit: int = 100) -> builtins.list[AuditEntry]:
        rows = await self.db.fetch_all_async(self.db.queries.list_audit, {"limit": limit})
        return [AuditEntry.from_row(r) for r in rows]
