"""Bloat made visible: what each cronbase table takes on disk, its live and dead rows, when it was
last vacuumed, and what holds vacuum back.

A long-open transaction anywhere in the database (an idle-in-transaction session, a report, a
pg_dump, a prepared transaction, a replication slot) stops vacuum from removing any row version
newer than its snapshot, in every table: the live table's dead rows then pile up at the queue's
rate. ``app.storage()`` names the oldest such holder; ``cronbase check`` fails when its
transaction is older than ``--max-xmin-age`` (1 hour unless given).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..durations import span

if TYPE_CHECKING:
    from ..db.database import Database, Row

# `cronbase check`'s default: an hour of a busy queue's dead rows (at 1,000 jobs/s, some 14
# million row versions in the live table) is about what autovacuum can still catch up with
# once the holder ends; a nightly pg_dump of a large database may take longer and should run on
# a replica (docs/guides/operations.md).
DEFAULT_MAX_XMIN_AGE = timedelta(hours=1)
HOLDERS_SHOWN = 5


@dataclass(frozen=True)
class TableStorage:
    """One cronbase table (a partitioned one summed over its partitions)."""

    name: str
    heap_bytes: int  # with TOAST
    index_bytes: int
    live_rows: int  # the statistics' estimates
    dead_rows: int
    last_vacuum: datetime | None
    last_autovacuum: datetime | None
    partitions: int | None  # None: not partitioned

    @classmethod
    def from_row(cls, row: Row) -> TableStorage:
        return cls(**row)

    def to_json(self) -> dict[str, Any]:
        data = dict(vars(self))
        for key in ("last_vacuum", "last_autovacuum"):
            data[key] = data[key].isoformat() if data[key] else None
        return data


@dataclass(frozen=True)
class XminHolder:
    """Something that holds back vacuum: a session's snapshot, a prepared transaction, a slot."""

    kind: str  # session, prepared, slot
    pid: int | None  # a session's
    application: str  # a session's application_name, a prepared transaction's gid, a slot's name
    state: str | None  # a session's state (active, idle in transaction...)
    age: float | None  # seconds its transaction has been open (None for a slot)
    xid_age: int | None  # transactions since its horizon

    @classmethod
    def from_row(cls, row: Row) -> XminHolder:
        return cls(**row)

    def describe(self) -> str:
        """One line: what it is and how old."""
        who = f"pid {self.pid}" if self.pid is not None else self.kind
        app = f" ({self.application})" if self.application else ""
        age = "" if self.age is None else f", transaction open {span(self.age)}"
        state = f", {self.state}" if self.state else ""
        return f"{who}{app}{state}{age}, {self.xid_age} transactions behind"

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass(frozen=True)
class Storage:
    """The tables, and what holds vacuum back, oldest first (at most a few)."""

    tables: list[TableStorage]
    holders: list[XminHolder]

    @property
    def oldest(self) -> XminHolder | None:
        """The oldest transaction holding vacuum back (a slot has no age: not counted)."""
        aged = [h for h in self.holders if h.age is not None]
        return max(aged, key=lambda h: h.age or 0.0, default=None)

    def too_old(self, limit: timedelta) -> str | None:
        """The problem line when the oldest holder's transaction is older than ``limit``."""
        oldest = self.oldest
        if oldest is None or oldest.age is None or oldest.age <= limit.total_seconds():
            return None
        return (
            f"vacuum is held back by {oldest.describe()} (more than "
            f"{span(limit.total_seconds())}): dead rows pile up in every table until it ends"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "tables": [t.to_json() for t in self.tables],
            "xmin_holders": [h.to_json() for h in self.holders],
        }


def human_bytes(n: int) -> str:
    """1536 -> '1.5 kB'."""
    size, unit = float(n), "B"
    for unit in ("B", "kB", "MB", "GB", "TB"):  # the unit the loop stops at
        if size < 1024 or unit == "TB":
            break
        size /= 1024
    return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"


def storage(db: Database) -> Storage:
    tables = db.fetch_all(db.queries.table_storage)
    holders = db.fetch_all(db.queries.xmin_holders, {"limit": HOLDERS_SHOWN})
    return _storage(tables, holders)


async def storage_async(db: Database) -> Storage:
    tables = await db.fetch_all_async(db.queries.table_storage)
    holders = await db.fetch_all_async(db.queries.xmin_holders, {"limit": HOLDERS_SHOWN})
    return _storage(tables, holders)


def _storage(tables: list[Row], holders: list[Row]) -> Storage:
    return Storage(
        [TableStorage.from_row(r) for r in tables], [XminHolder.from_row(r) for r in holders]
    )
