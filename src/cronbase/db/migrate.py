"""Forward-only migrations from ``db/migrations/NNNN_name.sql``, applied under an advisory lock.

Each migration runs in its own transaction. The lock is per schema, so several processes can
run ``migrate`` at once: one applies, the others wait and then find nothing to do.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from importlib import resources

import psycopg
from psycopg import sql

from ..errors import MigrationError
from .queries import render

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    template: str


def load_migrations() -> list[Migration]:
    """All packaged migrations in version order; gaps and duplicates are errors."""
    found = []
    folder = resources.files("cronbase.db") / "migrations"
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise RuntimeError(f"migration numbers must run 1, 2, 3...; found {migration.version}")
    return found


MIGRATIONS = load_migrations()
LATEST_VERSION = MIGRATIONS[-1].version


def lock_key(schema: str) -> int:
    # A stable 32-bit key per schema: two apps with different schemas do not wait on each other.
    return zlib.crc32(f"cronbase.migrate:{schema}".encode())


def _applied_versions(conn: psycopg.Connection, schema: str) -> set[int]:
    exists = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL",
        [f"{sql.Identifier(schema).as_string(conn)}.migrations"],
    ).fetchone()
    if not exists or not exists[0]:
        return set()
    rows = conn.execute(
        sql.SQL("SELECT version FROM {}.migrations").format(sql.Identifier(schema))
    ).fetchall()
    return {row[0] for row in rows}


def schema_version(conn: psycopg.Connection, schema: str) -> int:
    """The highest applied migration, 0 when the schema is empty or missing."""
    return max(_applied_versions(conn, schema), default=0)


def apply_migrations(conn: psycopg.Connection, schema: str) -> list[str]:
    """Apply every pending migration; returns the names applied (empty when up to date)."""
    try:
        return _apply(conn, schema)
    except psycopg.errors.InsufficientPrivilege as exc:
        # An application role (README: Least privilege) may use the schema, not change it.
        raise MigrationError(
            f"cannot migrate schema {schema!r}: {str(exc).strip().splitlines()[0]}; run "
            "`cronbase migrate` as the role that owns the schema (or may create it)"
        ) from None


def _apply(conn: psycopg.Connection, schema: str) -> list[str]:
    conn.autocommit = True
    key = lock_key(schema)
    conn.execute("SELECT pg_advisory_lock(%s)", [key])
    try:
        ident = sql.Identifier(schema)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.migrations (version integer PRIMARY KEY, "
                "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(ident)
        )
        applied = _applied_versions(conn, schema)
        newest = max(applied, default=0)
        if newest > LATEST_VERSION:
            raise MigrationError(
                f"schema {schema!r} is at version {newest}, newer than this cronbase "
                f"({LATEST_VERSION}); upgrade cronbase"
            )
        done = []
        for migration in MIGRATIONS:
            if migration.version in applied:
                continue
            try:
                with conn.transaction():
                    conn.execute(render(migration.template, schema))
                    conn.execute(
                        sql.SQL("INSERT INTO {}.migrations (version, name) VALUES (%s, %s)").format(
                            ident
                        ),
                        [migration.version, migration.name],
                    )
            except psycopg.Error as exc:
                raise MigrationError(
                    f"migration {migration.version:04d}_{migration.name} failed on schema "
                    f"{schema!r}: {str(exc).strip().splitlines()[0]}"
                ) from exc
            done.append(f"{migration.version:04d}_{migration.name}")
        return done
    finally:
        if not conn.closed:
            conn.execute("SELECT pg_advisory_unlock(%s)", [key])


def require_current(conn: psycopg.Connection, schema: str) -> None:
    """Raise MigrationError with the fix when the schema is not at this code's version."""
    version = schema_version(conn, schema)
    if version != LATEST_VERSION:
        raise MigrationError(
            f"schema {schema!r} is at version {version}, this cronbase needs {LATEST_VERSION}: "
            "run `cronbase migrate`"
        )
