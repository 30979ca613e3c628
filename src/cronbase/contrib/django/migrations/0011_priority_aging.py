"""cronbase's schema at version 19 (priority aging: app.queues.set_aging)."""

from __future__ import annotations

from typing import ClassVar

from django.db import migrations

from ..schema import apply_schema

# The cronbase schema version this migration brings a database to. A cronbase release with a
# newer one adds a migration beside this one (same operation); a test fails until it does.
CRONBASE_VERSION = 19


class Migration(migrations.Migration):  # type: ignore[misc]  # django has no type hints here
    # Not in Django's transaction: cronbase's runner commits each of its migrations itself,
    # under its advisory lock, as `cronbase migrate` does.
    atomic = False
    dependencies: ClassVar[list[tuple[str, str]]] = [("cronbase", "0010_task_versions")]
    operations: ClassVar[list[object]] = [
        migrations.RunPython(apply_schema, migrations.RunPython.noop, elidable=False),
    ]
