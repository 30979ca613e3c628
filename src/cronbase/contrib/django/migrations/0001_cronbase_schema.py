"""cronbase's schema (its tables, functions and triggers), created by ``manage.py migrate``."""

from __future__ import annotations

from typing import ClassVar

from ..schema import SchemaMigration

# The cronbase schema version this migration brings a database to. A cronbase release with a
# newer one adds a migration beside this one (same operation); a test fails until it does.
CRONBASE_VERSION = 10


class Migration(SchemaMigration):
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
