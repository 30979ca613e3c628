"""``app.schedules``: schedules kept in the database, added, listed, paused, resumed, removed.

Each call validates first (cron, zone, task, payload), then writes one row in one statement, so
a refused schedule leaves nothing behind. Every method has an ``_async`` twin.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..client import JobOptions, defer_one_async, defer_one_sync
from ..errors import ScheduleError
from ..job import Payload
from ..task import find_task
from .cron import Cron
from .scheduler import Schedule, ScheduleSpec, scheduled_payload, upsert_params

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

    def _spec(self, task: str, **options: Any) -> ScheduleSpec:
        return ScheduleSpec.build(find_task(self.tasks, task), **options)

    def _now(self) -> datetime:
        row = self.db.fetch_one(self.db.queries.database_now)
        assert row is not None
        return row["now"]  # type: ignore[no-any-return]

    async def _now_async(self) -> datetime:
        row = await self.db.fetch_one_async(self.db.queries.database_now)
        assert row is not None
        return row["now"]  # type: ignore[no-any-return]

    def add(
        self,
        task: str,
        *,
        cron: str,
        tz: str = "UTC",
        payload: Payload | None = None,
        key: str | None = None,
        queue: str | None = None,
        catch_up: str = "latest",
        max_catch_up: int = 100,
    ) -> Schedule:
        """Create (or redefine) a schedule kept in the database until removed.

        >>> app.schedules.add("send_weekly_report", cron="0 8 * * MON",  # doctest: +SKIP
        ...                   tz="America/New_York", payload={"user_id": 12345}, key="weekly:12345")
        """
        spec = self._spec(
            task, cron=cron, tz=tz, key=key, payload=payload, queue=queue, catch_up=catch_up,
            max_catch_up=max_catch_up,
        )  # fmt: skip
        row = self.db.fetch_one(self.db.queries.upsert_schedule, upsert_params(spec, self._now()))
        return _found(row, spec.key)

    async def add_async(
        self,
        task: str,
        *,
        cron: str,
        tz: str = "UTC",
        payload: Payload | None = None,
        key: str | None = None,
        queue: str | None = None,
        catch_up: str = "latest",
        max_catch_up: int = 100,
    ) -> Schedule:
        spec = self._spec(
            task, cron=cron, tz=tz, key=key, payload=payload, queue=queue, catch_up=catch_up,
            max_catch_up=max_catch_up,
        )  # fmt: skip
        params = upsert_params(spec, await self._now_async())
        return _found(
            await self.db.fetch_one_async(self.db.queries.upsert_schedule, params), spec.key
        )

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

    def pause(self, key: str) -> Schedule:
        return _found(self.db.fetch_one(self.db.queries.pause_schedule, {"key": key}), key)

    async def pause_async(self, key: str) -> Schedule:
        row = await self.db.fetch_one_async(self.db.queries.pause_schedule, {"key": key})
        return _found(row, key)

    def resume(self, key: str) -> Schedule:
        """Fire again from the next slot after now; slots missed while paused are skipped."""
        current = self.get(key)
        following = Cron.parse(current.cron, current.tz).next_after(self._now())
        params = {"key": key, "next_fire_at": following}
        return _found(self.db.fetch_one(self.db.queries.resume_schedule, params), key)

    async def resume_async(self, key: str) -> Schedule:
        current = await self.get_async(key)
        following = Cron.parse(current.cron, current.tz).next_after(await self._now_async())
        params = {"key": key, "next_fire_at": following}
        return _found(await self.db.fetch_one_async(self.db.queries.resume_schedule, params), key)

    def _run_now_insert(self, schedule: Schedule, now: datetime) -> tuple[str, JobOptions, Payload]:
        """The job a *run now* enqueues: the schedule's task and payload, its slot time now, the
        task's options when this process registers the task (the schedule's queue wins)."""
        task = self.tasks.get(schedule.task)
        base = task.options() if task is not None else JobOptions()
        options = replace(base, queue=schedule.queue or base.queue)
        return schedule.task, options, scheduled_payload(schedule.payload, now)

    def run_now(self, key: str) -> int:
        """Enqueue the schedule's job now, once, beside its slots (which stay as they were);
        returns the job's id."""
        schedule = self.get(key)
        task, options, payload = self._run_now_insert(schedule, self._now())
        return defer_one_sync(self.db, task, options, payload, None)

    async def run_now_async(self, key: str) -> int:
        schedule = await self.get_async(key)
        task, options, payload = self._run_now_insert(schedule, await self._now_async())
        return await defer_one_async(self.db, task, options, payload, None)

    def remove(self, key: str) -> None:
        if self.db.fetch_one(self.db.queries.remove_schedule, {"key": key}) is None:
            raise ScheduleError(f"no schedule with key {key!r}")

    async def remove_async(self, key: str) -> None:
        if await self.db.fetch_one_async(self.db.queries.remove_schedule, {"key": key}) is None:
            raise ScheduleError(f"no schedule with key {key!r}")
