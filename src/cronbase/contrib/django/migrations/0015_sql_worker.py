"""cronbase's schema at version 24 (work a queue from any language: cronbase.claim() and co)."""

from __future__ import annotations

from typing import ClassVar

from ..schema import SchemaMigration

CRONBASE_VERSION = 24


class Migration(SchemaMigration):
    dependencies: ClassVar[list[tuple[str, str]]] = [("cronbase", "0014_sql_defer")]
