"""Turns due schedule slots into ordinary jobs, exactly once per slot.

A tick, in one transaction: read the database clock; lock the due, unpaused schedules (SKIP
LOCKED, so concurrent tickers share them out); for each, work out which slots to fire from its
``next_fire_at`` and catch-up policy (:func:`plan`, pure); insert one job per slot under the
idempotency key ``schedule:<key>@<slot UTC>``; move ``next_fire_at`` past now. However many
processes tick at once, the unique key allows one job per slot, and conflicts are absorbed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import psycopg
from psycopg.rows import dict_row

from ..checks import check_key, check_name
from ..durations import DurationLike, duration
from ..enqueue.insert import build_insert, encode_payload
from ..enqueue.options import JobOptions
from ..errors import ScheduleError
from ..job import Payload
from ..records import Record
from ..task import SCHEDULED_AT, find_task
from .cron import Cron, describe

if TYPE_CHECKING:
    from ..db.database import Database
    from ..task import Task

logger = logging.getLogger("cronbase")

CatchUp = Literal["latest", "all", "none"]
CATCH_UP_POLICIES: tuple[CatchUp, ...] = ("latest", "all", "none")
DUE_BATCH = 100
# A tick's transaction locks the schedules it fires (FOR UPDATE, which other tickers SKIP). A
# ticker whose host is cut off mid-tick would leave that lock on the server until the server's
# TCP gives up on it (15 minutes; hours when its last reply was acknowledged), and the schedule
# would fire nowhere meanwhile. With this, the server ends such a session once it has idled this
# long in the transaction (a tick's statements come milliseconds apart), and rolls it back.
# Local to each transaction, so through a transaction pooler too.
IDLE_LIMIT = {"milliseconds": "10000"}

# The most missed slots a schedule with catch_up="all" runs after an outage: each is a job one
# tick computes and enqueues in one transaction.
MOST_CATCH_UP = 10_000


class ScheduleOptions(TypedDict, total=False):
    """What a schedule takes besides its task and cron expression, typed once for
    ``app.schedules.add`` and ``@app.periodic``; defaults and checks: :meth:`ScheduleSpec.build`."""

    tz: str  # the expression's IANA time zone
    key: str | None  # the schedule's name (None: the task's)
    payload: Payload | None  # the task's arguments (each job also gets its slot, scheduled_at)
    queue: str | None  # its jobs' queue (None: the task's)
    catch_up: str  # after an outage: run the "latest" missed slot, "all" of them, or "none"
    max_catch_up: int  # with catch_up="all": at most this many


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule's definition, as declared in code or added at run time."""

    key: str
    task: str
    cron: Cron
    payload: Payload
    queue: str | None = None
    catch_up: CatchUp = "latest"
    max_catch_up: int = 100
    source: Literal["code", "runtime"] = "runtime"

    @classmethod
    def build(
        cls,
        task: Task[Any, Any],
        *,
        cron: str,
        tz: str = "UTC",
        key: str | None = None,
        payload: Payload | None = None,
        queue: str | None = None,
        catch_up: str = "latest",
        max_catch_up: int = 100,
        source: Literal["code", "runtime"] = "runtime",
    ) -> ScheduleSpec:
        """Validate everything before anything is written; errors name the bad value."""
        parsed = Cron.parse(cron, tz)
        if catch_up not in CATCH_UP_POLICIES:
            raise ScheduleError(
                f"unknown catch_up policy {catch_up!r}; one of: {', '.join(CATCH_UP_POLICIES)}"
            )
        if not 1 <= max_catch_up <= MOST_CATCH_UP:
            raise ScheduleError(
                f"max_catch_up must be from 1 to {MOST_CATCH_UP:,}, got {max_catch_up:,}: one "
                "tick enqueues up to that many jobs in one go, after an outage; to backfill "
                "more, defer them yourself in batches"
            )
        if queue is not None:
            check_name("queue", queue)
        if key is not None:
            if not key.strip():
                raise ScheduleError("schedule key must not be empty")
            check_key("schedule key", key)
        payload = dict(payload or {})
        if SCHEDULED_AT in payload:
            raise ScheduleError(
                f"schedule payload must not set {SCHEDULED_AT!r}: each job gets its slot's time there"
            )
        encode_payload(task.name, payload)
        task.check_payload(scheduled_payload(payload, datetime.now(UTC)))
        return cls(
            key=key or task.name,
            task=task.name,
            cron=parsed,
            payload=payload,
            queue=queue,
            catch_up=catch_up,
            max_catch_up=max_catch_up,
            source=source,
        )


# How late a slot may be before a schedule shows as overdue: ticks run every few seconds, so a
# minute late means nothing is ticking.
OVERDUE_AFTER = timedelta(minutes=1)


@dataclass(frozen=True)
class Schedule(Record):
    """A snapshot of one row of cronbase.schedules."""

    key: str
    task: str
    payload: Payload
    queue: str | None
    cron: str
    tz: str
    catch_up: str
    max_catch_up: int
    is_paused: bool
    source: str
    last_fired_at: datetime | None
    next_fire_at: datetime
    created_at: datetime
    updated_at: datetime

    @property
    def described(self) -> str:
        """The cron expression in words, with its zone (``At 08:00, only on Monday
        (Europe/Berlin)``)."""
        return describe(self.cron, self.tz)

    def overdue(self, now: datetime) -> bool:
        """Active, and its next slot passed more than OVERDUE_AFTER ago: no scheduler (a
        worker with schedule=True, or ``cronbase tick`` from cron) is running."""
        return not self.is_paused and self.next_fire_at < now - OVERDUE_AFTER

    def local(self, moment: datetime | None) -> datetime | None:
        """A moment in the schedule's own time zone (for people)."""
        return moment.astimezone(Cron.parse(self.cron, self.tz).zone) if moment else None

    def local_text(self, moment: datetime | None) -> str:
        """A moment in the schedule's own time zone, as people read it: to the minute
        (``2026-11-23 08:00 CET``), or to the second when the schedule fires on seconds; empty
        for None."""
        if moment is None:
            return ""
        cron = Cron.parse(self.cron, self.tz)
        form = "%Y-%m-%d %H:%M:%S %Z" if cron.has_seconds else "%Y-%m-%d %H:%M %Z"
        return moment.astimezone(cron.zone).strftime(form)


@dataclass(frozen=True)
class Plan:
    """What one tick does for one schedule."""

    slots: list[datetime]
    next_fire_at: datetime
    missed: int  # due slots not run (catch-up policy)


def plan(
    cron: Cron, catch_up: str, max_catch_up: int, next_fire_at: datetime, now: datetime
) -> Plan:
    """Which slots to fire now: every slot in [next_fire_at, now] is due.

    ``latest`` fires the newest due slot; ``all`` fires them all, the newest ``max_catch_up`` at
    most; ``none`` fires a slot only when it is the one slot due (the usual case: the tick came
    between two slots), and skips everything after an outage.
    """
    after = next_fire_at - timedelta(microseconds=1)
    following = cron.next_after(now)
    if catch_up == "all":
        slots = cron.slots(after, now, limit=max_catch_up)
        missed = len(cron.slots(after, now, limit=max_catch_up + 1)) - len(slots)
    else:
        newest_two = cron.slots(after, now, limit=2)
        if catch_up == "latest":
            slots = newest_two[-1:]
        else:
            slots = newest_two if len(newest_two) == 1 else []
        missed = len(newest_two) - len(slots)
    return Plan(slots=slots, next_fire_at=following, missed=missed)


def scheduled_payload(payload: Payload, slot: datetime) -> Payload:
    """The job payload for one slot: the schedule's payload plus the slot's time."""
    return {**payload, SCHEDULED_AT: slot.isoformat()}


def slot_key(schedule_key: str, slot: datetime) -> str:
    """The job key of one slot: UTC, to the second, so every ticker computes the same text."""
    return f"schedule:{schedule_key}@{slot.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def upsert_params(spec: ScheduleSpec, db_now: datetime) -> dict[str, Any]:
    return {
        "key": spec.key,
        "task": spec.task,
        "payload": encode_payload(spec.task, spec.payload),
        "queue": spec.queue,
        "cron": spec.cron.expression,
        "tz": spec.cron.tz,
        "catch_up": spec.catch_up,
        "max_catch_up": spec.max_catch_up,
        "source": spec.source,
        "next_fire_at": spec.cron.next_after(db_now),
    }


class Scheduler:
    """Fires due slots: ``tick()`` once (``cronbase tick``), or ``run()`` in a worker."""

    def __init__(
        self,
        db: Database,
        tasks: Mapping[str, Task[Any, Any]],
        periodic: Mapping[str, ScheduleSpec] | None = None,
        interval: DurationLike = timedelta(seconds=1),
        queues: Collection[str] | None = None,
    ) -> None:
        self.db = db
        self.tasks = tasks
        self.periodic = periodic or {}
        self.interval = duration("interval", interval, positive=True).total_seconds()
        self.fired = 0
        # The queues of the worker it runs in (None: all, or no worker): a schedule firing into
        # another queue is said once, as its jobs wait there for a worker that serves it.
        self.queues = queues
        self._said_unserved: set[tuple[str, str]] = set()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        conn = await self.db.connect_async(application_name="cronbase-scheduler")
        await conn.set_autocommit(False)
        return conn

    async def sync_declared(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Upsert the schedules declared with ``@app.periodic`` (at worker and tick start)."""
        if not self.periodic:
            return
        q = self.db.queries
        async with conn.transaction():
            await conn.execute(q.limit_idle_transaction, IDLE_LIMIT)
            db_now = (await (await conn.execute(q.database_now)).fetchone() or [None])[0]
            for spec in self.periodic.values():
                await conn.execute(q.upsert_schedule, upsert_params(spec, db_now))

    async def tick(self, now: datetime | None = None) -> list[int]:
        """Fire every due slot once; returns the ids of the jobs created or found.

        ``now`` replaces the database clock (tests move time with it); by default the
        database's ``now()`` decides.
        """
        conn = await self._connect()
        try:
            await self.sync_declared(conn)
            return await self._tick(conn, now)
        finally:
            await conn.close()

    async def _tick(self, conn: psycopg.AsyncConnection[Any], now: datetime | None) -> list[int]:
        q = self.db.queries
        job_ids: list[int] = []
        while True:  # in batches, each its own transaction, until fewer than a batch are due
            async with conn.transaction():
                await conn.execute(q.limit_idle_transaction, IDLE_LIMIT)
                if now is None:
                    now = (await (await conn.execute(q.database_now)).fetchone() or [None])[0]
                async with conn.cursor(row_factory=dict_row) as cur:
                    await cur.execute(
                        q.lock_due_schedules,
                        {"now": now, "limit": DUE_BATCH, "tasks": list(self.tasks)},
                    )
                    due = [Schedule.from_row(r) for r in await cur.fetchall()]
                for schedule in due:
                    job_ids += await self._fire(conn, schedule, now)
            if len(due) < DUE_BATCH:
                return job_ids

    async def _fire(
        self, conn: psycopg.AsyncConnection[Any], schedule: Schedule, now: datetime
    ) -> list[int]:
        q = self.db.queries
        try:
            cron = Cron.parse(schedule.cron, schedule.tz)
        except ScheduleError as exc:
            # Only a row written around the API gets here; pausing it stops the retries.
            logger.error("schedule %r paused: %s", schedule.key, exc)
            await conn.execute(q.pause_schedule, {"key": schedule.key})
            return []
        steps = plan(cron, schedule.catch_up, schedule.max_catch_up, schedule.next_fire_at, now)
        task = find_task(self.tasks, schedule.task)  # known: lock_due_schedules filters by task
        options = task.options()
        queue = schedule.queue or options.queue
        if steps.slots:
            self._say_if_unserved(schedule.key, queue)
        ids = []
        for slot in steps.slots:
            opts = JobOptions(
                queue=queue,
                priority=options.priority,
                max_attempts=options.max_attempts,
                lease=options.lease,
                version=options.version,
                encrypt=options.encrypt,
                idempotency_key=slot_key(schedule.key, slot),
            )
            payload = scheduled_payload(schedule.payload, slot)
            query, params = build_insert(
                q,
                task.name,
                opts,
                payload,
                self.db.max_payload_bytes,
                None,
                None,
                self.db.sealing_keys,
            )
            row = await (await conn.execute(query, params)).fetchone()
            # No row: a concurrent insert of the same slot committed after our snapshot; that
            # job is the slot's job, and the conflict is absorbed.
            if row is not None:
                ids.append(int(row[0]))
                self.fired += int(bool(row[1]))
        if steps.missed:
            logger.info(
                "schedule %r: %d missed slots not run (catch_up=%s)",
                schedule.key,
                steps.missed,
                schedule.catch_up,
            )
        await conn.execute(
            q.advance_schedule,
            {
                "key": schedule.key,
                "last_fired_at": steps.slots[-1] if steps.slots else None,
                "next_fire_at": steps.next_fire_at,
            },
        )
        return ids

    def _say_if_unserved(self, key: str, queue: str) -> None:
        """Warn, once per schedule and queue, that this worker fires jobs it will not run: they
        wait for a worker that serves the queue (there may be one; if not, the dashboard's
        overview and ``cronbase stats`` name them)."""
        if self.queues is None or queue in self.queues or (key, queue) in self._said_unserved:
            return
        self._said_unserved.add((key, queue))
        logger.warning(
            "schedule %r fires its jobs into queue %r, which this worker does not serve (it "
            "serves: %s): they wait for a worker that does; add the queue to a worker's "
            "--queue, or give the schedule a queue that is served",
            key,
            queue,
            ", ".join(sorted(self.queues)),
        )

    async def run(self) -> None:
        """Tick every ``interval`` until cancelled (the worker's scheduling loop).

        A failed tick (database gone, a bad row) is logged and retried on a fresh connection;
        the loop itself only ends when cancelled.
        """
        from ..db.health import FailureLog
        from ..db.pool import has_news

        failures = FailureLog("scheduler tick")
        conn: psycopg.AsyncConnection[Any] | None = None
        declared = False
        try:
            while True:
                try:
                    if conn is not None and has_news(conn):
                        # The server ended it while the loop slept (a restart, an idle
                        # timeout): a new connection, not a failed tick and a second outage
                        # line after the other parts said the database was back.
                        await conn.close()
                        conn = None
                    if conn is None or conn.closed:
                        conn = await self._connect()
                    if not declared:
                        await self.sync_declared(conn)
                        declared = True
                    await self._tick(conn, None)
                    failures.succeeded()
                except Exception as exc:  # the database away, a bad row: never end the loop
                    failures.failed(exc)
                    if conn is not None:
                        await conn.close()
                    conn = None
                await asyncio.sleep(self.interval)
        finally:
            if conn is not None:
                await conn.close()
