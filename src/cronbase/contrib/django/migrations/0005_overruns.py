"""cronbase's schema at version 14 (workers.overruns: handlers running past their timeout)."""

from __future__ import annotations

from typing import ClassVar

from ..schema import SchemaMigration

# The cronbase schema version this migration brings a database to. A cronbase release with a
# newer one adds a migration beside this one (same operation); a test fails until it does.
CRONBASE_VERSION = 14


class Migration(SchemaMigration):
    dependencies: ClassVar[list[tuple[str, str]]] = [("cronbase", "0004_durable")]
