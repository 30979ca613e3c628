"""Least privilege: the GRANT statements an application role needs on a cronbase schema (to run
workers, enqueue, tick schedules, prune and serve the dashboard) while another role owns the
schema and migrates it. ``cronbase grants ROLE [--apply]`` prints or runs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

import psycopg
from psycopg import sql

from ..errors import ConfigurationError, InvalidNameError, MigrationError
from . import migrate

Privilege = Literal["SELECT", "INSERT", "UPDATE", "DELETE"]

# Per table, exactly the privileges the statements of db/sql/*.sql (and migrate.require_current)
# need, read from them; tests/e2e/test_least_privilege.py checks each one is needed and that
# together they suffice, statement by statement. PostgreSQL rules behind the choices: an UPDATE
# or DELETE with a WHERE, and any RETURNING, also reads (SELECT); SELECT ... FOR UPDATE needs
# UPDATE; INSERT ... ON CONFLICT DO UPDATE needs UPDATE; a foreign key's ON DELETE CASCADE runs
# with the referencing table owner's rights, not the deleting role's.
TABLE_PRIVILEGES: Mapping[str, tuple[Privilege, ...]] = MappingProxyType(
    {
        # SELECT: migrate.require_current, which a worker runs at start (the schema version).
        # Never written by this role: `cronbase migrate` is the owner's.
        "migrations": ("SELECT",),
        # The live table. SELECT: holds_lease, list_queues, list_unserved_jobs, the reads of
        #   jobs_all, and the WHERE and RETURNING of the writes below.
        # INSERT: insert_job, insert_keyed_job, upsert_job_replace, insert_jobs (enqueue), the
        #   restores of retry_job and requeue_dead_jobs.
        # UPDATE: claim_jobs, finish_jobs, heartbeat_jobs, release_jobs,
        #   reap_expired_jobs, age_priorities, retry_job, requeue_dead_jobs; upsert_job_replace
        #   (ON CONFLICT DO UPDATE); the FOR UPDATE of the claim, reaper and move statements.
        # DELETE: every outcome (a finished job moves to the history: complete_jobs,
        #   finish_jobs, reap_expired_jobs, cancel_job), prune_jobs, move_finished_jobs.
        "jobs": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        # Finished jobs (migration 0015). SELECT: the reads of jobs_all, retry_job,
        #   requeue_dead_jobs, prune_jobs. INSERT: every outcome's move. UPDATE: insert_graph
        #   (has_dependents of a finished parent). DELETE: retry_job and requeue_dead_jobs (a
        #   job moved back), prune_jobs, delete_finished_jobs.
        "jobs_history": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        # The default partitions, which prune_defaults_exclusive names (the day partitions are
        #   only ever reached through jobs_history, whose grants cover them).
        "jobs_history_succeeded_default": ("SELECT", "DELETE"),
        "jobs_history_cancelled_default": ("SELECT", "DELETE"),
        "jobs_history_dead_default": ("SELECT", "DELETE"),
        # SELECT: get_job, list_jobs, search_jobs, count_jobs_by_status, queue_overview,
        #   throughput_by_minute, task_stats, job_graph, watch_job, insert_keyed_job.
        "jobs_all": ("SELECT",),
        # SELECT: the reads of job_attempts_all. INSERT: the attempt rows of finish_jobs,
        #   release_jobs, reap_expired_jobs, retry_job, cancel_job, move_legacy_attempts.
        #   DELETE: prune_jobs and prune_defaults_exclusive (a deleted job's attempts).
        "job_attempts": ("SELECT", "INSERT", "DELETE"),
        # SELECT, DELETE: prune_attempts.
        "job_attempts_default": ("SELECT", "DELETE"),
        # The attempts of before migration 0015. SELECT: job_attempts_all. UPDATE: the FOR
        #   UPDATE of move_legacy_attempts. DELETE: move_legacy_attempts, prune_jobs.
        "job_attempts_legacy": ("SELECT", "UPDATE", "DELETE"),
        # SELECT: list_job_attempts, task_stats.
        "job_attempts_all": ("SELECT",),
        # SELECT, INSERT, UPDATE (a key taken over, and FOR UPDATE): insert_keyed_job,
        #   move_finished_jobs. DELETE: prune_job_keys, prune_jobs (a deleted job's keys).
        "job_keys": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        # SELECT: list_workers, list_unserved_jobs, the WHERE of the writes below.
        # INSERT: register_worker. UPDATE: register_worker (ON CONFLICT DO UPDATE),
        #   heartbeat_jobs (last_seen_at). DELETE: unregister_worker (a clean stop).
        "workers": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        # SELECT: list_schedules, get_schedule, lock_due_schedules, RETURNING of the writes.
        # INSERT: upsert_schedule. UPDATE: upsert_schedule (ON CONFLICT DO UPDATE),
        #   pause_schedule, resume_schedule, advance_schedule, lock_due_schedules (FOR UPDATE).
        # DELETE: remove_schedule.
        "schedules": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        # SELECT: enter_effect, get_effect, list_effects, RETURNING of the writes.
        # INSERT: enter_effect. UPDATE: take_over_effect, reconcile_effect, finish_effect.
        # DELETE: forget_effect.
        "effects": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        # SELECT: list_queues, queue_overview, claim_jobs (paused
        #   queues are skipped), RETURNING of the writes.
        # INSERT: pause_queue, set_queue_limit, set_queue_rate, set_queue_aging. UPDATE: the
        #   same (ON CONFLICT DO UPDATE), resume_queue, age_priorities (aged_at, FOR UPDATE).
        # No DELETE: a queue's row stays once it was paused.
        "queues": ("SELECT", "INSERT", "UPDATE"),
        # SELECT: claim_flow_candidates, claim_flow_jobs (limits and start logs), list_queues.
        # INSERT, UPDATE: register_task_limits, claim_flow_jobs (start logs, ON CONFLICT DO
        #   UPDATE). DELETE: register_task_limits (a task whose limits were removed),
        #   prune_flow_logs (idle key logs).
        "flow_limits": ("SELECT", "INSERT", "UPDATE", "DELETE"),
        # SELECT: claim_fair_jobs (passes and weights), list_fair_keys, RETURNING of the writes.
        # INSERT, UPDATE: claim_fair_jobs (passes, ON CONFLICT DO UPDATE), set_fair_weight.
        # No DELETE: a key's row stays (its weight, its place in the round robin).
        "fair_keys": ("SELECT", "INSERT", "UPDATE"),
        # SELECT: list_audit, insert_audit's RETURNING. INSERT: insert_audit.
        # No UPDATE, no DELETE: the log is append-only, and this role cannot rewrite it.
        "audit_log": ("SELECT", "INSERT"),
        # SELECT: insert_graph, and settle_dependents (the triggers run with the rights of
        #   whoever ends the parent). INSERT: insert_graph. DELETE: prune_jobs (a deleted
        #   job's edges); a dropped day's go with it, as the owner (drop_history_days).
        "job_deps": ("SELECT", "INSERT", "DELETE"),
        # SELECT: get_event (wait_for), suspend_jobs (is the event there?). INSERT: emit_event.
        #   DELETE: prune_events (retention).
        "events": ("SELECT", "INSERT", "DELETE"),
        # The claims' tickets, ticks, cursors and lanes (migration 0020): written only by
        #   claim_tickets, which runs as the schema's owner (EXECUTE below). SELECT, DELETE:
        #   clear_tickets (the reaper) deletes what every cursor passed; SELECT on lanes: the
        #   same. No INSERT, no UPDATE: this role cannot forge a ticket or move a cursor.
        "tickets": ("SELECT", "DELETE"),
        "ticks": ("SELECT", "DELETE"),
        "lane_claims": ("SELECT", "DELETE"),
        "lanes": ("SELECT",),
        # Each queue's minutes (migration 0022). SELECT: queue_minutes, mark_queue_minute's
        #   RETURNING, the WHERE of prune_queue_minutes. INSERT: mark_queue_minute,
        #   roll_up_queue_minute (ON CONFLICT DO NOTHING needs no UPDATE). DELETE:
        #   prune_queue_minutes. No UPDATE: a minute is written once.
        "queue_minutes": ("SELECT", "INSERT", "DELETE"),
    }
)
# Sequences a statement calls nextval() on: insert_graph draws a workflow's ids up front, so its
# edges and workflow_id can name them in the same statement.
SEQUENCE_PRIVILEGES: Mapping[str, tuple[Literal["USAGE"], ...]] = MappingProxyType(
    {"jobs_id_seq": ("USAGE",)}
)
# Functions PUBLIC may not execute (revoked by migrations 0015 and 0020): they run as the
# schema's owner (SECURITY DEFINER) to create and drop the history's day partitions, which the
# application role's workers do in their retention rounds, and to write the claim's tickets.
# Granted by signature.
FUNCTION_PRIVILEGES: Mapping[str, tuple[Literal["EXECUTE"], ...]] = MappingProxyType(
    {
        "create_history_days(date, date)": ("EXECUTE",),
        "drop_history_days(text, timestamptz)": ("EXECUTE",),
        # claim_jobs' claim (0020): writes the tickets, ticks, cursors and lanes as the owner.
        "claim_tickets(text, integer, text[], text[])": ("EXECUTE",),
        # `cronbase keys rotate` (0025): attempts' sealed errors re-sealed, as the owner (the
        # role may not update attempts: they are written once).
        "reseal_attempts(bigint[], bigint[], text[], text[], text[], text[])": ("EXECUTE",),
    }
)
# The SQL interface (migrations 0023, 0024; docs/reference/sql.md): what a role of another
# language is granted to enqueue and work queues (`cronbase grants ROLE --interface`), and all it
# is granted. The functions run as the schema's owner (SECURITY DEFINER) with their own checks;
# PUBLIC may not execute them.
INTERFACE_PRIVILEGES: Mapping[str, tuple[Literal["EXECUTE"], ...]] = MappingProxyType(
    {
        "defer(text, jsonb, text, integer, timestamptz, interval, integer, interval, text, text,"
        " integer)": ("EXECUTE",),
        # Working a queue (migration 0024): a worker of another language.
        "register_worker(text, text[], text[], text, integer, integer)": ("EXECUTE",),
        "unregister_worker(text)": ("EXECUTE",),
        "claim(text, integer, text[], text[])": ("EXECUTE",),
        "renew(text, bigint[], uuid[])": ("EXECUTE",),
        "complete(text, bigint, uuid, jsonb)": ("EXECUTE",),
        "fail(text, bigint, uuid, text, interval, text, boolean, text)": ("EXECUTE",),
        "release(text, bigint[], uuid[])": ("EXECUTE",),
    }
)
# Not granted, on purpose:
# - other sequences: job_attempts and audit_log ids are identity columns, whose sequences an
#   INSERT advances without any privilege on them (the test checks no other sequence exists);
# - other functions: the statements call built-ins (pg_notify, gen_random_uuid, now,
#   pg_try_advisory_xact_lock...) and the schema's own (parents_results, resolve_dependents,
#   notify_done, settle_dependents, repend_dependents, history_settled, insert_keyed_job,
#   jobs_ready_again), which
#   run with the caller's rights and PUBLIC may execute, as it may any new function (the test
#   checks);
# - CREATE on the schema, TRUNCATE, REFERENCES, TRIGGER, ownership: only migrations need them;
# - ALTER DEFAULT PRIVILEGES: a migration that adds a table is followed by an explicit
#   `cronbase grants ROLE --apply` (it is idempotent).

# PostgreSQL reads these names, even quoted, as PUBLIC (every role) and as "no role".
_RESERVED_ROLE_NAMES = ("public", "none")
# The server truncates longer identifiers (NAMEDATALEN - 1): a grant could reach another role.
_MAX_NAME_BYTES = 63


def check_role_name(role: str) -> str:
    """The role name, or InvalidNameError when no GRANT should name it."""
    if not role or role.isspace():
        raise InvalidNameError("role name is empty; give the application role, e.g. app")
    if role in _RESERVED_ROLE_NAMES:
        raise InvalidNameError(
            f"role name {role!r} is reserved by PostgreSQL (it would grant to every role or "
            "none); give the application role, e.g. app"
        )
    if len(role.encode()) > _MAX_NAME_BYTES:
        raise InvalidNameError(
            f"role name {role!r} is longer than {_MAX_NAME_BYTES} bytes, the longest "
            "PostgreSQL keeps"
        )
    return role


def grant_statements(schema: str, role: str, *, interface: bool = False) -> list[sql.Composed]:
    """The statements, in order: USAGE on the schema, then each table's privileges; with
    ``interface``, USAGE and EXECUTE on the SQL interface's functions only.

    >>> [s.as_string(None) for s in grant_statements("cronbase", "app")][:2]
    ['GRANT USAGE ON SCHEMA "cronbase" TO "app"', 'GRANT SELECT ON TABLE "cronbase"."migrations" TO "app"']
    """
    grantee = sql.Identifier(check_role_name(role))
    statements = [sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), grantee)]
    granted = [
        ("TABLE", TABLE_PRIVILEGES),
        ("SEQUENCE", SEQUENCE_PRIVILEGES),
        ("FUNCTION", FUNCTION_PRIVILEGES),
    ]
    if interface:
        granted = [("FUNCTION", INTERFACE_PRIVILEGES)]
    for kind, objects in granted:
        for name, privileges in objects.items():
            name, paren, signature = name.partition("(")  # a function's argument types
            statements.append(
                sql.SQL("GRANT {} ON {} {}{} TO {}").format(
                    sql.SQL(", ").join(sql.SQL(privilege) for privilege in privileges),
                    sql.SQL(kind),
                    sql.Identifier(schema, name),
                    sql.SQL(paren + signature),
                    grantee,
                )
            )
    return statements


def render_grants(schema: str, role: str, *, interface: bool = False) -> list[str]:
    """The statements as SQL text, one per line, each ending with ``;`` (ready for psql)."""
    found = grant_statements(schema, role, interface=interface)
    return [f"{statement.as_string(None)};" for statement in found]


def require_role(conn: psycopg.Connection[Any], role: str) -> None:
    """ConfigurationError naming ``role`` when no such role exists on the server."""
    check_role_name(role)
    if conn.execute("SELECT FROM pg_roles WHERE rolname = %s", [role]).fetchone() is None:
        raise ConfigurationError(
            f"role {role!r} does not exist; create it first "
            f"(CREATE ROLE {sql.Identifier(role).as_string(None)} LOGIN PASSWORD '...')"
        )


def require_owner(conn: psycopg.Connection[Any], schema: str) -> None:
    """ConfigurationError naming the owner unless this connection's role may act as the owner of
    the schema and its tables (their owner, a member of it, or a superuser).

    Only an owner's GRANT works: another role's gives nothing and PostgreSQL only warns.
    """
    row = conn.execute(
        "SELECT current_user::text, n.nspowner::regrole::text,"
        " pg_has_role(current_user, n.nspowner, 'USAGE')"
        " AND COALESCE(bool_and(pg_has_role(current_user, c.relowner, 'USAGE')), true)"
        " FROM pg_namespace n"
        " LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = ANY (%(tables)s)"
        " WHERE n.nspname = %(schema)s GROUP BY n.nspowner",
        {"schema": schema, "tables": list(TABLE_PRIVILEGES)},
    ).fetchone()
    if row is None:
        raise MigrationError(f"schema {schema!r} does not exist: run `cronbase migrate` first")
    current, owner, is_owner = row
    if not is_owner:
        raise ConfigurationError(
            f"role {current!r} cannot grant on schema {schema!r}: only its owner can "
            f"(PostgreSQL would only warn); run `cronbase grants` with the database URL of "
            f"the schema's owner, {owner!r}"
        )


def apply_grants(
    conn: psycopg.Connection[Any], schema: str, role: str, *, interface: bool = False
) -> list[str]:
    """Run the grants on ``conn``, the schema owner's, in one transaction; returns them as SQL
    text. The role must exist and the schema be migrated (to this code's version) first.
    Idempotent: run it again after an upgrade's migrations.
    """
    statements = grant_statements(schema, role, interface=interface)
    require_role(conn, role)
    require_owner(conn, schema)
    migrate.require_current(conn, schema)
    with conn.transaction():
        for statement in statements:
            conn.execute(statement)
    return [f"{statement.as_string(None)};" for statement in statements]
