"""Emptying cronbase's tables when Django flushes the database they live in (the ``flush``
command, and so every ``TransactionTestCase``'s teardown)."""

from __future__ import annotations

from django.db import connections, transaction
from psycopg import sql

from .config import configured

# Every table of the schema but this one: it records which migrations were applied.
_KEPT = "migrations"
_TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename <> %s ORDER BY 1"


def empty_cronbase_tables(alias: str, *, reset_sequences: bool) -> list[str]:
    """TRUNCATE cronbase's tables (all but its migrations record) when ``alias`` is the database
    settings.CRONBASE names; the tables emptied. Tables found by name, so a newer cronbase's are
    emptied too."""
    config, app = configured()
    if config.alias != alias:
        return []
    wrapper = connections[alias]
    with transaction.atomic(using=alias), wrapper.cursor() as cursor:
        cursor.execute(_TABLES, [app.schema, _KEPT])
        tables = [row[0] for row in cursor.fetchall()]
        if not tables:  # cronbase's schema is not in this database (not migrated here)
            return []
        statement = sql.SQL("TRUNCATE {tables}{restart} CASCADE").format(
            tables=sql.SQL(", ").join(sql.Identifier(app.schema, name) for name in tables),
            restart=sql.SQL(" RESTART IDENTITY" if reset_sequences else ""),
        )
        cursor.execute(statement.as_string(wrapper.connection))
    return tables
