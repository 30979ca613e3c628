"""cronbase's schema at version 22 (the console: each worker's counts, each queue's minutes)."""

from __future__ import annotations

from typing import ClassVar

from ..schema import SchemaMigration

CRONBASE_VERSION = 22


class Migration(SchemaMigration):
    dependencies: ClassVar[list[tuple[str, str]]] = [("cronbase", "0012_tickets")]
