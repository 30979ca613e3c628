"""What cronbase's Django migrations run: cronbase's own migrations (``cronbase.db.migrate``), on
the configured database, in the configured schema, through Django's connection; and the same at
the end of ``migrate`` when those Django migrations are turned off (as tests often do)."""

from __future__ import annotations

from typing import Any, ClassVar

import psycopg
from django.db import connections, migrations
from django.db.migrations.loader import MigrationLoader

from ...db.migrate import apply_migrations
from .config import alias_url, configured
from .connections import check_same_database


def apply_schema(apps: Any, schema_editor: Any) -> None:
    """RunPython's forward function: apply every pending cronbase migration (none when
    ``cronbase migrate`` already did; each one runs once, under cronbase's advisory lock)."""
    ensure_schema(schema_editor.connection)


def apply_schema_without_migrations(sender: Any, using: str, **kwargs: Any) -> None:
    """``post_migrate`` receiver: with cronbase's Django migrations turned off (the test
    database's ``"TEST": {"MIGRATE": False}``, pytest-django's ``--nomigrations``,
    ``MIGRATION_MODULES = {"cronbase": None}``), ``migrate`` still creates cronbase's schema, as
    it creates the tables of apps without migrations."""
    module, _ = MigrationLoader.migrations_module(sender.label)
    if module is None:
        ensure_schema(connections[using])


def ensure_schema(wrapper: Any) -> None:
    """Bring cronbase's schema up to date on the database of ``wrapper`` (a Django connection)
    when it is the configured alias's."""
    config, app = configured()
    if config.alias is None or wrapper.alias != config.alias:
        # cronbase's tables live in one database: `migrate --database other` leaves it alone.
        return
    wrapper.ensure_connection()
    if config.app_path is not None:
        check_same_database(config.alias, wrapper.connection, app)
    if wrapper.in_atomic_block or not wrapper.get_autocommit():
        # `migrate` run inside the caller's transaction (call_command in atomic()):
        # apply_migrations commits each migration on its own, which needs autocommit, and
        # switching it would end the caller's transaction. A connection of its own instead, to
        # the database Django has now (a test database, under the test runner).
        with psycopg.connect(alias_url(config.alias), autocommit=True) as own:
            apply_migrations(own, app.schema)
        return
    # Outside a transaction (this migration is not atomic): Django's connection, in autocommit
    # as Django keeps it between transactions.
    apply_migrations(wrapper.connection, app.schema)


class SchemaMigration(migrations.Migration):  # type: ignore[misc]  # django has no type hints here
    """What each of cronbase's Django migrations is (each names its CRONBASE_VERSION and the one
    before it): apply_schema, which brings the schema to the newest version this cronbase has."""

    # Not in Django's transaction: cronbase's runner commits each of its migrations itself,
    # under its advisory lock, as `cronbase migrate` does.
    atomic = False
    operations: ClassVar[list[object]] = [
        migrations.RunPython(apply_schema, migrations.RunPython.noop, elidable=False),
    ]
