"""The effects ledger: a side effect (an email, a charge) happens once, even when its job runs twice.

Jobs run at least once: a worker can die after sending an email but before marking its job done.
``app.effects.once(key)`` keeps one row per effect in ``cronbase.effects``, keyed by what the
effect means (``monthly_report:2026-10:ana@example.com``):

- the first caller inserts it as ``processing`` and owns it; on leaving the block it becomes
  ``done`` (with what ``record()`` stored), or ``failed`` when the block raised;
- a caller that finds it ``done`` gets ``effect.done == True`` and skips the work;
- one that finds a fresh ``processing`` row of someone else's gets :class:`EffectInProgress`
  (inside a job: the job fails and retries later under its backoff);
- one that finds ``failed``, or ``processing`` older than ``stale_after`` (its owner died, or
  hangs), takes it over. Before taking over either it asks ``reconcile(key)``, if given,
  whether the effect did happen after all (the mail provider's log, the payment provider's
  idempotency key); a result other than None marks it done without running it again. (A block
  that raised may have raised after the effect: its reply lost to a database restart, say.)

Every write after the first is a compare-and-set on the owner's token, so two processes never
both own an effect. What this gives, precisely: an effect inside ``once()`` runs at most once
while its owner is alive and within ``stale_after``; after an owner dies or fails mid-effect it
runs again only if ``reconcile`` cannot tell (or is not given): at least once, with
deduplication. Effects
on this same database can be exactly once with ``current_job().transaction()`` instead.
"""

from __future__ import annotations

import builtins
import inspect
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import psycopg

from .checks import check_key
from .context import running_job
from .db.pool import is_connection_loss
from .db.steps import drive, drive_async
from .errors import (
    DatabaseUnavailableError,
    EffectError,
    EffectInProgress,
    EffectNotFoundError,
    LeaseLostError,
)
from .records import Record

if TYPE_CHECKING:
    from .db.database import Database
    from .db.queries import Queries

EffectStatus = Literal["processing", "done", "failed"]
STATUSES: tuple[EffectStatus, ...] = ("processing", "done", "failed")
DEFAULT_STALE_AFTER = timedelta(minutes=30)
# Compare-and-set misses in a row before giving up (each means another process moved first).
MAX_RACES = 5

Result = dict[str, Any]
Reconcile = Callable[[str], Mapping[str, Any] | Awaitable[Mapping[str, Any] | None] | None]


@dataclass(frozen=True)
class EffectRecord(Record):
    """One row of ``cronbase.effects``."""

    key: str
    status: EffectStatus
    owner: uuid.UUID
    job_id: int | None
    attempt: int | None
    started_at: datetime
    finished_at: datetime | None
    result: Result | None
    error: str | None
    takeovers: int
    reconciled: bool
    created_at: datetime
    updated_at: datetime


@dataclass
class Effect:
    """What a ``once()`` block holds: whether the effect is already done, and ``record()``."""

    key: str
    done: bool
    result: Result | None = None
    taken_over: bool = False
    reconciled: bool = False
    _owner: uuid.UUID | None = field(default=None, repr=False)
    _recorded: Result | None = field(default=None, repr=False)

    def record(self, **result: Any) -> None:
        """Store what the effect produced (a message id, a charge id); the block then ends done.

        Once recorded, the effect counts as done even if the rest of the block raises.
        """
        if self.done:
            raise EffectError(f"effect {self.key!r} is already done; there is nothing to record")
        _encode(self.key, result)
        self._recorded = result


def _encode(key: str, result: Mapping[str, Any] | None) -> str | None:
    if result is None:
        return None
    try:
        return json.dumps(dict(result), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise EffectError(f"effect {key!r}: the result is not JSON-serialisable: {exc}") from None


def _busy(key: str, row: Mapping[str, Any], stale_after: timedelta) -> EffectInProgress:
    who = f"job {row['job_id']} attempt {row['attempt']}" if row["job_id"] else "a caller"
    return EffectInProgress(
        f"effect {key!r} is in progress by {who} since {row['started_at']:%Y-%m-%d %H:%M:%S%z} "
        f"(stale after {stale_after}); try again later"
    )


def _params(key: str, stale_after: timedelta, owner: uuid.UUID) -> dict[str, Any]:
    job = running_job()
    return {
        "key": key,
        "owner": owner,
        "stale_after": stale_after,
        "job_id": job.id if job else None,
        "attempt": job.attempt if job else None,
    }


@contextmanager
def _database_lost(key: str) -> Iterator[None]:
    """A lost connection (a restart, a failover) becomes DatabaseUnavailableError: inside a job,
    the attempt is handed back, not counted. The ledger row stays as it was: a processing row is
    taken over once stale (asking reconcile), a done one stays done."""
    try:
        yield
    except psycopg.OperationalError as exc:
        if not is_connection_loss(exc):
            raise
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DatabaseUnavailableError(
            f"effect {key!r}: the database connection was lost ({reason})"
        ) from exc


def _held(row: Mapping[str, Any] | None) -> bool:
    return bool(row and row["held"])


def _zombie(key: str) -> LeaseLostError:
    job = running_job()
    assert job is not None
    return job.lease_lost_error(f"effect {key!r}")


def _check(key: str, stale_after: timedelta) -> None:
    if not key:
        raise EffectError("effect key must not be empty")
    check_key("effect key", key)  # NUL, length
    if stale_after <= timedelta(0):
        raise EffectError(f"stale_after must be positive, got {stale_after!r}")


def _list_params(status: str | None, limit: int) -> dict[str, Any]:
    if status is not None and status not in STATUSES:
        raise EffectError(f"unknown effect status {status!r}; one of: {', '.join(STATUSES)}")
    return {"status": status, "limit": limit}


def _finish_params(effect: Effect, error: BaseException | None) -> dict[str, Any] | None:
    """The write that ends the block: done, or failed when it raised (None: the effect was
    found done, there is nothing of ours to end)."""
    if effect.done:
        return None
    recorded = effect._recorded
    if recorded is not None or error is None:
        status, result, message = "done", _encode(effect.key, recorded or {}), None
    else:
        status, result, message = "failed", None, f"{type(error).__name__}: {error}"[:2000]
    return {"key": effect.key, "owner": effect._owner, "status": status, "result": result,
            "error": message}  # fmt: skip


def found_record(row: Mapping[str, Any] | None, key: str) -> EffectRecord:
    """The record of effect ``key``'s row; EffectNotFoundError when there is none."""
    if row is None:
        raise EffectNotFoundError(key)
    return EffectRecord.from_row(row)


def _reconciled(reconcile: Reconcile | None, key: str) -> Mapping[str, Any] | None:
    """What a sync ``reconcile`` says; an async one is refused (once_async awaits it)."""
    assert reconcile is not None
    found = reconcile(key)
    if inspect.isawaitable(found):
        if inspect.iscoroutine(found):
            found.close()  # or Python warns that it was never awaited
        raise EffectError("reconcile= is a coroutine function: use once_async()")
    return found


def _lost(effect: Effect) -> EffectError:
    return EffectError(
        f"effect {effect.key!r} was taken over by another owner before this one finished "
        "(it ran longer than stale_after); it may have happened twice"
    )


# A step of entering once(): a statement to run (its row is sent back), or RECONCILE (the
# reconcile callback's answer is sent back). The sync and async shells only answer the steps
# (db/steps.py drives them).
RECONCILE = ("reconcile",)
Step = tuple[Any, ...]


def _entering(
    q: Queries,
    key: str,
    stale_after: timedelta,
    can_reconcile: bool,
    fence: dict[str, Any] | None,
) -> Generator[Step, Any, Effect]:
    # An attempt whose lease is gone (a zombie) must not start an effect: another attempt may be
    # running the job, and the ledger alone would only make it wait or take over.
    if fence is not None and not _held((yield (q.holds_lease, fence))):
        raise _zombie(key)
    owner = uuid.uuid4()
    params = _params(key, stale_after, owner)
    for _ in range(MAX_RACES):
        row = yield (q.enter_effect, params)
        if row is None:
            continue  # the row we waited on committed after our snapshot: look again
        if row["created"]:
            return Effect(key, done=False, _owner=owner)
        if row["status"] == "done":
            return Effect(key, done=True, result=row["result"], reconciled=row["reconciled"])
        if row["status"] == "processing" and not row["stale"]:
            raise _busy(key, row, stale_after)
        previous = {**params, "previous_owner": row["owner"]}
        # Failed or stale: ask reconcile first. A failed block does not prove the effect did not
        # happen: the error may have come after it (a reply lost to a restart or a failover).
        if can_reconcile:
            found = yield RECONCILE
            if found is not None:
                result = _encode(key, found)
                done = yield (q.reconcile_effect, {**previous, "result": result})
                if done is not None:
                    return Effect(key, done=True, result=done["result"], reconciled=True)
                continue  # someone else moved first
        if (yield (q.take_over_effect, previous)) is not None:
            return Effect(key, done=False, taken_over=True, _owner=owner)
    raise EffectInProgress(f"effect {key!r}: other processes kept changing it; try again")


class Effects:
    """The ledger as handlers use it: ``once`` / ``once_async``, and ``get``, ``list``
    (``app.effects`` adds the operator's ``forget``: operations/ledger.py)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- sync ------------------------------------------------------------------------------------

    def _fence(self, key: str) -> dict[str, Any] | None:
        """The holds_lease check of the running attempt, or None outside a worker's job."""
        job = running_job()
        if job is None or job.lease_token is None:
            return None
        job.check_live(f"effect {key!r}")
        return {"id": job.id, "token": job.lease_token}

    def _steps(
        self, key: str, stale_after: timedelta, reconcile: Reconcile | None
    ) -> Generator[Step, Any, Effect]:
        return _entering(self.db.queries, key, stale_after, reconcile is not None, self._fence(key))

    def _enter(self, key: str, stale_after: timedelta, reconcile: Reconcile | None) -> Effect:
        def run(step: Step) -> Any:
            if step is RECONCILE:
                return _reconciled(reconcile, key)
            return self.db.fetch_one(*step)

        with _database_lost(key):
            return drive(self._steps(key, stale_after, reconcile), run)

    @contextmanager
    def once(
        self,
        key: str,
        *,
        stale_after: timedelta = DEFAULT_STALE_AFTER,
        reconcile: Reconcile | None = None,
    ) -> Iterator[Effect]:
        """Perform the effect ``key`` once; see the module docstring.

        >>> with app.effects.once(f"monthly_report:{period}:{email}") as effect:  # doctest: +SKIP
        ...     if not effect.done:
        ...         effect.record(message_id=mailer.send(...))
        """
        _check(key, stale_after)
        effect = self._enter(key, stale_after, reconcile)
        try:
            yield effect
        except Exception as exc:
            self._finish(effect, exc)
            raise
        # Cancellation, KeyboardInterrupt, SystemExit leave it processing: the effect may be
        # in flight, so only stale_after (and reconcile) can decide.
        self._finish(effect, None)

    def _finish(self, effect: Effect, error: BaseException | None) -> None:
        params = _finish_params(effect, error)
        if params is None:
            return
        with _database_lost(effect.key):
            row = self.db.fetch_one(self.db.queries.finish_effect, params)
        if row is None:
            raise _lost(effect)

    def get(self, key: str) -> EffectRecord:
        return found_record(self.db.fetch_one(self.db.queries.get_effect, {"key": key}), key)

    def list(self, status: EffectStatus | None = None, limit: int = 100) -> list[EffectRecord]:
        """Effects, most recently changed first."""
        params = _list_params(status, limit)
        rows = self.db.fetch_all(self.db.queries.list_effects, params)
        return [EffectRecord.from_row(r) for r in rows]

    # -- async -----------------------------------------------------------------------------------

    async def _enter_async(
        self, key: str, stale_after: timedelta, reconcile: Reconcile | None
    ) -> Effect:
        async def run(step: Step) -> Any:
            if step is RECONCILE:
                assert reconcile is not None
                found = reconcile(key)
                return await found if inspect.isawaitable(found) else found
            return await self.db.fetch_one_async(*step)

        with _database_lost(key):
            return await drive_async(self._steps(key, stale_after, reconcile), run)

    @asynccontextmanager
    async def once_async(
        self,
        key: str,
        *,
        stale_after: timedelta = DEFAULT_STALE_AFTER,
        reconcile: Reconcile | None = None,
    ) -> AsyncIterator[Effect]:
        """The async twin of :meth:`once`; ``reconcile`` may be sync or async."""
        _check(key, stale_after)
        effect = await self._enter_async(key, stale_after, reconcile)
        try:
            yield effect
        except Exception as exc:
            await self._finish_async(effect, exc)
            raise
        await self._finish_async(effect, None)

    async def _finish_async(self, effect: Effect, error: BaseException | None) -> None:
        params = _finish_params(effect, error)
        if params is None:
            return
        with _database_lost(effect.key):
            row = await self.db.fetch_one_async(self.db.queries.finish_effect, params)
        if row is None:
            raise _lost(effect)

    async def get_async(self, key: str) -> EffectRecord:
        row = await self.db.fetch_one_async(self.db.queries.get_effect, {"key": key})
        return found_record(row, key)

    async def list_async(
        self, status: EffectStatus | None = None, limit: int = 100
    ) -> builtins.list[EffectRecord]:  # builtins: in here, `list` is the method above
        params = _list_params(status, limit)
        rows = await self.db.fetch_all_async(self.db.queries.list_effects, params)
        return [EffectRecord.from_row(r) for r in rows]
