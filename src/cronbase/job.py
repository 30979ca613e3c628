"""Job and JobStatus: what a row of cronbase.jobs means, and which state changes are allowed."""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, TypeAlias

from .records import Encrypted, Record, UndecodableJSON, json_value

JSONValue: TypeAlias = bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None
Payload: TypeAlias = dict[str, JSONValue]


class JobStatus(enum.StrEnum):
    """A job's state; the values are the ones stored in the database."""

    PENDING = "pending"  # waiting for its parents (configure(after=...), a chain, a group)
    QUEUED = "queued"  # waiting for run_at
    RUNNING = "running"  # leased by a worker
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # an attempt failed; will retry at run_at
    DEAD = "dead"  # gave up: attempts used up, or the handler said so
    CANCELLED = "cancelled"

    @property
    def is_waiting(self) -> bool:
        return self in (JobStatus.QUEUED, JobStatus.FAILED)

    @property
    def is_final(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED)


# Every allowed change of state, and what causes it. The SQL in db/sql/jobs.sql implements these;
# tests check each edge against the database.
TRANSITIONS: Mapping[tuple[JobStatus, JobStatus], str] = {
    (JobStatus.QUEUED, JobStatus.RUNNING): "claimed",
    (JobStatus.FAILED, JobStatus.RUNNING): "claimed for a retry",
    (JobStatus.RUNNING, JobStatus.SUCCEEDED): "handler returned",
    (JobStatus.RUNNING, JobStatus.FAILED): "handler raised or lease expired; attempts left",
    (JobStatus.RUNNING, JobStatus.DEAD): "handler raised, attempts used up (or Abort)",
    (JobStatus.RUNNING, JobStatus.QUEUED): "released by a worker shutting down, or snoozed",
    (JobStatus.RUNNING, JobStatus.CANCELLED): "cancelled by an operator, or its handler (Cancel)",
    (JobStatus.QUEUED, JobStatus.CANCELLED): "cancelled by an operator",
    (JobStatus.FAILED, JobStatus.CANCELLED): "cancelled by an operator",
    (JobStatus.FAILED, JobStatus.QUEUED): "retried by an operator",
    (JobStatus.DEAD, JobStatus.QUEUED): "retried by an operator",
    (JobStatus.CANCELLED, JobStatus.QUEUED): "retried by an operator",
    (JobStatus.SUCCEEDED, JobStatus.QUEUED): "retried by an operator",
    (JobStatus.QUEUED, JobStatus.QUEUED): "retried by an operator (run now)",
    (
        JobStatus.PENDING,
        JobStatus.QUEUED,
    ): "its last parent succeeded (or ended: on_parent_failure='run')",
    (JobStatus.PENDING, JobStatus.CANCELLED): "a parent went dead or was cancelled, or an operator",
    (JobStatus.CANCELLED, JobStatus.PENDING): "the parent whose failure cancelled it was retried",
}


def can_transition(old: JobStatus, new: JobStatus) -> bool:
    """Whether a job may move from ``old`` to ``new``."""
    return (old, new) in TRANSITIONS


def outcome_status(
    *, succeeded: bool, give_up: bool, attempts: int, max_attempts: int
) -> JobStatus:
    """The state an attempt leaves its job in (the same rule finish_jobs applies in SQL)."""
    if succeeded:
        return JobStatus.SUCCEEDED
    if give_up or attempts >= max_attempts:
        return JobStatus.DEAD
    return JobStatus.FAILED


@dataclass(frozen=True)
class OutcomeRule:
    """Where one outcome of an attempt leads its job."""

    status: JobStatus
    # False: the attempt is given back (attempts - 1), as a snooze, a suspension, a release.
    counts_attempt: bool
    # The state instead once what the outcome spends is used up: the attempts (failed), the
    # task's max_snoozes (snoozed; a snooze cap below 0 is never used up nor counted).
    exhausted: JobStatus | None = None


# Every outcome an attempt can have and the state it leads its job to: the rules the statements
# that write outcomes apply (complete_jobs and finish_jobs in db/sql/jobs.sql, suspend_jobs in
# workflows.sql, release_jobs). tests/integration/test_outcomes.py checks each rule against them;
# inline testing mode applies them (testing/inline.py). A 'lost' attempt writes nothing.
OUTCOMES: Mapping[str, OutcomeRule] = {
    "succeeded": OutcomeRule(JobStatus.SUCCEEDED, counts_attempt=True),
    "failed": OutcomeRule(JobStatus.FAILED, counts_attempt=True, exhausted=JobStatus.DEAD),
    "dead": OutcomeRule(JobStatus.DEAD, counts_attempt=True),
    "cancelled": OutcomeRule(JobStatus.CANCELLED, counts_attempt=True),
    "snoozed": OutcomeRule(JobStatus.QUEUED, counts_attempt=False, exhausted=JobStatus.DEAD),
    "suspended": OutcomeRule(JobStatus.QUEUED, counts_attempt=False),
    "released": OutcomeRule(JobStatus.QUEUED, counts_attempt=False),
}


def next_state(
    outcome: str, *, attempts: int, max_attempts: int, snoozes: int, snooze_cap: int = 0
) -> tuple[JobStatus, int, int]:
    """The job's (status, attempts, snoozes) after a running attempt (``attempts`` counted
    already, as the claim counts it) came to ``outcome``."""
    rule = OUTCOMES[outcome]
    if outcome == "failed" and attempts >= max_attempts:
        return JobStatus.DEAD, attempts, snoozes
    if outcome == "snoozed":
        if snooze_cap < 0:  # waiting for another attempt's effect: counts nothing
            return rule.status, attempts - 1, snoozes
        if snoozes >= snooze_cap:
            return JobStatus.DEAD, attempts, snoozes
        return rule.status, attempts - 1, snoozes + 1
    return rule.status, attempts if rule.counts_attempt else attempts - 1, snoozes


@dataclass(frozen=True)
class Job(Record):
    """A snapshot of one row of cronbase.jobs; ``to_json``: datetimes as ISO 8601, the lease in
    seconds. ``payload``, ``result`` and ``metadata`` are an :class:`UndecodableJSON` when the
    row holds JSON cronbase does not read (deeper than MAX_JSON_DEPTH: other SQL wrote it)."""

    id: int
    task: str
    queue: str
    payload: Payload | UndecodableJSON | Encrypted
    status: JobStatus
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    lease: timedelta
    # The worker holding the lease while running; after a success, the worker that ran it.
    locked_by: str | None
    locked_until: datetime | None
    idempotency_key: str | None
    dedupe_key: str | None
    progress: float | None
    stage: str | None
    last_error: str | None
    error_type: str | None
    started_at: datetime | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    # What integrations stored beside the payload (a trace context); None when nothing.
    metadata: dict[str, JSONValue] | UndecodableJSON | None = None
    # What the handler returned (JSON), once it succeeded; None when it returned None.
    result: JSONValue | UndecodableJSON | Encrypted = None
    # How many times the handler raised Snooze (each put the job back, attempt not counted).
    snoozes: int = 0
    # A pending job's parents that have not succeeded yet (configure(after=...), workflows).
    parents_left: int = 0
    # The workflow (chain, group) the job belongs to: its id; None outside one.
    workflow_id: int | None = None
    # The event a suspended job waits for (current_job().wait_for); None otherwise.
    waiting_for: str | None = None
    # The version of its task the job was deferred for (@app.task(version=N)); None: version 1
    # (or deferred by a release without versions). Only workers of that version or later run it.
    task_version: int | None = None
    # The priority it was deferred with, once priority aging (app.queues.set_aging) raised it
    # to ``priority``; None: never aged.
    base_priority: int | None = None
    # The key its payload, result and errors are sealed with (@app.task(encrypt=True)); None:
    # stored in plain. Views read them opened, or as an Encrypted without that key.
    encrypted_with: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Job:
        values = {f.name: row[f.name] for f in fields(cls) if f.name != "encrypted_with"}
        values["encrypted_with"] = row.get("encrypted_with")
        values["status"] = JobStatus(values["status"])
        return cls(**values)

    @property
    def current_error(self) -> str | None:
        """The error that left the job where it is, for views: ``last_error``, but None once it
        succeeded (``last_error`` then is an earlier attempt's; :class:`JobAttempt` keeps each)."""
        return None if self.status is JobStatus.SUCCEEDED else self.last_error

    @property
    def priority_label(self) -> str:
        """``100``, or ``40 (aged from 100)`` once priority aging raised it (jobs show, the
        dashboard's job page)."""
        if self.base_priority is None:
            return str(self.priority)
        return f"{self.priority} (aged from {self.base_priority})"


@dataclass(frozen=True)
class GraphJob:
    """One job of a graph (``app.jobs.graph``): what it is, where it stands, whom it waits for."""

    id: int
    task: str
    status: JobStatus
    result: JSONValue | UndecodableJSON
    parents: list[int]
    parents_left: int
    last_error: str | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> GraphJob:
        values = {f.name: row[f.name] for f in fields(cls)}
        values["status"] = JobStatus(values["status"])
        return cls(**values)


# How many jobs of a graph jobs show and the dashboard read; a level of more than LEVEL_LISTED
# jobs is summed up.
GRAPH_LIMIT = 10_000
LEVEL_LISTED = 8


@dataclass(frozen=True)
class GraphLevel:
    """One level of a drawn graph: its jobs (when few), else how many of each status."""

    jobs: list[GraphJob]
    size: int
    tasks: list[str]
    counts: list[tuple[JobStatus, int]]


@dataclass(frozen=True)
class JobGraph:
    """The jobs of a workflow (or a job with its parents and children), parents first."""

    workflow_id: int | None
    jobs: list[GraphJob]
    # How many jobs the graph holds; more than len(jobs) when it was cut at the limit.
    total: int

    def children(self, job_id: int) -> list[GraphJob]:
        return [job for job in self.jobs if job_id in job.parents]

    def levels(self) -> list[list[GraphJob]]:
        """The jobs by depth: those with no parent here first, then each job one level below
        its deepest parent (a chain's links one per level; a group's members side by side)."""
        depth: dict[int, int] = {}
        for job in self.jobs:  # parents first: ids grow with insertion, a parent is older
            depth[job.id] = 1 + max((depth.get(p, -1) for p in job.parents), default=-1)
        levels: list[list[GraphJob]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
        for job in self.jobs:
            levels[depth[job.id]].append(job)
        return levels

    def shown(self, listed: int = LEVEL_LISTED) -> list[GraphLevel]:
        """The levels as jobs show and the dashboard draw them: a level of at most ``listed``
        jobs one by one, a longer one (a group's members) counted by task and status."""
        out = []
        for level in self.levels():
            counts = Counter(job.status for job in level)
            out.append(
                GraphLevel(
                    jobs=level if len(level) <= listed else [],
                    size=len(level),
                    tasks=sorted({job.task for job in level}),
                    counts=sorted(counts.items()),
                )
            )
        return out

    def to_json(self) -> dict[str, JSONValue]:
        return {
            "workflow_id": self.workflow_id,
            "total": self.total,
            "jobs": [
                {
                    "id": j.id,
                    "task": j.task,
                    "status": j.status.value,
                    "result": json_value(j.result),
                    "parents": list[JSONValue](j.parents),
                    "parents_left": j.parents_left,
                    "last_error": j.last_error,
                }
                for j in self.jobs
            ],
        }


@dataclass(frozen=True)
class JobAttempt(Record):
    """One finished (or lost) attempt from the history table."""

    job_id: int
    attempt: int
    worker: str | None
    started_at: datetime | None
    finished_at: datetime
    outcome: str
    error: str | None
    error_type: str | None
    traceback: str | None
