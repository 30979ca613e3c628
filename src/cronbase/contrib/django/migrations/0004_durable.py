"""cronbase's schema at version 13 (durable handlers: events, waiting_for, suspended attempts)."""

from __future__ import annotations

from typing import ClassVar

from ..schema import SchemaMigration

# The cronbase schema version this migration brings a database to. A cronbase release with a
# newer one adds a migration beside this one (same operation); a test fails until it does.
CRONBASE_VERSION = 13


class Migration(SchemaMigration):
    dependencies: ClassVar[list[tuple[str, str]]] = [("cronbase", "0003_dependencies")]
