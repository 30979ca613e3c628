"""cronbase's schema at version 20 (tickets: claims that read no row a held horizon keeps)."""

from __future__ import annotations

from typing import ClassVar

from ..schema import SchemaMigration

CRONBASE_VERSION = 20


class Migration(SchemaMigration):
    dependencies: ClassVar[list[tuple[str, str]]] = [("cronbase", "0011_priority_aging")]
