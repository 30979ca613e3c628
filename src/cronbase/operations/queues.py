"""Queues an operator can pause or limit.

Pause: workers stop claiming from a paused queue until it is resumed. Jobs already running in it
finish; new jobs can still be enqueued and wait. The pause is a row in ``cronbase.queues`` (the table) that
every claim statement reads, so it takes effect at once everywhere.

Limits: ``set_limit(name, n)`` (at most n running jobs of the queue across all workers) and
``set_rate(name, "100/minute")`` (at most 100 starts in any minute); ``None`` removes one. Jobs
already waiting obey them; running jobs count at once. The plain claim stops taking the queue's
jobs as soon as the limit commits, and each worker's flow claim (``db/sql/flow.sql``) takes them
from its next reap on (``reap_interval``, 5 s by default).

Priority aging: ``set_aging(name, timedelta(minutes=5), step=10)``: a waiting job of the queue
gains 10 priority (lower runs first) for each 5 minutes it has been due, down to 0 at most, so a
stream of higher-priority jobs never holds a lower one back for good. The workers' reaper round
writes the aged priority into the job (``age_priorities`` in ``db/sql/jobs.sql``), so claims
order by it as they order by any priority.

Fair share: ``set_weight(name, key, 2)`` gives the fair key ``key`` of queue ``name`` twice the
share of a key of weight 1 (the default) while both have due jobs (``db/sql/fair.sql``);
``fair_keys(name)`` lists the busiest keys with their backlog, running jobs and weights.

An operator's pause, resume or limit of a queue nothing uses is refused unless forced
(:meth:`Queues.check_used`): a typo would otherwise act on nothing, silently. The CLI and the
dashboard both ask it; the library's own ``pause()`` and ``set_limit()`` do not.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ..checks import check_name
from ..db.database import Row
from ..durations import DurationLike, duration
from ..errors import ConfigurationError, InvalidNameError
from ..flow import Aging, Rate, check_limit, check_weight, fair_scope, parse_rate
from .audited import DEFAULT_ACTOR, Action, perform, perform_async
from .demand import DEFAULT_CONCURRENCY, DEFAULT_WINDOW, QueueDemand, demand, demand_async
from .fleet import workers, workers_async
from .queue_minutes import QueuePoint, minutes, minutes_async

if TYPE_CHECKING:
    from ..db.database import Database


# A default-priority job (100) aged by 10 a step reaches the top (0) after ten steps.
DEFAULT_AGING_STEP = 10
# Shorter steps would have the reaper rewrite waiting rows all the time for no useful order.
MIN_AGING_EVERY = timedelta(seconds=1)


@dataclass(frozen=True)
class QueueState:
    name: str
    is_paused: bool
    paused_at: datetime | None = None
    paused_by: str | None = None
    # At most this many running jobs of the queue, fleet-wide; None: no limit.
    max_running: int | None = None
    # At most rate.n starts in any window of rate.period; None: no rate limit.
    rate: Rate | None = None
    # Priority aging of its waiting jobs; None: none.
    aging: Aging | None = None

    @classmethod
    def from_row(cls, row: Row) -> QueueState:
        rate_n, period = row.get("rate_n"), row.get("rate_period")
        every, step = row.get("aging_every"), row.get("aging_step")
        return cls(
            row["name"],
            row["is_paused"],
            row["paused_at"],
            row["paused_by"],
            row.get("max_running"),
            Rate(rate_n, period) if rate_n is not None and period is not None else None,
            Aging(every, step) if every is not None and step is not None else None,
        )

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "is_paused": self.is_paused,
            "paused_at": self.paused_at.isoformat() if self.paused_at else None,
            "paused_by": self.paused_by,
            "max_running": self.max_running,
            "rate": None if self.rate is None else str(self.rate),
            "aging": None
            if self.aging is None
            else {"every_seconds": self.aging.every.total_seconds(), "step": self.aging.step},
        }


def _check(name: str) -> None:
    check_name("queue", name)


KNOWN_SHOWN = 20  # queue names a refusal lists


def check_queue_used(name: str, used: Iterable[str], *, force: bool = False) -> str:
    """``name`` when it is a valid queue name that is one of ``used``, or ``force``;
    InvalidNameError naming it and the queues in use otherwise."""
    _check(name)
    known = sorted(set(used))
    if force or name in known:
        return name
    names = ", ".join(known[:KNOWN_SHOWN]) or "none yet"
    if len(known) > KNOWN_SHOWN:
        names += f" and {len(known) - KNOWN_SHOWN} more"
    raise InvalidNameError(f"no task, job or worker uses queue {name!r} (known queues: {names})")


def limit_params(name: str, max_running: int | None) -> dict[str, object]:
    _check(name)
    if max_running is not None:
        check_limit(f"queue {name!r} limit", max_running)
    return {"name": name, "max_running": max_running}


def rate_params(name: str, rate: str | Rate | None) -> dict[str, object]:
    _check(name)
    parsed = None if rate is None else parse_rate(rate, f"queue {name!r} rate")
    return {
        "name": name,
        "rate_n": parsed.n if parsed else None,
        "rate_period": parsed.period if parsed else None,
    }


def aging_params(
    name: str, every: DurationLike | None, step: int | None = None
) -> dict[str, object]:
    """set_queue_aging's parameters; a step of None keeps the queue's (DEFAULT_AGING_STEP when
    it has none)."""
    _check(name)
    params: dict[str, object] = {
        "name": name,
        "aging_every": None,
        "aging_step": None,
        "default_step": DEFAULT_AGING_STEP,
    }
    if every is None:
        return params
    delta = duration(f"queue {name!r} aging interval", every, positive=True)
    if delta < MIN_AGING_EVERY:
        raise ConfigurationError(
            f"queue {name!r} aging interval must be at least 1 second, got {every!r}"
        )
    params["aging_every"] = delta
    if step is not None:
        params["aging_step"] = check_limit(f"queue {name!r} aging step", step)
    return params


def weight_params(name: str, key: str, weight: float | None) -> dict[str, object]:
    _check(name)
    return {
        "scope": fair_scope(name, key),
        "weight": 1.0 if weight is None else check_weight(weight, f"queue {name!r} key weight"),
    }


@dataclass(frozen=True)
class FairKey:
    """One fair key of a queue: its waiting and running jobs, its weight, and how many of its
    jobs have been claimed so far."""

    queue: str
    key: str
    waiting: int
    running: int
    weight: float
    claimed: int

    @classmethod
    def from_row(cls, row: Row) -> FairKey:
        return cls(
            row["queue"],
            row["key"],
            row["waiting"],
            row["running"],
            row["weight"],
            row["claimed"],
        )

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


class Queues:
    """``app.queues``: ``pause(name)``, ``resume(name)``, ``list()``, and ``_async`` twins."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def pause(self, name: str, *, actor: str | None = None) -> QueueState:
        """Stop workers claiming from queue ``name`` (running jobs finish); audited as
        ``queue.pause`` by ``actor`` (default ``api``), as every change here."""
        _check(name)
        return perform(self.db, actor, "queue.pause", f"queue:{name}", self._pause(name, actor))

    async def pause_async(self, name: str, *, actor: str | None = None) -> QueueState:
        _check(name)
        action = self._pause(name, actor)
        return await perform_async(self.db, actor, "queue.pause", f"queue:{name}", action)

    def resume(self, name: str, *, actor: str | None = None) -> QueueState:
        _check(name)
        return perform(self.db, actor, "queue.resume", f"queue:{name}", self._resume(name))

    async def resume_async(self, name: str, *, actor: str | None = None) -> QueueState:
        _check(name)
        action = self._resume(name)
        return await perform_async(self.db, actor, "queue.resume", f"queue:{name}", action)

    def set_limit(
        self, name: str, max_running: int | None, *, actor: str | None = None
    ) -> QueueState:
        """At most ``max_running`` running jobs of queue ``name`` across all workers (None: no
        limit)."""
        action = self._set(self.db.queries.set_queue_limit, limit_params(name, max_running))
        return perform(self.db, actor, "queue.limit", f"queue:{name}", action)

    async def set_limit_async(
        self, name: str, max_running: int | None, *, actor: str | None = None
    ) -> QueueState:
        action = self._set(self.db.queries.set_queue_limit, limit_params(name, max_running))
        return await perform_async(self.db, actor, "queue.limit", f"queue:{name}", action)

    def set_rate(
        self, name: str, rate: str | Rate | None, *, actor: str | None = None
    ) -> QueueState:
        """At most ``rate`` starts of queue ``name``'s jobs (``"100/minute"``) in any window,
        across all workers (None: no rate limit)."""
        action = self._set(self.db.queries.set_queue_rate, rate_params(name, rate))
        return perform(self.db, actor, "queue.rate", f"queue:{name}", action)

    async def set_rate_async(
        self, name: str, rate: str | Rate | None, *, actor: str | None = None
    ) -> QueueState:
        action = self._set(self.db.queries.set_queue_rate, rate_params(name, rate))
        return await perform_async(self.db, actor, "queue.rate", f"queue:{name}", action)

    def set_aging(
        self,
        name: str,
        every: DurationLike | None,
        *,
        step: int | None = None,
        actor: str | None = None,
    ) -> QueueState:
        """Priority aging for queue ``name``: a waiting job gains ``step`` priority (lower runs
        first) for each ``every`` it has been due, down to 0 at most; a job deferred at 0 or
        below does not age. ``step`` None keeps the queue's step (10 when it has none);
        ``every`` None turns aging off (jobs aged so far keep their priority). Audited as
        ``queue.aging``."""
        action = self._set(self.db.queries.set_queue_aging, aging_params(name, every, step))
        return perform(self.db, actor, "queue.aging", f"queue:{name}", action)

    async def set_aging_async(
        self,
        name: str,
        every: DurationLike | None,
        *,
        step: int | None = None,
        actor: str | None = None,
    ) -> QueueState:
        action = self._set(self.db.queries.set_queue_aging, aging_params(name, every, step))
        return await perform_async(self.db, actor, "queue.aging", f"queue:{name}", action)

    def set_weight(
        self, name: str, key: str, weight: float | None, *, actor: str | None = None
    ) -> float:
        """Give the fair key ``key`` of queue ``name`` a ``weight`` (a number above 0; None: back
        to 1): while keys have due jobs, each gets claims in proportion to its weight. Audited
        as ``queue.weight``; returns the weight set."""
        action = self._weight(weight_params(name, key, weight), key)
        return perform(self.db, actor, "queue.weight", f"queue:{name}", action)

    async def set_weight_async(
        self, name: str, key: str, weight: float | None, *, actor: str | None = None
    ) -> float:
        action = self._weight(weight_params(name, key, weight), key)
        return await perform_async(self.db, actor, "queue.weight", f"queue:{name}", action)

    def fair_keys(self, name: str | None = None, *, limit: int = 20) -> builtins.list[FairKey]:
        """The busiest fair keys (of queue ``name``, or all), most waiting and running jobs
        first, and keys with a weight set."""
        rows = self.db.fetch_all(self.db.queries.list_fair_keys, {"queue": name, "limit": limit})
        return [FairKey.from_row(r) for r in rows]

    async def fair_keys_async(
        self, name: str | None = None, *, limit: int = 20
    ) -> builtins.list[FairKey]:
        params = {"queue": name, "limit": limit}
        rows = await self.db.fetch_all_async(self.db.queries.list_fair_keys, params)
        return [FairKey.from_row(r) for r in rows]

    def demand(
        self,
        queues: Iterable[str] | None = None,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        window: timedelta = DEFAULT_WINDOW,
    ) -> builtins.list[QueueDemand]:
        """Per queue (``queues``, or every one with jobs), due and running jobs and the workers
        of ``concurrency`` slots they need, with the arrival and completion rates over
        ``window`` (operations/demand.py)."""
        return demand(self.db, queues, concurrency=concurrency, window=window)

    async def demand_async(
        self,
        queues: Iterable[str] | None = None,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        window: timedelta = DEFAULT_WINDOW,
    ) -> builtins.list[QueueDemand]:
        return await demand_async(self.db, queues, concurrency=concurrency, window=window)

    def minutes(
        self,
        name: str,
        *,
        window: timedelta = timedelta(hours=1),
        step: timedelta = timedelta(minutes=1),
    ) -> builtins.list[QueuePoint]:
        """Queue ``name``'s last ``window`` (at most 8 days) in points of ``step``: jobs due and
        running, attempts started and their pickup waits (p50, p95), as the workers roll them
        up once a minute (operations/queue_minutes.py). A span no worker rolled up is absent."""
        return minutes(self.db, name, window, step)

    async def minutes_async(
        self,
        name: str,
        *,
        window: timedelta = timedelta(hours=1),
        step: timedelta = timedelta(minutes=1),
    ) -> builtins.list[QueuePoint]:
        return await minutes_async(self.db, name, window, step)

    def task_limits(self) -> builtins.list[Row]:
        """Each limited task's limits, as its workers last registered them."""
        return self.db.fetch_all(self.db.queries.list_task_limits)

    # -- the actions (audited.py runs them) ----------------------------------------------------

    def _pause(self, name: str, actor: str | None) -> Action[QueueState]:
        params = {"name": name, "actor": actor or DEFAULT_ACTOR}
        (row,) = yield self.db.queries.pause_queue, params
        return QueueState.from_row(row), {}

    def _resume(self, name: str) -> Action[QueueState]:
        rows = yield self.db.queries.resume_queue, {"name": name}
        return (QueueState.from_row(rows[0]) if rows else QueueState(name, is_paused=False)), {}

    def _weight(self, params: dict[str, object], key: str) -> Action[float]:
        (row,) = yield self.db.queries.set_fair_weight, params
        return row["weight"], {"key": key, "weight": row["weight"]}

    def _set(self, statement: bytes, params: dict[str, object]) -> Action[QueueState]:
        (row,) = yield statement, params
        state = QueueState.from_row(row)
        rate = None if state.rate is None else str(state.rate)
        aging = None if state.aging is None else str(state.aging)
        return state, {"max_running": state.max_running, "rate": rate, "aging": aging}

    def used(self, task_queues: Iterable[str] = ()) -> set[str]:
        """The queues something uses: a job's, an earlier pause's or limit's, a registered
        worker's, and ``task_queues`` (the queues of the caller's tasks)."""
        found = {q.name for q in self.list()} | set(task_queues)
        for worker in workers(self.db):
            found |= set(worker.queues or ())
        return found

    async def used_async(self, task_queues: Iterable[str] = ()) -> set[str]:
        found = {q.name for q in await self.list_async()} | set(task_queues)
        for worker in await workers_async(self.db):
            found |= set(worker.queues or ())
        return found

    def check_used(
        self, name: str, *, task_queues: Iterable[str] = (), force: bool = False
    ) -> None:
        """Refuse (InvalidNameError) to act on a queue nothing uses, unless ``force``: the rule
        of ``cronbase queues pause|resume|limit|rate`` and of the dashboard's queue forms.

        >>> app.queues.check_used("emials", task_queues=["emails"])  # doctest: +SKIP
        InvalidNameError: no task, job or worker uses queue 'emials' (known queues: emails)
        """
        _check(name)  # a bad name is refused as such, forced or not
        tasks = set(task_queues)
        if not (force or name in tasks):  # the queries scan the jobs' queues: only when needed
            check_queue_used(name, self.used(tasks))

    async def check_used_async(
        self, name: str, *, task_queues: Iterable[str] = (), force: bool = False
    ) -> None:
        _check(name)
        tasks = set(task_queues)
        if not (force or name in tasks):
            check_queue_used(name, await self.used_async(tasks))

    def list(self) -> list[QueueState]:
        return [QueueState.from_row(r) for r in self.db.fetch_all(self.db.queries.list_queues)]

    async def list_async(self) -> builtins.list[QueueState]:
        rows = await self.db.fetch_all_async(self.db.queries.list_queues)
        return [QueueState.from_row(r) for r in rows]
