"""Describe a migrated schema as stable text, to compare with the checked-in snapshot.

Regenerate after adding a migration:  python -m tests.integration.schema_snapshot --write
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import psycopg

SNAPSHOT = Path(__file__).with_name("schema_snapshot.txt")
_DAY = re.compile(r"_\d{8}(?!\d)")

_QUERIES = {
    "column": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
               CASE WHEN a.attnotnull THEN 'not null' ELSE 'null' END,
               coalesce(pg_get_expr(d.adbin, d.adrelid), ''),
               -- A partition's identity is its parent's: PostgreSQL 17+ lists it, 15 does not.
               CASE WHEN a.attidentity <> '' AND NOT c.relispartition THEN 'identity' ELSE '' END
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p', 'v') AND a.attnum > 0
          AND NOT a.attisdropped
        ORDER BY c.relname, a.attnum""",
    "index": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
        WHERE schemaname = %(schema)s ORDER BY tablename, indexname""",
    "constraint": """
        SELECT c.relname, con.conname, pg_get_constraintdef(con.oid)
        FROM pg_constraint con
        JOIN pg_class c ON c.oid = con.conrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        -- Not-null constraints are catalogued from PostgreSQL 18 on; columns already say it.
        WHERE n.nspname = %(schema)s AND con.contype <> 'n'
        ORDER BY c.relname, con.conname""",
    "trigger": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid)
        FROM pg_trigger t
        JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s AND NOT t.tgisinternal ORDER BY c.relname, t.tgname""",
    # Partitioned tables and how they split (their day partitions are left out below).
    "partitioned": """
        SELECT c.relname, pg_get_partkeydef(c.oid),
               coalesce(pg_get_expr(c.relpartbound, c.oid), '')
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s AND c.relkind IN ('p', 'r')
          AND (c.relkind = 'p' OR c.relispartition)
        ORDER BY c.relname""",
    # The body's hash with the schema's name taken out (a function names its schema's tables).
    "function": """
        SELECT p.proname,
               md5(replace(replace(p.prosrc, '"' || %(schema)s || '".', '{schema}.'),
                           quote_literal(%(schema)s), '{schema_name}'))
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = %(schema)s ORDER BY 1, 2""",
}


def describe(conn: psycopg.Connection[Any], schema: str) -> str:
    """One line per column, index, constraint, trigger and function; the schema name as {schema}."""
    lines = []
    for kind, query in _QUERIES.items():
        for row in conn.execute(query, {"schema": schema}).fetchall():
            text = " | ".join(str(v) for v in row)
            if _DAY.search(text):  # a day of the history: which days exist depends on the date
                continue
            lines.append(f"{kind}: {text}".replace(f"{schema}.", "{schema}.").rstrip())
    return "\n".join(lines) + "\n"


def main() -> None:
    """Write the snapshot from a fresh schema on CRONBASE_TEST_DATABASE_URL or the embedded server."""
    import os
    import tempfile

    from cronbase.db import embedded, migrate

    url = os.environ.get("CRONBASE_TEST_DATABASE_URL") or embedded.start(
        Path(tempfile.mkdtemp()) / "pgdata", cleanup="delete"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS cronbase_snapshot CASCADE")
        migrate.apply_migrations(conn, "cronbase_snapshot")
        text = describe(conn, "cronbase_snapshot")
        conn.execute("DROP SCHEMA cronbase_snapshot CASCADE")
    if "--write" in sys.argv:
        SNAPSHOT.write_text(text)
        print(f"wrote {SNAPSHOT}")
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
