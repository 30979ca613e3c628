"""The schema explains itself: every table and column carries a COMMENT for whoever reads ``\\d+``.

A migration that adds a table or a column comments it in the same migration (0008_comments.sql
shows the style): these tests fail, naming each table.column left without one.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from tests.conftest import SCHEMA

# Tables (relkind r, p; a partition is described by its parent) and their live columns, each with
# its comment: NULL when it has none. A table's own row has a NULL column name.
_DESCRIBED = """
    SELECT c.relname, NULL::name AS attname, obj_description(c.oid, 'pg_class')
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p') AND NOT c.relispartition
    UNION ALL
    SELECT c.relname, a.attname, col_description(c.oid, a.attnum)
    FROM pg_attribute a
    JOIN pg_class c ON c.oid = a.attrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p') AND NOT c.relispartition
      AND a.attnum > 0 AND NOT a.attisdropped
    ORDER BY 1, 2 NULLS FIRST"""

_INDEX_COMMENTS = """
    SELECT i.relname, obj_description(i.oid, 'pg_class')
    FROM pg_index x
    JOIN pg_class i ON i.oid = x.indexrelid
    JOIN pg_namespace n ON n.oid = i.relnamespace
    WHERE n.nspname = %(schema)s"""

# CHECK (column = ANY (ARRAY['a'::text, ...])): a column limited to a list of values.
_VALUE_CHECKS = """
    SELECT c.relname, pg_get_constraintdef(con.oid)
    FROM pg_constraint con
    JOIN pg_class c ON c.oid = con.conrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND con.contype = 'c' AND NOT c.relispartition"""
_ONE_OF = re.compile(r"^CHECK \(\((\w+) = ANY \(ARRAY\[(.*)\]\)\)\)$")

TABLES = {
    "audit_log",
    "effects",
    "job_attempts",
    "jobs",
    "lane_claims",
    "lanes",
    "migrations",
    "queues",
    "schedules",
    "tickets",
    "ticks",
    "workers",
}


def described(conn: psycopg.Connection[Any], schema: str) -> dict[str, str | None]:
    """``table`` and ``table.column`` -> the comment, None when there is none."""
    rows = conn.execute(_DESCRIBED, {"schema": schema}).fetchall()
    return {f"{table}.{column}" if column else table: text for table, column, text in rows}


def uncommented(comments: dict[str, str | None]) -> list[str]:
    """The tables and columns whose comment is missing or blank, in table order."""
    return [name for name, text in comments.items() if not (text and text.strip())]


def explain(gaps: list[str]) -> str:
    named = ", ".join(f"{g} (column)" if "." in g else f"{g} (table)" for g in gaps)
    return (
        f"tables and columns of schema {SCHEMA!r} without a COMMENT ({len(gaps)}): {named}. Add "
        "COMMENT ON TABLE / COMMENT ON COLUMN in the migration that creates them (as "
        "0008_comments.sql does): what it holds, its unit or values, who writes it and when."
    )


@pytest.fixture
def conn(database_url: str) -> Any:
    with psycopg.connect(database_url, autocommit=True) as connection:
        yield connection


def test_every_table_and_column_has_a_comment(conn: psycopg.Connection[Any]) -> None:
    comments = described(conn, SCHEMA)
    tables = {name for name in comments if "." not in name}
    assert tables >= TABLES, f"the query missed tables: {TABLES - tables}"
    gaps = uncommented(comments)
    assert not gaps, explain(gaps)


def test_the_check_names_what_a_migration_left_uncommented(conn: psycopg.Connection[Any]) -> None:
    # What a careless migration would do, rolled back: a new column, a new table whose column has
    # only a blank comment, and a dropped column (gone, so nothing to comment).
    before = uncommented(described(conn, SCHEMA))
    with conn.transaction():
        conn.execute("SET LOCAL lock_timeout = '10s'")
        conn.execute(f"ALTER TABLE {SCHEMA}.workers ADD COLUMN undocumented text")
        conn.execute(f"CREATE TABLE {SCHEMA}.leftovers (n integer, gone integer)")
        conn.execute(f"COMMENT ON TABLE {SCHEMA}.leftovers IS 'A table for this test.'")
        conn.execute(f"COMMENT ON COLUMN {SCHEMA}.leftovers.n IS '  '")
        conn.execute(f"ALTER TABLE {SCHEMA}.leftovers DROP COLUMN gone")
        gaps = uncommented(described(conn, SCHEMA))
        raise psycopg.Rollback()
    new = [g for g in gaps if g not in before]
    assert new == ["leftovers.n", "workers.undocumented"]
    assert "(2): leftovers.n (column), workers.undocumented (column)." in explain(new)


def test_a_column_limited_to_some_values_names_each_in_its_comment(
    conn: psycopg.Connection[Any],
) -> None:
    comments = described(conn, SCHEMA)
    checked = []
    for table, definition in conn.execute(_VALUE_CHECKS, {"schema": SCHEMA}).fetchall():
        match = _ONE_OF.match(definition)
        if not match:
            continue
        column = f"{table}.{match[1]}"
        text = comments[column] or ""
        values = re.findall(r"'([^']*)'::text", match[2])
        unnamed = [v for v in values if not re.search(rf"\b{re.escape(v)}\b", text)]
        assert not unnamed, f"{column}'s comment does not say what {unnamed} mean: {text!r}"
        checked.append(column)
    assert set(checked) >= {
        "jobs.status",
        "job_attempts.outcome",
        "effects.status",
        "schedules.catch_up",
        "schedules.source",
    }


def test_key_comments_say_the_right_thing(conn: psycopg.Connection[Any]) -> None:
    comments = {name: (text or "").lower() for name, text in described(conn, SCHEMA).items()}
    assert "fenc" in comments["jobs.lease_token"]
    assert "only while the job is running" in comments["jobs.lease_token"]
    assert "due" in comments["jobs.run_at"]
    assert "lower runs first" in comments["jobs.priority"]
    # The success history lives in the job row, not in job_attempts (migration 0006).
    for name in ("jobs", "job_attempts"):
        assert "0006" in comments[name], comments[name]
    assert "no row" in comments["job_attempts"]
    assert "null means every queue" in comments["workers.queues"]
    assert "no foreign key" in comments["effects.job_id"]

    indexes = dict(conn.execute(_INDEX_COMMENTS, {"schema": SCHEMA}).fetchall())
    assert "claim" in (indexes["jobs_due_idx"] or "")
    assert "reaper" in (indexes["jobs_running_lease_idx"] or "")
