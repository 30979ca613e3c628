"""cronbase's schema at version 23 (cronbase.defer(): enqueue from any language)."""

from __future__ import annotations

from typing import ClassVar

from ..schema import SchemaMigration

CRONBASE_VERSION = 23


class Migration(SchemaMigration):
    dependencies: ClassVar[list[tuple[str, str]]] = [("cronbase", "0013_console")]
