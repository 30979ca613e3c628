"""``app.schedules``: schedules kept in the database, added, listed, paused, resumed, removed.

Each call validates first (cron, zone, task, payload), then writes its row and its audit row in
one transaction, so a refused schedule leaves nothing behind. Every method has an ``_async`` twin.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Unpack

from ..enqueue.insert import build_insert
from ..enqueue.options import JobOptions
from ..errors import ScheduleError
from ..schedule.cron import Cron
from ..schedule.scheduler import (
    Schedule,
    ScheduleOptions,
    ScheduleSpec,
    scheduled_payload,
    upsert_params,
)
from ..task import find_task
from .audited import Action, perform, perform_async

if TYPE_CHECKING:
    from ..db.database import Database
    from ..task import Task


def _found(row: dict[str, Any] | None, key: str) -> Schedule:
    if row is None:
        raise ScheduleError(f"no schedule with key {key!r}")
    return Schedule.from_row(row)


class Schedules:
    """Schedules stored in the database: ``add``, ``list``, ``get``, ``pause``, ``resume``, ``remove``."""

    def __init__(self, db: Database, tasks: Mapping[str, Task[Any, Any]]) -> None:
        self.db = db
        self.tasks = tasks  # the app's registry: a schedule names a registered task

    def _spec(self, task: str, cron: str, options: ScheduleOptions) -> ScheduleSpec:
        return ScheduleSpec.build(find_task(self.tasks, task), cron=cron, **options)

    def add(
        self, task: str, *, cron: str, actor: str | None = None, **options: Unpack[ScheduleOptions]
    ) -> Schedule:
        """Create (or redefine) a schedule kept in the database until removed (``options``:
        :class:`~cronbase.schedule.scheduler.ScheduleOptions`); audited as ``schedule.add`` by
        ``actor`` (default ``api``), as every change here.

        >>> app.schedules.add("send_weekly_report", cron="0 8 * * MON",  # doctest: +SKIP
        ...                   tz="America/New_York", payload={"user_id": 12345}, key="weekly:12345")
        """
        spec = self._spec(task, cron, options)
        return perform(self.db, actor, "schedule.add", f"schedule:{spec.key}", self._add(spec))

    async def add_async(
        self, task: str, *, cron: str, actor: str | None = None, **options: Unpack[ScheduleOptions]
    ) -> Schedule:
        spec = self._spec(task, cron, options)
        action = self._add(spec)
        return await perform_async(self.db, actor, "schedule.add", f"schedule:{spec.key}", action)

    def list(self) -> builtins.list[Schedule]:
        return [Schedule.from_row(r) for r in self.db.fetch_all(self.db.queries.list_schedules)]

    async def list_async(self) -> builtins.list[Schedule]:
        rows = await self.db.fetch_all_async(self.db.queries.list_schedules)
        return [Schedule.from_row(r) for r in rows]

    def get(self, key: str) -> Schedule:
        return _found(self.db.fetch_one(self.db.queries.get_schedule, {"key": key}), key)

    async def get_async(self, key: str) -> Schedule:
        row = await self.db.fetch_one_async(self.db.queries.get_schedule, {"key": key})
        return _found(row, key)

    def pause(self, key: str, *, actor: str | None = None) -> Schedule:
        """Stop firing until resumed; audited as ``schedule.pause`` by ``actor``."""
        return perform(self.db, actor, "schedule.pause", f"schedule:{key}", self._pause(key))

    async def pause_async(self, key: str, *, actor: str | None = None) -> Schedule:
        action = self._pause(key)
        return await perform_async(self.db, actor, "schedule.pause", f"schedule:{key}", action)

    def resume(self, key: str, *, actor: str | None = None) -> Schedule:
        """Fire again from the next slot after now; slots missed while paused are skipped."""
        return perform(self.db, actor, "schedule.resume", f"schedule:{key}", self._resume(key))

    async def resume_async(self, key: str, *, actor: str | None = None) -> Schedule:
        action = self._resume(key)
        return await perform_async(self.db, actor, "schedule.resume", f"schedule:{key}", action)

    def run_now(self, key: str, *, actor: str | None = None) -> int:
        """Enqueue the schedule's job now, once, beside its slots (which stay as they were);
        returns the job's id."""
        return perform(self.db, actor, "schedule.run_now", f"schedule:{key}", self._run_now(key))

    async def run_now_async(self, key: str, *, actor: str | None = None) -> int:
        action = self._run_now(key)
        return await perform_async(self.db, actor, "schedule.run_now", f"schedule:{key}", action)

    def remove(self, key: str, *, actor: str | None = None) -> None:
        """Delete a schedule (one declared in code comes back when its app next starts)."""
        perform(self.db, actor, "schedule.remove", f"schedule:{key}", self._remove(key))

    async def remove_async(self, key: str, *, actor: str | None = None) -> None:
        action = self._remove(key)
        await perform_async(self.db, actor, "schedule.remove", f"schedule:{key}", action)

    # -- the actions (audited.py runs them) ----------------------------------------------------

    def _pause(self, key: str) -> Action[Schedule]:
        rows = yield self.db.queries.pause_schedule, {"key": key}
        schedule = _found(rows[0] if rows else None, key)
        return schedule, {"task": schedule.task, "cron": schedule.cron, "tz": schedule.tz}

    def _resume(self, key: str) -> Action[Schedule]:
        q = self.db.queries
        rows = yield q.get_schedule, {"key": key}
        current = _found(rows[0] if rows else None, key)
        (clock,) = yield q.database_now, {}
        following = Cron.parse(current.cron, current.tz).next_after(clock["now"])
        rows = yield q.resume_schedule, {"key": key, "next_fire_at": following}
        schedule = _found(rows[0] if rows else None, key)
        return schedule, {"next_fire_at": schedule.next_fire_at.isoformat()}

    def _run_now(self, key: str) -> Action[int]:
        """The job a *run now* enqueues: the schedule's task and payload, its slot time now, the
        task's options when this process registers the task (the schedule's queue wins)."""
        q = self.db.queries
        rows = yield q.get_schedule, {"key": key}
        schedule = _found(rows[0] if rows else None, key)
        (clock,) = yield q.database_now, {}
        task = self.tasks.get(schedule.task)
        base = task.options() if task is not None else JobOptions()
        options = replace(base, queue=schedule.queue or base.queue)
        payload = scheduled_payload(schedule.payload, clock["now"])
        db = self.db
        insert = build_insert(
            q,
            schedule.task,
            options,
            payload,
            db.max_payload_bytes,
            None,
            db.json_dumps,
            db.sealing_keys,
        )
        (row,) = yield insert
        job_id = int(row["id"])
        return job_id, {"job_id": job_id}

    def _add(self, spec: ScheduleSpec) -> Action[Schedule]:
        (clock,) = yield self.db.queries.database_now, {}
        rows = yield self.db.queries.upsert_schedule, upsert_params(spec, clock["now"])
        schedule = _found(rows[0] if rows else None, spec.key)
        return schedule, _described(schedule)

    def _remove(self, key: str) -> Action[None]:
        rows = yield self.db.queries.remove_schedule, {"key": key}
        # What it was: once removed, the audit row is the only record of it.
        return None, _described(_found(rows[0] if rows else None, key))


def _described(schedule: Schedule) -> dict[str, Any]:
    """What an audit row keeps of a schedule added or removed (not its payload: it may be
    large, and hold what the log should not)."""
    return {
        "task": schedule.task,
        "cron": schedule.cron,
        "tz": schedule.tz,
        "queue": schedule.queue,
        "catch_up": schedule.catch_up,
    }
