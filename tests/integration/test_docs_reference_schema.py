"""docs/reference/schema.md against the schema the migrations make, read from the database (the
unit test reads the checked-in snapshot of it; this one needs no snapshot to be current)."""

from __future__ import annotations

import re
from typing import Any

import psycopg

from tests.conftest import SCHEMA
from tests.unit.test_docs_reference import page, schema_problems

_COLUMNS = """
    SELECT c.relname, c.relispartition, a.attname
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p', 'v')
    ORDER BY c.relname, a.attnum"""
# A day's partition of the history or the attempts: which days exist depends on the date.
_DAY = re.compile(r"_\d{8}$")


def test_every_table_view_and_column_of_the_migrated_schema_is_documented(
    db: psycopg.Connection[Any],
) -> None:
    columns: dict[str, list[str]] = {}
    partitions: set[str] = set()
    for relation, is_partition, column in db.execute(_COLUMNS, {"schema": SCHEMA}):
        if _DAY.search(relation):
            continue
        columns.setdefault(relation, []).append(column)
        if is_partition:
            partitions.add(relation)
    assert {"jobs", "jobs_all", "job_attempts_all", "tickets"} <= set(columns)
    problems = schema_problems(page("schema.md"), columns, partitions)
    assert not problems, f"docs/reference/schema.md: {problems}"
