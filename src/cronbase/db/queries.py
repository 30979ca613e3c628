"""Named SQL statements loaded from ``db/sql/*.sql``, rendered once per schema.

Each statement sits under a ``-- name: verb_noun`` header. :class:`Queries` declares every name it
expects; importing this module fails if a file misses one or defines one twice, so a typo is found
before any worker starts.

A piece that several statements share is written once, under ``-- fragment: name``, and put in
place of ``/* include: name */`` (River's ``/* TEMPLATE */`` markers in its sqlc files): the claim
statements share how a picked row is leased and which columns come back, and the claim and the
lone completion share how a success is written. A fragment may take arguments: its ``$name``
placeholders, given as ``/* include: name(table=jobs, age=older_than) */`` (the pruners' batches). A statement that exists in two forms is written
once with a marker, and :data:`VARIANTS` renders the other form (reap_recently_expired_jobs).
"""

from __future__ import annotations

import functools
import re
import zlib
from importlib import resources
from typing import ClassVar

from psycopg import sql

from .notifier import channel_name, done_channel_name

_NAME_LINE = re.compile(r"^--\s*(name|fragment):\s*(\w+)\s*$")
_INCLUDE = re.compile(r"/\*\s*include:\s*(\w+)\s*(?:\(([^)]*)\))?\s*\*/")
_PLACEHOLDER = re.compile(r"\$(\w+)")
_ARCHIVE = re.compile(r"/\*\s*(archive|restore)\s+(\w+)\s*:(.*?)\*/", re.DOTALL)
# Where a moved row goes: a finished job to the history, a retried one back to the live table.
_MOVE_TARGET = {"archive": "jobs_history", "restore": "jobs"}

# Statements rendered from another one: name -> (the statement written, its marker, what the
# marker becomes here). In the statement written, the marker becomes nothing.
VARIANTS: dict[str, tuple[str, str, str]] = {
    # A reaper's rounds between its full ones walk the leases from where its last one left off.
    "reap_recently_expired_jobs": (
        "reap_expired_jobs",
        "/* recently */",
        "AND locked_until >= %(since)s::timestamptz",
    ),
    # A worker of every queue's fair claim has no queue test: a test it cannot know the answer
    # to at plan time made the prepared claim's generic plan read and sort every busy key.
    "claim_fair_jobs_in_queues": (
        "claim_fair_jobs",
        "/* in_fair_queues */",
        "AND split_part(substr(x.scope, 6), '|', 1) = ANY (%(queues)s::text[])",
    ),
}


def parse_statements(text: str, source: str) -> dict[str, str]:
    """Split one .sql file into {name: statement} and {"fragment:" + name: fragment}; comment
    lines are dropped."""
    statements: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        match = _NAME_LINE.match(line.strip())
        if match:
            kind, name = match.groups()
            key = name if kind == "name" else f"fragment:{name}"
            if key in statements:
                what = "statement" if kind == "name" else "fragment"
                raise RuntimeError(f"duplicate {what} name {name!r} in {source}")
            current = statements[key] = []
        elif current is not None and not line.lstrip().startswith("--"):
            current.append(line)
    result = {}
    for name, lines in statements.items():
        body = "\n".join(lines).strip().rstrip(";").strip()
        if not body:
            raise RuntimeError(f"statement {name!r} in {source} is empty")
        result[name] = body
    return result


def _expand(name: str, body: str, fragments: dict[str, str], depth: int = 0) -> str:
    def include(match: re.Match[str]) -> str:
        fragment = fragments.get(match.group(1))
        if fragment is None:
            raise RuntimeError(f"statement {name!r} includes unknown fragment {match.group(1)!r}")
        if depth > 3:
            raise RuntimeError(f"statement {name!r}: fragments include each other too deep")
        fragment = _bind(name, match.group(1), fragment, match.group(2) or "")
        return _expand(name, fragment, fragments, depth + 1)

    def archive(match: re.Match[str]) -> str:
        target, source, changes = _MOVE_TARGET[match.group(1)], match.group(2), match.group(3)
        return move_insert(name, target, source, changes, fragments.get("job_columns", ""))

    return _ARCHIVE.sub(archive, _INCLUDE.sub(include, body))


def _bind(name: str, fragment: str, text: str, arguments: str) -> str:
    """A fragment's ``$name`` placeholders, each given by the include's ``name=value``; every
    placeholder given, and nothing else."""
    values: dict[str, str] = {}
    for argument in filter(None, (a.strip() for a in arguments.split(","))):
        key, _, value = (part.strip() for part in argument.partition("="))
        if not key.isidentifier() or not re.fullmatch(r"\w+", value):
            raise RuntimeError(f"statement {name!r}: bad argument {argument!r} of {fragment!r}")
        values[key] = value
    wanted = set(_PLACEHOLDER.findall(text))
    if wanted != set(values):
        raise RuntimeError(
            f"statement {name!r}: fragment {fragment!r} takes {sorted(wanted)}, "
            f"given {sorted(values)}"
        )
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def move_insert(name: str, target: str, source: str, changes: str, columns_text: str) -> str:
    """``/* archive <cte>: col = expr; ... */``: the INSERT that writes the rows of ``cte`` (the
    live rows a DELETE returned) to jobs_history with their outcome; ``/* restore ... */`` writes
    archived rows back to jobs. Every column of jobs in its order (the ``job_columns``
    fragment), each as it was but those given a new value."""
    columns = [c.strip() for c in columns_text.split(",") if c.strip()]
    values: dict[str, str] = {}
    for change in filter(None, (c.strip() for c in changes.split(";"))):
        column, _, expression = change.partition("=")
        if column.strip() not in columns or not expression.strip():
            raise RuntimeError(f"statement {name!r}: archive sets unknown column in {change!r}")
        values[column.strip()] = expression.strip()
    listed = ", ".join(columns)
    selected = ", ".join(values.get(c, f"{source}.{c}") for c in columns)
    # Text of the packaged .sql files, put together once at import: no input reaches it.
    return f"INSERT INTO {{schema}}.{target} ({listed}) SELECT {selected} FROM {source}"  # noqa: S608


def load_statements() -> dict[str, str]:
    """Every named statement of every packaged .sql file, fragments put in place and variants
    rendered."""
    found: dict[str, str] = {}
    folder = resources.files("cronbase.db") / "sql"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, body in parse_statements(entry.read_text("utf-8"), entry.name).items():
            if name in found:
                raise RuntimeError(f"statement {name!r} is defined in more than one .sql file")
            found[name] = body
    return assemble(found, VARIANTS)


def assemble(found: dict[str, str], variants: dict[str, tuple[str, str, str]]) -> dict[str, str]:
    """Statements with their fragments put in place, and their variants rendered."""
    fragments = {k.removeprefix("fragment:"): v for k, v in found.items() if ":" in k}
    statements = {k: _expand(k, v, fragments) for k, v in found.items() if ":" not in k}
    for variant, (source, marker, text) in variants.items():
        written = statements[source]
        if marker not in written:
            raise RuntimeError(f"statement {source!r} has no marker {marker} for {variant!r}")
        statements[variant] = written.replace(marker, text)
        statements[source] = written.replace(marker, "")
    return statements


def render(template: str, schema: str) -> bytes:
    """Put the quoted schema name into a statement (``{schema}``; ``{schema_name}``: the name as
    a string literal, for dynamic SQL in migrations), ``{done_channel}``: the schema's channel
    for final states of waited-for jobs (a literal made from the schema name); values are never formatted in."""
    # psycopg's Composable.as_bytes accepts no connection since 3.2; identifiers quote the same.
    return (
        sql.SQL(template)
        .format(
            schema=sql.Identifier(schema),
            schema_name=sql.Literal(schema),
            done_channel=sql.Literal(done_channel_name(schema)),
        )
        .as_bytes(None)
    )


def lock_key(schema: str, what: str) -> int:
    """A schema's advisory lock key for ``what``: the workers of two schemas on one database
    never wait on each other's."""
    return zlib.crc32(f"cronbase-{what}:{schema}".encode()) & 0x7FFFFFFF


class Queries:
    """The statements of one schema, as bytes ready for ``cursor.execute``."""

    insert_job: bytes
    insert_job_unique: bytes
    upsert_job_replace: bytes
    insert_jobs: bytes
    claim_jobs: bytes
    unpark_jobs: bytes
    reap_recently_expired_jobs: bytes
    clear_tickets: bytes
    mark_queue_minute: bytes
    roll_up_queue_minute: bytes
    prune_queue_minutes: bytes
    queue_minutes: bytes
    complete_jobs: bytes
    finish_jobs: bytes
    heartbeat_jobs: bytes
    release_jobs: bytes
    release_orphaned_jobs: bytes
    reap_expired_jobs: bytes
    oldest_expired_lease: bytes
    age_priorities: bytes
    limit_idle_transaction: bytes
    holds_lease: bytes
    get_job: bytes
    list_jobs: bytes
    list_job_attempts: bytes
    retry_job: bytes
    cancel_job: bytes
    watch_job: bytes
    count_jobs_by_status: bytes
    register_worker: bytes
    unregister_worker: bytes
    connection_room: bytes
    list_workers: bytes
    worker_overview: bytes
    prune_gone_workers: bytes
    delete_gone_workers: bytes
    list_scheduled_jobs: bytes
    count_prunable: bytes
    delete_finished_jobs: bytes
    task_stats: bytes
    schema_exists: bytes
    list_cronbase_schemas: bytes
    list_unserved_jobs: bytes
    database_now: bytes
    upsert_schedule: bytes
    list_schedules: bytes
    schedule_lateness: bytes
    get_schedule: bytes
    pause_schedule: bytes
    resume_schedule: bytes
    remove_schedule: bytes
    lock_due_schedules: bytes
    advance_schedule: bytes
    enter_effect: bytes
    take_over_effect: bytes
    reconcile_effect: bytes
    finish_effect: bytes
    get_effect: bytes
    list_effects: bytes
    forget_effect: bytes
    pause_queue: bytes
    resume_queue: bytes
    list_queues: bytes
    insert_audit: bytes
    list_audit: bytes
    queue_overview: bytes
    queue_demand: bytes
    throughput_by_minute: bytes
    list_long_running: bytes
    requeue_dead_jobs: bytes
    prune_jobs: bytes
    prune_defaults_exclusive: bytes
    search_jobs: bytes
    count_search_jobs: bytes
    search_job_ids: bytes
    error_groups: bytes
    count_error_scan_by_task: bytes
    error_group_ids: bytes
    register_task_limits: bytes
    list_task_limits: bytes
    list_limited_queues: bytes
    set_queue_limit: bytes
    set_queue_rate: bytes
    set_queue_aging: bytes
    claim_flow_candidates: bytes
    claim_flow_jobs: bytes
    prune_flow_logs: bytes
    claim_fair_jobs: bytes
    claim_fair_jobs_in_queues: bytes
    set_fair_weight: bytes
    list_fair_keys: bytes
    insert_graph: bytes
    job_graph: bytes
    lock_event_keys: bytes
    suspend_jobs: bytes
    lock_event_key: bytes
    emit_event: bytes
    get_event: bytes
    prune_events_exclusive: bytes
    create_history_days: bytes
    drop_history_days: bytes
    move_finished_jobs: bytes
    move_legacy_attempts: bytes
    history_span: bytes
    prune_job_keys: bytes
    prune_attempts: bytes
    table_storage: bytes
    xmin_holders: bytes
    # keys.sql: encrypted tasks' keys (cronbase keys).
    sealed_jobs_batch: bytes
    sealed_history_batch: bytes
    sealed_attempts_batch: bytes
    reseal_jobs: bytes
    reseal_history: bytes
    reseal_attempts: bytes
    sealing_keys_in_use: bytes

    templates: ClassVar[dict[str, str]]

    def __init__(self, schema: str) -> None:
        self.schema = schema
        # The LISTEN/NOTIFY channel of this schema's jobs (the insert statements notify on it).
        self.channel = channel_name(schema)
        # Where a job that someone waits for (app.jobs.wait) announces its final state.
        self.done_channel = done_channel_name(schema)
        for name, template in self.templates.items():
            setattr(self, name, render(template, schema))
        # The reads of the history (its views, or the partitioned table itself). Their plans
        # span every partition (~120 at a month of history), so the planner's cost passes
        # jit_above_cost and PostgreSQL compiled a 1 ms read for seconds, tens of seconds on a
        # busy host (bench/README.md, "History at scale"): Database runs them with JIT off.
        self.history_reads = frozenset(
            getattr(self, name)
            for name, template in self.templates.items()
            if _HISTORY_READ.search(template) and not name.startswith(_WRITERS)
        )

    @staticmethod
    @functools.cache
    def for_schema(schema: str) -> Queries:
        return Queries(schema)


_HISTORY_READ = re.compile(r"\b(jobs_all|job_attempts_all|FROM \{schema\}\.jobs_history)\b")
# Statements that write (claims, outcomes, moves, retention) keep the server's JIT setting.
_WRITERS = ("claim_", "complete_", "finish_", "reap_", "release_", "move_", "prune_", "drop_")


def _check_names() -> dict[str, str]:
    declared = {name for name, kind in Queries.__annotations__.items() if kind == "bytes"}
    loaded = load_statements()
    missing = declared - loaded.keys()
    extra = loaded.keys() - declared
    if missing or extra:
        raise RuntimeError(
            f"sql/*.sql and Queries disagree: missing {sorted(missing)}, undeclared {sorted(extra)}"
        )
    return loaded


Queries.templates = _check_names()
