"""Durable handlers: steps that run once, sleeps and event waits that outlive the worker.

``current_job().step("charge", charge_card, invoice_id)`` runs ``charge_card(invoice_id)`` once
and stores its JSON result as an effect (the effects ledger, key ``step:<job id>:<name>``):
when the job runs again (a crash, a retry, a resume after a sleep) the finished step returns
its stored result without running. One mechanism with ``app.effects.once``: a step left
``processing`` by an attempt that died is taken over at once by the next attempt (the job's
lease says no other attempt is alive), where an effect would wait for ``stale_after``.

``sleep(duration)`` and ``wait_for(key, timeout=...)`` suspend the job: the handler stops
(:class:`Suspend`, a BaseException so ``except Exception`` does not swallow it), its worker
writes the job back as ``queued`` at the wake-up time, with no lease and the attempt not
counted, and the next run on any worker replays the handler from the top: finished steps are
skipped, a sleep whose time has come returns, a wait whose event was emitted returns its
payload. The wake-up time and the event's outcome are steps themselves, so a replay sees the
same ones. They are read on the database's clock, which decides what is due: a sleep begun on a
host whose clock is ahead ends on time on one whose clock is behind. Handlers must therefore call these in the same order on each run (as DBOS and
Temporal require of workflow code), and name each step once per run.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..checks import check_key
from ..effects import Effects
from ..errors import EventTimeout, WorkflowError

if TYPE_CHECKING:
    from ..context import JobContext
    from ..db.database import Database

# A step left processing by an earlier attempt of the job is taken over at once: that attempt
# is over (the lease says so), so there is nothing to wait for.
TAKE_OVER_AT_ONCE = timedelta(microseconds=1)
# A step's result is stored under this key of the effect's result object.
VALUE = "value"


class Suspend(BaseException):  # a request, as Snooze, not an error
    """Raised by sleep() and wait_for() to stop the handler until its wake-up; the worker
    writes the job back as queued. A BaseException: ``except Exception`` leaves it alone."""

    def __init__(self, wake_in: float | None, waiting_for: str | None = None) -> None:
        self.wake_in = wake_in
        self.waiting_for = waiting_for
        what = f"event {waiting_for!r}" if waiting_for else "its wake-up time"
        super().__init__(f"suspended until {what}")


def step_key(job_id: int, name: str) -> str:
    return f"step:{job_id}:{name}"


def check_seconds(what: str, value: timedelta | float | None) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
        raise WorkflowError(f"{what} must be a timedelta or seconds of 0 or more, got {value!r}")
    return float(seconds)


def step_value(name: str, value: object) -> Any:
    """The value as the step's replays will return it (JSON round trip)."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise WorkflowError(f"step {name!r}: its result cannot be stored as JSON: {exc}") from None


class Durable:
    """What a running job's ``current_job()`` does for step, sleep and wait_for."""

    def __init__(self, context: JobContext, db: Database) -> None:
        self.context = context
        self.db = db
        self.effects = Effects(db)
        self.names: set[str] = set()
        self.sleeps = 0

    def _claim_name(self, name: str) -> str:
        if not isinstance(name, str) or not name:
            raise WorkflowError(f"a step needs a name (a non-empty string), got {name!r}")
        check_key("step name", name)
        if name in self.names:
            raise WorkflowError(
                f"step {name!r} already ran in this run of job {self.context.id}; give each "
                "step its own name (in a loop: f'charge:{item}')"
            )
        self.names.add(name)
        return step_key(self.context.id, name)

    # -- steps -----------------------------------------------------------------------------------

    def step(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Any) -> Any:
        key = self._claim_name(name)
        with self.effects.once(key, stale_after=TAKE_OVER_AT_ONCE) as effect:
            if effect.done:
                return (effect.result or {}).get(VALUE)
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                if inspect.iscoroutine(value):
                    value.close()
                raise WorkflowError(f"step {name!r}: {fn!r} is async: use await step_async()")
            stored = step_value(name, value)
            effect.record(**{VALUE: stored})
        return stored

    async def step_async(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Any
    ) -> Any:
        key = self._claim_name(name)
        async with self.effects.once_async(key, stale_after=TAKE_OVER_AT_ONCE) as effect:
            if effect.done:
                return (effect.result or {}).get(VALUE)
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
            stored = step_value(name, value)
            effect.record(**{VALUE: stored})
        return stored

    # -- the database's clock --------------------------------------------------------------------

    def _now(self) -> float:
        """The database's clock (epoch seconds), not this host's: a suspended job resumes on
        any host, and a wake-up time read on one clock and compared on another would move by
        their difference (a 2 s sleep lasted 182 s from a host 90 s ahead to one 90 s behind)."""
        return _epoch(self.db.fetch_one(self.db.queries.database_now))

    async def _now_async(self) -> float:
        return _epoch(await self.db.fetch_one_async(self.db.queries.database_now))

    def _wake_at(self, seconds: float | None) -> float | None:
        return None if seconds is None else self._now() + seconds

    async def _wake_at_async(self, seconds: float | None) -> float | None:
        return None if seconds is None else await self._now_async() + seconds

    # -- sleep -----------------------------------------------------------------------------------

    def _sleep_name(self) -> str:
        self.sleeps += 1
        return f"sleep#{self.sleeps}"

    def sleep(self, duration: timedelta | float) -> None:
        seconds = check_seconds("sleep()", duration)
        assert seconds is not None
        wake = self.step(self._sleep_name(), self._wake_at, (seconds,), {})
        _suspend_until(wake, self._now())

    async def sleep_async(self, duration: timedelta | float) -> None:
        seconds = check_seconds("sleep_async()", duration)
        assert seconds is not None
        wake = await self.step_async(self._sleep_name(), self._wake_at_async, (seconds,), {})
        _suspend_until(wake, await self._now_async())

    # -- events ----------------------------------------------------------------------------------

    def wait_for(self, key: str, timeout: timedelta | float | None) -> Any:
        seconds = check_wait(key, timeout)
        outcome = step_key(self.context.id, f"event:{key}")
        row = self.db.fetch_one(self.db.queries.get_effect, {"key": outcome})
        if row is not None and row["status"] == "done":
            return _outcome(key, row["result"])
        deadline = self.step(f"event-deadline:{key}", self._wake_at, (seconds,), {})
        event = self.db.fetch_one(self.db.queries.get_event, {"key": key})
        now = self._now()
        result = _arrived(key, event, deadline, now)
        if result is None:
            raise Suspend(_left(deadline, now), waiting_for=key)
        with self.effects.once(outcome, stale_after=TAKE_OVER_AT_ONCE) as effect:
            if not effect.done:
                effect.record(**result)
            stored = effect.result if effect.done else result
        return _outcome(key, stored)

    async def wait_for_async(
        self,
        key: str,
        timeout: timedelta | float | None,  # noqa: ASYNC109  # a durable deadline, not asyncio's
    ) -> Any:
        seconds = check_wait(key, timeout)
        outcome = step_key(self.context.id, f"event:{key}")
        row = await self.db.fetch_one_async(self.db.queries.get_effect, {"key": outcome})
        if row is not None and row["status"] == "done":
            return _outcome(key, row["result"])
        deadline = await self.step_async(
            f"event-deadline:{key}", self._wake_at_async, (seconds,), {}
        )
        event = await self.db.fetch_one_async(self.db.queries.get_event, {"key": key})
        now = await self._now_async()
        result = _arrived(key, event, deadline, now)
        if result is None:
            raise Suspend(_left(deadline, now), waiting_for=key)
        async with self.effects.once_async(outcome, stale_after=TAKE_OVER_AT_ONCE) as effect:
            if not effect.done:
                effect.record(**result)
            stored = effect.result if effect.done else result
        return _outcome(key, stored)


def _epoch(row: Any) -> float:
    return float(row["now"].timestamp())


def _left(deadline: float | None, now: float) -> float | None:
    return None if deadline is None else max(0.0, deadline - now)


def _suspend_until(wake: float, now: float) -> None:
    left = wake - now
    if left > 0:
        raise Suspend(left)


def check_wait(key: str, timeout: timedelta | float | None) -> float | None:
    if not isinstance(key, str) or not key:
        raise WorkflowError(f"wait_for() needs an event key (a non-empty string), got {key!r}")
    check_key("event key", key)
    return check_seconds("wait_for() timeout", timeout)


def _arrived(key: str, event: Any, deadline: float | None, now: float) -> dict[str, Any] | None:
    """What the wait comes to now: the event's payload, a timeout, or None (wait on)."""
    if event is not None:
        return {"payload": event["payload"]}
    if deadline is not None and now >= deadline:
        return {"timed_out": True}
    return None


def _outcome(key: str, stored: Any) -> Any:
    if stored.get("timed_out"):
        raise EventTimeout(f"event {key!r} was not emitted before wait_for's timeout")
    return stored.get("payload")
