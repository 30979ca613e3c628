"""Every operator action, from every front end, is in the audit log with its real actor.

The command line's commands and the dashboard's POST routes are enumerated (the click tree, the
Starlette routes), so a new command or route fails here until it says what it does: writes (how
to invoke it on a prepared database, and the audit action it writes), only reads (run against a
read-only transaction default, so a write fails it), or is exempt (and why).
"""

from __future__ import annotations

import getpass
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import click
import httpx
import psycopg
import pytest
from starlette.routing import Route

import cronbase
from cronbase.cli import cli
from cronbase.dashboard import create_app
from tests.browser.conftest import csrf_token, serving
from tests.e2e.test_cli import APP, ok
from tests.e2e.test_cli import cronbase as run_cli

# -- the command line ----------------------------------------------------------------------------

# Not operator actions on the database's state, so not audited, and why.
EXEMPT = {
    # A producer's call, as defer() from code is: the job itself (task, payload, idempotency
    # key, created_at) is the record; an audit row per job would double the writes of scripts
    # and cron lines that enqueue in bulk.
    "enqueue": "a producer, not an operator",
    # They run jobs and fire schedule slots; each job's attempts and outcome are its record.
    "worker": "runs jobs",
    "tick": "fires schedules and runs jobs",
    # Its own schema (cronbase_demo), emptied at each start: nothing of an operator's.
    "demo": "a demonstration on a schema of its own",
    # Serves the pages; each POST it answers is audited (the dashboard tests below).
    "dashboard": "serves the dashboard, whose actions are audited one by one",
    # A deploy step, run by deploy scripts and by every process on the embedded server:
    # cronbase.migrations keeps each version and when it was applied, and the audit log is a
    # table a migration creates (it cannot record the migration that makes it).
    "migrate": "a deploy step, recorded in cronbase.migrations",
    # Prints a new random key; reads and writes no database.
    "keys new": "prints a new key, touches no database",
}

# Commands that only read, each as it is run here on the prepared database; {name} is filled in
# from it. Run with default_transaction_read_only=on: a write fails the command.
READ_ONLY: dict[str, tuple[str, ...]] = {
    "jobs list": ("jobs", "list"),
    "jobs show": ("jobs", "show", "{queued}"),
    "stats": ("stats",),
    "tasks": ("tasks",),
    "check": ("check", "--max-dead", "5"),
    "audit": ("audit",),
    "workers list": ("workers", "list"),
    "queues list": ("queues", "list"),
    "queues fair": ("queues", "fair"),
    "queues demand": ("queues", "demand"),
    "schedules list": ("schedules", "list"),
    "effects list": ("effects", "list"),
    "effects show": ("effects", "show", "{effect}"),
    "grants": ("grants", "{role}"),  # without --apply: prints the statements
    "prune": ("prune", "--older-than", "1d", "--dry-run"),
    "sql": ("sql", "claim_jobs"),  # prints statements: reads no database at all
    "keys status": ("keys", "status"),
}


@dataclass(frozen=True)
class Write:
    command: str  # its path in the tree
    args: tuple[str, ...]
    action: str  # the audit row's action
    env: tuple[tuple[str, str], ...] = ()  # the environment it needs besides the database's


# A key for `keys rotate` (32 bytes of 0x01): nothing is sealed on the prepared database.
KEYS = "k1=" + "AQEB" * 10 + "AQE="
ADDED = ("--cron", "0 3 * * *", "--key", "added", "--payload", '{"message": "m"}')
WRITES = [
    Write("jobs retry", ("jobs", "retry", "{queued}"), "job.retry"),
    Write("jobs retry", ("jobs", "retry", "--dead"), "dead.requeue"),
    Write("jobs cancel", ("jobs", "cancel", "{queued}"), "job.cancel"),
    Write("queues pause", ("queues", "pause", "default"), "queue.pause"),
    Write("queues resume", ("queues", "resume", "default"), "queue.resume"),
    Write("queues limit", ("queues", "limit", "default", "3"), "queue.limit"),
    Write("queues rate", ("queues", "rate", "default", "5/second"), "queue.rate"),
    Write("queues aging", ("queues", "aging", "default", "5m"), "queue.aging"),
    Write("queues weight", ("queues", "weight", "default", "tenant-1", "2"), "queue.weight"),
    Write("prune", ("prune", "--older-than", "0s", "--status", "dead"), "jobs.prune"),
    Write("workers prune", ("workers", "prune", "--older-than", "0s"), "workers.prune"),
    Write("schedules add", ("--app", APP, "schedules", "add", "explode", *ADDED), "schedule.add"),
    Write("schedules remove", ("schedules", "remove", "{schedule}"), "schedule.remove"),
    Write("schedules pause", ("schedules", "pause", "{schedule}"), "schedule.pause"),
    Write("schedules resume", ("schedules", "resume", "{schedule}"), "schedule.resume"),
    Write("schedules run-now", ("schedules", "run-now", "{schedule}"), "schedule.run_now"),
    Write("effects forget", ("effects", "forget", "{effect}"), "effect.forget"),
    Write("grants", ("grants", "{role}", "--apply"), "role.grant"),
    Write("keys rotate", ("keys", "rotate"), "keys.rotate", (("CRONBASE_ENCRYPTION_KEYS", KEYS),)),
]


def command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> set[str]:
    """Every command of the tree, by its words (``queues pause``)."""
    found: set[str] = set()
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found |= command_paths(command, (*prefix, name))
        else:
            found.add(" ".join((*prefix, name)))
    return found


def test_every_command_says_whether_it_writes_and_how_it_is_audited() -> None:
    commands = command_paths(cli)
    written = {w.command for w in WRITES}
    unknown = sorted(commands - written - READ_ONLY.keys() - EXEMPT.keys())
    assert unknown == [], (
        f"new commands {unknown}: say whether each writes (WRITES: how to invoke it on the "
        "prepared database, and the audit action it writes), only reads (READ_ONLY) or is not "
        "an operator action (EXEMPT, and why)"
    )
    stale = sorted((written | READ_ONLY.keys() | EXEMPT.keys()) - commands)
    assert stale == [], f"no such commands (any more): {stale}"
    assert EXEMPT.keys().isdisjoint(written | READ_ONLY.keys())


@pytest.fixture
def role(server_url: str, database_url: str) -> Iterator[str]:
    """A role for ``grants`` (a role is the server's, not the database's: a name of its own)."""
    name = f"audited_{os.getpid()}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP ROLE IF EXISTS "{name}"')
        conn.execute(f'CREATE ROLE "{name}"')
    yield name
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'DROP OWNED BY "{name}"')  # the grants, which the role cannot outlive
        conn.execute(f'DROP ROLE "{name}"')


@pytest.fixture
def prepared(app: cronbase.App, role: str) -> dict[str, str]:
    """A database with one of everything a command acts on: a queued job and a dead one (queue
    default), a schedule, an effect, a role; the audit log empty."""

    @app.task(max_attempts=1)
    def explode(message: str) -> None:
        raise RuntimeError(message)

    @app.task
    def record(n: int) -> None: ...

    explode.defer(message="boom")
    app.run_worker(burst=True, install_signal_handlers=False, schedule=False)
    queued = record.defer(n=1)
    app.schedules.add("explode", cron="0 4 * * *", key="nightly", payload={"message": "x"})
    with app.effects.once("charge:1") as effect:
        effect.record(charge="ch_1")
    with app.pool().connection() as conn:
        conn.execute("DELETE FROM cronbase.audit_log")
    return {"queued": str(queued), "schedule": "nightly", "effect": "charge:1", "role": role}


def filled(text: str, values: dict[str, str]) -> str:
    """``text`` with ``{name}`` replaced by the prepared value (JSON text left as it is)."""
    for name, value in values.items():
        text = text.replace(f"{{{name}}}", value)
    return text


def audit_log(db: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    return [
        tuple(r) for r in db.execute("SELECT actor, action FROM cronbase.audit_log ORDER BY id")
    ]


@pytest.mark.parametrize("write", WRITES, ids=lambda w: w.action)
def test_a_command_that_writes_is_audited_with_its_user_and_host(
    database_url: str, db: psycopg.Connection[Any], prepared: dict[str, str], write: Write
) -> None:
    result = run_cli(
        database_url, *(filled(arg, prepared) for arg in write.args), **dict(write.env)
    )
    assert result.returncode == 0, result.stderr
    actor = f"cli:{getpass.getuser()}@{socket.gethostname()}"
    assert audit_log(db) == [(actor, write.action)]


@pytest.mark.parametrize("command", sorted(READ_ONLY))
def test_a_command_that_only_reads_writes_nothing(
    database_url: str, db: psycopg.Connection[Any], prepared: dict[str, str], command: str
) -> None:
    args = [filled(arg, prepared) for arg in READ_ONLY[command]]
    # Every transaction of the command read-only: a write is an error, and the command fails.
    result = run_cli(database_url, *args, PGOPTIONS="-c default_transaction_read_only=on")
    assert result.returncode == 0, result.stderr
    assert audit_log(db) == []


# -- the dashboard -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Post:
    route: str  # the route's name
    path: str
    form: dict[str, str]
    action: str


POSTS = [
    Post("retry_job", "/jobs/{queued}/retry", {}, "job.retry"),
    Post("cancel_job", "/jobs/{queued}/cancel", {}, "job.cancel"),
    Post("requeue_dead", "/dead/requeue", {"task": "explode"}, "dead.requeue"),
    Post("bulk_jobs", "/jobs/bulk", {"action": "retry", "ids": "{queued}"}, "jobs.bulk_retry"),
    Post("bulk_jobs", "/jobs/bulk", {"action": "cancel", "ids": "{queued}"}, "jobs.bulk_cancel"),
    Post("bulk_jobs", "/jobs/bulk", {"action": "delete", "ids": "{queued}"}, "jobs.bulk_delete"),
    Post("pause_queue", "/queues/pause", {"queue": "default"}, "queue.pause"),
    Post("resume_queue", "/queues/resume", {"queue": "default"}, "queue.resume"),
    Post("limit_queue", "/queues/limit", {"queue": "default", "max_running": "3"}, "queue.limit"),
    Post("rate_queue", "/queues/rate", {"queue": "default", "rate": "5/second"}, "queue.rate"),
    Post("age_queue", "/queues/aging", {"queue": "default", "aging": "5m"}, "queue.aging"),
    Post("pause_schedule", "/schedules/pause", {"key": "{schedule}"}, "schedule.pause"),
    Post("resume_schedule", "/schedules/resume", {"key": "{schedule}"}, "schedule.resume"),
    Post("run_schedule", "/schedules/run-now", {"key": "{schedule}"}, "schedule.run_now"),
]


def test_every_post_route_of_the_dashboard_is_listed_with_its_action(app: cronbase.App) -> None:
    routes = {
        r.name
        for r in create_app(app).routes
        if isinstance(r, Route) and "POST" in (r.methods or ())
    }
    unlisted = sorted(routes - {p.route for p in POSTS})
    assert unlisted == [], (
        f"new POST routes {unlisted}: add each to POSTS with a form that works on the prepared "
        "database and the audit action it writes"
    )
    assert {p.route for p in POSTS} <= routes


@pytest.mark.parametrize("post", POSTS, ids=lambda p: f"{p.route}-{p.action}")
def test_a_dashboard_action_is_audited_with_its_client(
    app: cronbase.App, db: psycopg.Connection[Any], prepared: dict[str, str], post: Post
) -> None:
    with (
        serving(create_app(app), app) as url,
        httpx.Client(base_url=url, headers={"Origin": url}, timeout=30) as client,
    ):
        token = csrf_token(client.get("/").text)
        form = {name: filled(value, prepared) for name, value in post.form.items()}
        done = client.post(filled(post.path, prepared), data={**form, "csrf_token": token})
    assert done.status_code == 303, done.text
    assert audit_log(db) == [("dashboard@127.0.0.1", post.action)]


def test_a_removed_schedule_s_audit_row_keeps_what_it_was(
    database_url: str, db: psycopg.Connection[Any], prepared: dict[str, str]
) -> None:
    """Once removed, the audit row is the only record of the schedule's definition."""
    ok(run_cli(database_url, "schedules", "remove", "nightly"))
    (entry,) = json.loads(ok(run_cli(database_url, "audit", "--json")))
    assert (entry["action"], entry["target"]) == ("schedule.remove", "schedule:nightly")
    assert entry["detail"] == {
        "task": "explode", "cron": "0 4 * * *", "tz": "UTC", "queue": None, "catch_up": "latest"
    }  # fmt: skip
