"""Operator actions, audited: each runs in one transaction that also writes its audit row, so an
action that happened is in the log and one that was refused is not.

An action is a generator (pure: no I/O): it yields the statements to run, one at a time, and is
sent each one's rows; what it returns is its result and the audit row's ``detail``. A statement
that fails is thrown into it (each runs in a savepoint, so it may go on: look up why, or step
over one job of many). :func:`perform` and :func:`perform_async` run it: the two shells are the
only I/O. Every front end (the CLI, the dashboard, Django's admin) calls the library's actions,
never this module: one vocabulary, ``<noun>.<verb>`` on ``<kind>:<id>`` (``job.retry`` on
``job:12``), and the actor (``cli:user@host``, ``dashboard@127.0.0.1``, ``api`` by default).
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg.rows import dict_row

from ..db.steps import drive, drive_async

if TYPE_CHECKING:
    from ..db.database import Database, Row

T = TypeVar("T")

# Who acts when the caller says nothing: code calling the library.
DEFAULT_ACTOR = "api"

# One statement to run and its parameters; the action is sent back its rows.
Step = tuple[bytes, Mapping[str, Any]]
# What an action returns: its result, and the detail its audit row keeps.
Action = Generator[Step, "list[Row]", tuple[T, dict[str, Any]]]
# A statement the database refuses so (a constraint) is thrown into the action; it ran in a
# savepoint, so the action may go on. Anything else ends the transaction.
_THROWN = (psycopg.IntegrityError,)


def audit_params(actor: str | None, action: str, target: str, detail: dict[str, Any]) -> Row:
    return {
        "actor": actor or DEFAULT_ACTOR,
        "action": action,
        "target": target,
        "detail": json.dumps(detail, default=str),
    }


def perform(db: Database, actor: str | None, action: str, target: str, steps: Action[T]) -> T:
    """Run an action and write its audit row, in one transaction."""
    with (
        db.pool().connection() as conn,
        conn.transaction(),
        conn.cursor(row_factory=dict_row) as cur,
    ):

        def run(step: Step) -> list[Row]:
            with conn.transaction():
                return db.opened(cur.execute(*step).fetchall())

        result, detail = drive(steps, run, _THROWN)
        cur.execute(db.queries.insert_audit, audit_params(actor, action, target, detail))
    return result


async def perform_async(
    db: Database, actor: str | None, action: str, target: str, steps: Action[T]
) -> T:
    """The async twin of :func:`perform`."""
    pool = await db.async_pool()
    async with (
        pool.connection() as conn,
        conn.transaction(),
        conn.cursor(row_factory=dict_row) as cur,
    ):

        async def run(step: Step) -> list[Row]:
            async with conn.transaction():
                await cur.execute(*step)
                return db.opened(await cur.fetchall())

        result, detail = await drive_async(steps, run, _THROWN)
        await cur.execute(db.queries.insert_audit, audit_params(actor, action, target, detail))
    return result
