"""What an attempt came to, decided by pure functions of the task, the attempt and what its handler
did (returned, raised, ran past its timeout). The worker's executor and inline testing mode both
ask them; the state each outcome then leads the job to is ``job.next_state``, which mirrors the
SQL that writes it.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..errors import (
    Cancel,
    DatabaseUnavailableError,
    EffectInProgress,
    LeaseLostError,
    PayloadError,
    ResultError,
    Snooze,
)
from ..payload.encode import encode_result
from ..payload.sealing import EncryptionError
from ..workflow.durable import Suspend

if TYPE_CHECKING:
    from ..task import Task
    from .claim import ClaimedJob, Undecodable

OutcomeKind = Literal[
    "succeeded", "failed", "dead", "cancelled", "snoozed", "suspended", "released", "lost"
]

# A job that met another attempt's effect in progress looks again after its retry delay, at most
# this many seconds later; the attempt is not counted (an uncounted snooze).
EFFECT_WAIT_MAX = 60.0
# finish_jobs' snooze cap for a snooze that is not counted against max_snoozes.
UNCOUNTED_SNOOZE = -1
TRACEBACK_LIMIT = 8000  # characters kept, from the end: the innermost frames say the most
ERROR_LIMIT = 2000


@dataclass(kw_only=True, slots=True)
class Verdict:
    """What one attempt came to, before it is written."""

    outcome: OutcomeKind
    retry_in: float = 0.0
    error: str | None = None
    error_type: str | None = None
    traceback: str | None = None
    # Nothing for the completer to write: the handler's transaction() committed the success
    # itself, or the attempt lost its lease ('lost').
    written: bool = False
    # What the handler raised, for on_job_end hooks (None when it returned).
    exception: BaseException | None = None
    # A snooze: how many snoozes the task allows (past them the job is dead; below 0: the
    # snooze is not counted).
    snooze_cap: int = 0
    # A suspension (sleep, wait_for): seconds until it wakes (None: only an event wakes it),
    # and the event key it waits for.
    wake_in: float | None = None
    waiting_for: str | None = None
    # A success's result, as JSON text (None when the handler returned None).
    result: str | None = None


@dataclass(kw_only=True, eq=False, slots=True)
class Outcome(Verdict):
    """A verdict about one claimed attempt, on its way to the database (the completer)."""

    job: ClaimedJob
    duration: float = 0.0


def outcome_of(job: ClaimedJob, verdict: Verdict, duration: float) -> Outcome:
    return Outcome(
        job=job,
        duration=duration,
        outcome=verdict.outcome,
        retry_in=verdict.retry_in,
        error=verdict.error,
        error_type=verdict.error_type,
        traceback=verdict.traceback,
        written=verdict.written,
        exception=verdict.exception,
        snooze_cap=verdict.snooze_cap,
        wake_in=verdict.wake_in,
        waiting_for=verdict.waiting_for,
        result=verdict.result,
    )


def trim(text: str, limit: int, *, keep_end: bool = False) -> str:
    # PostgreSQL text cannot hold NUL: one in an exception message would fail the whole batch.
    text = text.replace("\x00", "\\x00")
    if len(text) <= limit:
        return text
    return "…" + text[-limit:] if keep_end else text[:limit] + "…"


def error_type(exc: BaseException) -> str:
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins.")


def error_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def failure(exc: BaseException, *, retry_in: float, give_up: bool) -> Verdict:
    """A failed attempt: retried after ``retry_in`` seconds, or dead."""
    return Verdict(
        outcome="dead" if give_up else "failed",
        retry_in=retry_in,
        error=trim(error_line(exc), ERROR_LIMIT),
        error_type=error_type(exc),
        traceback=trim("".join(traceback.format_exception(exc)), TRACEBACK_LIMIT, keep_end=True),
        exception=exc,
    )


def retry_in(task: Task[Any, Any], attempt: int, exc: BaseException | None) -> float:
    """Seconds until the next attempt after failed attempt ``attempt``, which raised ``exc``."""
    return task.defaults.retry.delay_after(attempt, exc).total_seconds()


def returned(
    task: Task[Any, Any],
    job_id: int,
    value: object,
    *,
    completed: bool,
    max_result_bytes: int,
) -> Verdict:
    """The handler returned ``value``: a success storing it as JSON, or dead when it cannot be
    stored (running it again would return the same). ``completed``: its transaction() wrote the
    success already."""
    if completed:
        return Verdict(outcome="succeeded", written=True)
    if value is None:
        return Verdict(outcome="succeeded")
    try:
        return Verdict(
            outcome="succeeded", result=encode_result(job_id, task.name, value, max_result_bytes)
        )
    except ResultError as exc:
        return failure(exc, retry_in=0.0, give_up=True)


def raised(
    task: Task[Any, Any],
    attempt: int,
    exc: BaseException,
    *,
    completed: bool,
    leased: bool = True,
) -> Verdict:
    """The handler raised ``exc`` on attempt ``attempt``: what the attempt comes to.
    ``leased``: the attempt holds a lease on a database (inline mode's do not: nothing can be
    lost or handed back, so those errors are failures like any other)."""
    if isinstance(exc, Suspend):
        # sleep() or wait_for(): not an attempt that ended, a pause; the job runs again later.
        return Verdict(outcome="suspended", wake_in=exc.wake_in, waiting_for=exc.waiting_for)
    if completed:
        # Its transaction() committed the success: what it raised afterwards changes nothing.
        return Verdict(outcome="succeeded", written=True, exception=exc)
    if isinstance(exc, Snooze):
        return Verdict(
            outcome="snoozed",
            retry_in=exc.seconds,
            error=str(exc),
            error_type="Snooze",
            exception=exc,
            snooze_cap=task.defaults.max_snoozes,
        )
    if isinstance(exc, Cancel):
        return Verdict(
            outcome="cancelled",
            error=trim(exc.reason, ERROR_LIMIT),
            error_type="Cancel",
            exception=exc,
        )
    if isinstance(exc, DatabaseUnavailableError) and leased:
        # The database went away under the handler (a restart, a failover): not the handler's
        # fault, so the attempt is handed back and not counted.
        return Verdict(outcome="released", error=trim(str(exc), ERROR_LIMIT), exception=exc)
    if isinstance(exc, LeaseLostError) and leased:
        # Another attempt may own the job: this one ends with nothing recorded (the fence
        # would refuse the write anyway).
        return Verdict(outcome="lost", written=True, exception=exc)
    if isinstance(exc, EffectInProgress):
        # Another attempt (of this job or another) performs the effect: waiting for it is not
        # this attempt's failure. Queued again after the retry delay, the attempt not counted.
        return Verdict(
            outcome="snoozed",
            retry_in=min(retry_in(task, attempt, exc), EFFECT_WAIT_MAX),
            error=trim(error_line(exc), ERROR_LIMIT),
            error_type="EffectInProgress",
            exception=exc,
            snooze_cap=UNCOUNTED_SNOOZE,
        )
    give_up = task.gives_up(exc)
    return failure(exc, retry_in=0.0 if give_up else retry_in(task, attempt, exc), give_up=give_up)


def timed_out(task: Task[Any, Any], attempt: int, how: str, *, completed: bool) -> Verdict:
    """The attempt ran past its task's timeout (``how``: what became of its handler)."""
    if completed:  # its transaction() committed before the handler noticed
        return Verdict(outcome="succeeded", written=True)
    error = TimeoutError(f"handler ran past its timeout of {task.defaults.timeout}{how}")
    return failure(error, retry_in=retry_in(task, attempt, error), give_up=False)


def key_wait(exc: EncryptionError) -> Verdict:
    """A job this worker cannot open: queued again, the attempt not counted, the error naming
    the key it needs."""
    return Verdict(
        outcome="snoozed",
        retry_in=KEY_WAIT,
        error=trim(str(exc), ERROR_LIMIT),
        error_type=type(exc).__name__,
        exception=exc,
        snooze_cap=UNCOUNTED_SNOOZE,
    )


def sealed(task: Task[Any, Any], verdict: Verdict) -> Verdict:
    """An encrypted task's verdict as stored: its result, error and traceback sealed. Only the
    error's type stays plain: it names a class, not data. The keys are read only when there is
    something to seal; a worker runs an encrypted task only with keys (startup.py checks), so
    the ConfigurationError of keys gone meanwhile is the worker's, not the job's."""
    if verdict.result is None and verdict.error is None and verdict.traceback is None:
        return verdict
    keys = task.db.sealing_keys(task.name)
    if verdict.result is not None:
        verdict.result = keys.seal_json(verdict.result, "result", task.name)
    if verdict.error is not None:
        verdict.error = keys.seal_text(verdict.error)
    if verdict.traceback is not None:
        verdict.traceback = keys.seal_text(verdict.traceback)
    return verdict


def unfit(exc: PayloadError) -> Verdict:
    """The payload does not fit the handler: retrying cannot make it fit."""
    return failure(exc, retry_in=0.0, give_up=True)


# A job whose payload needs an encryption key this worker lacks looks again this much later:
# each look is a claim and an attempt row, so not often (an operator has a key to add).
KEY_WAIT = 300.0


def undecodable(bad: Undecodable) -> Outcome:
    """A claimed row that cannot be decoded: dead at once, with the reason (no retry can help);
    but one sealed with a key this worker lacks (or that does not open with it) waits, its
    attempt not counted, for a worker configured with the key: the error names it."""
    exc = bad.error
    if isinstance(exc, EncryptionError):
        return outcome_of(bad.job, key_wait(exc), 0.0)
    reason = PayloadError(
        f"job {bad.job.id} (task {bad.job.task!r}) cannot be decoded: "
        f"{type(exc).__name__}: {str(exc)[:200]}"
    )
    return outcome_of(bad.job, unfit(reason), 0.0)
