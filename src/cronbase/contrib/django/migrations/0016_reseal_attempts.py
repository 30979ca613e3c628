"""cronbase's schema at version 25 (key rotation re-seals attempts: cronbase.reseal_attempts())."""

from __future__ import annotations

from typing import ClassVar

from ..schema import SchemaMigration

CRONBASE_VERSION = 25


class Migration(SchemaMigration):
    dependencies: ClassVar[list[tuple[str, str]]] = [("cronbase", "0015_sql_worker")]
