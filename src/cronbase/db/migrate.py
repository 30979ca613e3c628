"""Forward-only migrations from ``db/migrations/NNNN_name.sql``, applied under an advisory lock.

Each migration runs in its own transaction. The lock is per schema, so several processes can
run ``migrate`` at once: one applies, the others wait and then find nothing to do.

Rolling deploys: migrations are *expand* by default: the schema they make still serves the code
of the previous release (a new nullable column, a new table), so its workers and producers keep
running while the new release rolls out. A *contract* migration (one that drops or renames what
older code uses) says so on a line of its own, ``-- contract: workers from NNNN``: the lowest
migration a worker's code must know to live with it. ``cronbase migrate`` refuses to apply it
while a live worker knows less (or records nothing: a release before 0016), naming them, unless
forced. None is marked today: 0001 to 0019 are all expand-only. The mark is kept in
``migrations.contract_from``: a worker whose code is older than the schema (the previous release
restarted mid-deploy) starts unless a newer migration is a contract one it is too old for.
(Releases before 0016 predate this rule: their workers refuse any schema but their own.)
"""

from __future__ import annotations

import logging
import re
import time
import zlib
from dataclasses import dataclass
from importlib import resources

import psycopg
from psycopg import sql

from ..errors import MigrationError
from .queries import render

log = logging.getLogger(__name__)

# A migration that alters several tables takes their locks one by one while the workers of the
# running release (a rolling deploy) lock the same tables in their own order: PostgreSQL may end
# the cycle by failing the migration's transaction. It rolled back whole, so it is run again.
DEADLOCK_RETRIES = 8
_RETRIED = (psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable)

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")
_CONTRACT = re.compile(r"^-- contract: workers from (\d{4})\s*$", re.MULTILINE)
# A worker seen within this is alive (operations/stats.py's LIVE_WITHIN: its heartbeat runs
# every few seconds, so a minute of silence is a worker that is gone).
LIVE_WITHIN_SECONDS = 60


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    template: str
    # A contract migration: the lowest migration a live worker's code must know (None: expand).
    contract_from: int | None = None


def parse_migration(file_name: str, text: str) -> Migration:
    """A migration from its file: ``NNNN_name.sql``, and a contract one when a line of its own
    reads ``-- contract: workers from NNNN``."""
    match = _FILE.match(file_name)
    if match is None:
        raise ValueError(f"a migration file is named NNNN_name.sql, not {file_name!r}")
    contract = _CONTRACT.search(text)
    return Migration(int(match[1]), match[2], text, int(contract[1]) if contract else None)


def load_migrations() -> list[Migration]:
    """All packaged migrations in version order; gaps and duplicates are errors."""
    found = []
    folder = resources.files("cronbase.db") / "migrations"
    for entry in folder.iterdir():
        if _FILE.match(entry.name):
            found.append(parse_migration(entry.name, entry.read_text("utf-8")))
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


def apply_migrations(conn: psycopg.Connection, schema: str, *, force: bool = False) -> list[str]:
    """Apply every pending migration; returns the names applied (empty when up to date).

    A pending contract migration is refused while a live worker's code is older than it needs
    (MigrationError naming them), unless ``force``."""
    try:
        return _apply(conn, schema, force=force)
    except psycopg.errors.InsufficientPrivilege as exc:
        # An application role (docs/guides/least-privilege.md) may use the schema, not change it.
        raise MigrationError(
            f"cannot migrate schema {schema!r}: {str(exc).strip().splitlines()[0]}; run "
            "`cronbase migrate` as the role that owns the schema (or may create it)"
        ) from None


def too_old_workers(conn: psycopg.Connection, schema: str, needed: int) -> list[str]:
    """Live workers whose code knows fewer migrations than ``needed``, as "id (host pid N, code
    0.1.0 m16)"; a workers row without the column (before 0016) is read as knowing none."""
    exists = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL",
        [f"{sql.Identifier(schema).as_string(conn)}.workers"],
    ).fetchone()
    if not exists or not exists[0]:
        return []
    # to_jsonb(w): the columns may not exist yet (a schema before 0016 migrated in one go).
    rows = conn.execute(
        sql.SQL(
            "SELECT id, hostname, pid, to_jsonb(w) ->> 'version', "
            "(to_jsonb(w) ->> 'schema_version')::int FROM {}.workers w "
            "WHERE last_seen_at > now() - make_interval(secs => %s) "
            "AND coalesce((to_jsonb(w) ->> 'schema_version')::int, 0) < %s ORDER BY started_at"
        ).format(sql.Identifier(schema)),
        [LIVE_WITHIN_SECONDS, needed],
    ).fetchall()
    named = []
    for wid, host, pid, version, known in rows:
        code = "before 0016" if known is None else f"{version or '?'} m{known}"
        named.append(f"{wid} (host {host} pid {pid}, code {code})")
    return named


def _refuse_contract(conn: psycopg.Connection, schema: str, pending: list[Migration]) -> None:
    contracts = [m for m in pending if m.contract_from is not None]
    if not contracts:
        return
    first = max(contracts, key=lambda m: m.contract_from or 0)
    needed = first.contract_from or 0
    old = too_old_workers(conn, schema, needed)
    if old:
        raise MigrationError(
            f"migration {first.version:04d}_{first.name} is a contract migration: workers of "
            f"code before migration {needed:04d} cannot run against it, and {len(old)} are "
            f"alive: {', '.join(old[:10])}{' ...' if len(old) > 10 else ''}; finish the deploy "
            "(stop or upgrade them) first, or run `cronbase migrate --force`"
        )


def _apply(conn: psycopg.Connection, schema: str, *, force: bool) -> list[str]:
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
        if not force:
            _refuse_contract(conn, schema, [m for m in MIGRATIONS if m.version not in applied])
        done = []
        for migration in MIGRATIONS:
            if migration.version in applied:
                continue
            _apply_one(conn, schema, migration)
            done.append(f"{migration.version:04d}_{migration.name}")
        return done
    finally:
        if not conn.closed:
            conn.execute("SELECT pg_advisory_unlock(%s)", [key])


def _apply_one(conn: psycopg.Connection, schema: str, migration: Migration) -> None:
    """One migration in one transaction, run again (bounded) when a deadlock with the running
    workers ended it."""
    ident = sql.Identifier(schema)
    name = f"{migration.version:04d}_{migration.name}"
    for attempt in range(1, DEADLOCK_RETRIES + 1):
        try:
            with conn.transaction():
                conn.execute(render(migration.template, schema))
                conn.execute(
                    sql.SQL("INSERT INTO {}.migrations (version, name) VALUES (%s, %s)").format(
                        ident
                    ),
                    [migration.version, migration.name],
                )
                if migration.contract_from is not None:  # the column exists from 0016 on
                    conn.execute(
                        sql.SQL(
                            "UPDATE {}.migrations SET contract_from = %s WHERE version = %s"
                        ).format(ident),
                        [migration.contract_from, migration.version],
                    )
            return
        except _RETRIED as exc:
            if attempt == DEADLOCK_RETRIES:
                raise MigrationError(
                    f"migration {name} failed on schema {schema!r} {attempt} times over: "
                    f"{str(exc).strip().splitlines()[0]}"
                ) from exc
            log.warning(
                "migration %s: %s; running it again (%d of %d)",
                name,
                str(exc).strip().splitlines()[0],
                attempt + 1,
                DEADLOCK_RETRIES,
            )
            time.sleep(min(0.1 * 2**attempt, 3.0))
        except psycopg.Error as exc:
            raise MigrationError(
                f"migration {name} failed on schema {schema!r}: {str(exc).strip().splitlines()[0]}"
            ) from exc


def require_current(conn: psycopg.Connection, schema: str, *, newer_ok: bool = False) -> int:
    """The schema's version; MigrationError with the fix when it is not this code's.

    With ``newer_ok`` (a worker starting), a schema newer than this code is accepted when every
    newer migration is expand-only or a contract one this code is recent enough for: the
    previous release's worker restarted in the middle of a rolling deploy."""
    version = schema_version(conn, schema)
    if version == LATEST_VERSION:
        return version
    if version > LATEST_VERSION and newer_ok:
        blocking = conn.execute(
            sql.SQL(
                "SELECT version, name, contract_from FROM {}.migrations "
                "WHERE version > %s AND contract_from > %s ORDER BY version LIMIT 1"
            ).format(sql.Identifier(schema)),
            [LATEST_VERSION, LATEST_VERSION],
        ).fetchone()
        if blocking is None:
            return version
        raise MigrationError(
            f"schema {schema!r} is at version {version}, and its migration "
            f"{blocking[0]:04d}_{blocking[1]} needs workers whose code knows migration "
            f"{blocking[2]:04d}; this cronbase knows {LATEST_VERSION}: upgrade cronbase"
        )
    if version > LATEST_VERSION:
        raise MigrationError(
            f"schema {schema!r} is at version {version}, newer than this cronbase "
            f"({LATEST_VERSION}): upgrade cronbase"
        )
    raise MigrationError(
        f"schema {schema!r} is at version {version}, this cronbase needs {LATEST_VERSION}: "
        "run `cronbase migrate`"
    )
