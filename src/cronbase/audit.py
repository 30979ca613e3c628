"""The audit log: every operator action (dashboard, command line) with who, what and when."""

from __future__ import annotations

import builtins
import getpass
import json
import socket
from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .db.database import Row

if TYPE_CHECKING:
    from .db.database import Database


def cli_actor() -> str:
    """Who runs a command: ``cli:user@host``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for the uid (containers)
        user = "unknown"
    return f"cli:{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class AuditEntry:
    id: int
    at: datetime
    actor: str
    action: str
    target: str
    detail: dict[str, Any]

    @classmethod
    def from_row(cls, row: Row) -> AuditEntry:
        return cls(**{f.name: row[f.name] for f in fields(cls)})


def _params(actor: str, action: str, target: str, detail: dict[str, Any] | None) -> Row:
    return {"actor": actor, "action": action, "target": target, "detail": json.dumps(detail or {})}


class Audit:
    """``app.audit``: ``record(actor, action, target, detail)`` and ``list()``, newest first."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def record(
        self, actor: str, action: str, target: str, detail: dict[str, Any] | None = None
    ) -> AuditEntry:
        row = self.db.fetch_one(
            self.db.queries.insert_audit, _params(actor, action, target, detail)
        )
        assert row is not None
        return AuditEntry.from_row(row)

    async def record_async(
        self, actor: str, action: str, target: str, detail: dict[str, Any] | None = None
    ) -> AuditEntry:
        params = _params(actor, action, target, detail)
        row = await self.db.fetch_one_async(self.db.queries.insert_audit, params)
        assert row is not None
        return AuditEntry.from_row(row)

    def list(self, limit: int = 100) -> list[AuditEntry]:
        rows = self.db.fetch_all(self.db.queries.list_audit, {"limit": limit})
        return [AuditEntry.from_row(r) for r in rows]

    async def list_async(self, limit: int = 100) -> builtins.list[AuditEntry]:
        rows = await self.db.fetch_all_async(self.db.queries.list_audit, {"limit": limit})
        return [AuditEntry.from_row(r) for r in rows]
