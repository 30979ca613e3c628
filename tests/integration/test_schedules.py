"""Schedules on real PostgreSQL: one job per slot, catch-up policies, DST, pause, persistence.

Time moves by handing the scheduler an explicit ``now`` (a test clock); nothing sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest

import cronbase
from cronbase.errors import ScheduleError
from cronbase.schedule.cron import Cron
from cronbase.schedule.scheduler import Scheduler


def jobs_of(db: psycopg.Connection[Any], task: str) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT payload->>'scheduled_at', idempotency_key FROM cronbase.jobs_all "
        "WHERE task = %s ORDER BY id",
        [task],
    ).fetchall()


def tick(app: cronbase.App, now: datetime | None = None) -> list[int]:
    return asyncio.run(Scheduler(app.db, app.tasks, app.periodic_schedules).tick(now))


def set_next_fire(db: psycopg.Connection[Any], key: str, moment: datetime) -> None:
    db.execute("UPDATE cronbase.schedules SET next_fire_at = %s WHERE key = %s", [moment, key])


@pytest.fixture
def report_app(app: cronbase.App) -> cronbase.App:
    @app.task(queue="reports")
    def send_weekly_report(user_id: int, scheduled_at: datetime) -> None:
        assert isinstance(scheduled_at, datetime)

    @app.task
    def ping() -> None:
        pass

    return app


def test_a_runtime_schedule_is_stored_with_its_next_fire_time(report_app: cronbase.App) -> None:
    schedule = report_app.schedules.add(
        "send_weekly_report",
        cron="0 8 * * MON",
        tz="America/New_York",
        payload={"user_id": 12345},
        key="weekly:12345",
    )
    assert schedule.key == "weekly:12345"
    local = schedule.local(schedule.next_fire_at)
    assert local is not None
    assert (local.weekday(), local.hour, local.minute) == (0, 8, 0)
    assert [s.key for s in report_app.schedules.list()] == ["weekly:12345"]


def test_each_slot_becomes_one_job_with_its_time(
    report_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    report_app.schedules.add("ping", cron="*/5 * * * *", key="ping")
    start = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    set_next_fire(db, "ping", start)
    assert tick(report_app, start - timedelta(seconds=1)) == []
    first = tick(report_app, start + timedelta(seconds=3))
    again = tick(report_app, start + timedelta(minutes=1))
    second = tick(report_app, start + timedelta(minutes=5))
    assert len(first) == 1
    assert again == []
    assert len(second) == 1
    assert jobs_of(db, "ping") == [
        ("2026-01-01T12:00:00+00:00", "schedule:ping@2026-01-01T12:00:00Z"),
        ("2026-01-01T12:05:00+00:00", "schedule:ping@2026-01-01T12:05:00Z"),
    ]


def test_concurrent_tick_processes_create_one_job_per_slot(
    report_app: cronbase.App, db: psycopg.Connection[Any], database_url: str
) -> None:
    report_app.schedules.add("ping", cron="* * * * *", key="ping", catch_up="all")
    # An outage of ten minutes, so there are several slots to race over.
    db.execute(
        "UPDATE cronbase.schedules SET next_fire_at = date_trunc('minute', now()) "
        "- interval '10 minutes' WHERE key = 'ping'"
    )
    code = (
        "import asyncio, sys, cronbase\n"
        "from cronbase.schedule.scheduler import Scheduler\n"
        "app = cronbase.App(database_url=sys.argv[1])\n"
        "app.task(lambda: None, name='ping')\n"
        "print(len(asyncio.run(Scheduler(app.db, app.tasks, app.periodic_schedules).tick())))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, database_url], stdout=subprocess.PIPE, text=True
        )
        for _ in range(6)
    ]
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    rows = jobs_of(db, "ping")
    slots = [r[0] for r in rows]
    assert len(slots) == len(set(slots))
    assert 10 <= len(slots) <= 12  # ten minutes back to now: 11 slots, 12 if a minute turned
    assert sum(int(o) for o in outputs) >= len(slots)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("latest", ["2026-01-01T15:00:00+00:00"]),
        (
            "all",
            [f"2026-01-01T{h}:00:00+00:00" for h in (10, 11, 12, 13, 14, 15)],
        ),
        ("none", []),
    ],
)
def test_catch_up_policies_after_an_outage(
    report_app: cronbase.App, db: psycopg.Connection[Any], policy: str, expected: list[str]
) -> None:
    report_app.schedules.add("ping", cron="@hourly", key="ping", catch_up=policy)
    set_next_fire(db, "ping", datetime(2026, 1, 1, 10, tzinfo=UTC))
    tick(report_app, datetime(2026, 1, 1, 15, 30, tzinfo=UTC))
    assert [r[0] for r in jobs_of(db, "ping")] == expected
    after = report_app.schedules.get("ping")
    assert after.next_fire_at == datetime(2026, 1, 1, 16, tzinfo=UTC)


def test_max_catch_up_beyond_what_a_tick_should_enqueue_is_refused(
    report_app: cronbase.App,
) -> None:
    with pytest.raises(
        cronbase.ScheduleError, match=r"from 1 to 10,000, got 100,000,000: one tick"
    ):
        report_app.schedules.add(
            "ping", cron="@hourly", key="ping", catch_up="all", max_catch_up=100_000_000
        )
    assert report_app.schedules.list() == []


def test_catch_up_all_is_bounded_by_max_catch_up(
    report_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    report_app.schedules.add("ping", cron="@hourly", key="ping", catch_up="all", max_catch_up=3)
    set_next_fire(db, "ping", datetime(2026, 1, 1, 0, tzinfo=UTC))
    tick(report_app, datetime(2026, 1, 2, 0, 30, tzinfo=UTC))
    assert [r[0] for r in jobs_of(db, "ping")] == [
        "2026-01-01T22:00:00+00:00",
        "2026-01-01T23:00:00+00:00",
        "2026-01-02T00:00:00+00:00",
    ]


def test_policy_none_still_runs_the_slot_that_just_came_due(
    report_app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    report_app.schedules.add("ping", cron="@hourly", key="ping", catch_up="none")
    set_next_fire(db, "ping", datetime(2026, 1, 1, 10, tzinfo=UTC))
    tick(report_app, datetime(2026, 1, 1, 10, 0, 40, tzinfo=UTC))
    assert [r[0] for r in jobs_of(db, "ping")] == ["2026-01-01T10:00:00+00:00"]


def _walk(app: cronbase.App, start: datetime, hours: int, step: timedelta) -> None:
    now = start
    while now < start + timedelta(hours=hours):
        tick(app, now)
        now += step


@pytest.mark.parametrize(
    ("tz", "cron", "day", "local_times"),
    [
        # Spring forward: 02:30 does not exist that night; it runs once, at 03:00.
        ("Europe/Berlin", "30 2 * * *", "2026-03-29", ["03:00"]),
        ("America/New_York", "30 2 * * *", "2026-03-08", ["03:00"]),
        # Fall back: the hour repeats; the job in it runs once.
        ("Europe/Berlin", "0 2 * * *", "2026-10-25", ["02:00"]),
        ("America/New_York", "0 1 * * *", "2026-11-01", ["01:00"]),
    ],
)
def test_dst_changes_give_one_run_per_slot(
    report_app: cronbase.App,
    db: psycopg.Connection[Any],
    tz: str,
    cron: str,
    day: str,
    local_times: list[str],
) -> None:
    zone = ZoneInfo(tz)
    midnight = datetime.fromisoformat(day).replace(tzinfo=zone)
    report_app.schedules.add("ping", cron=cron, tz=tz, key="ping", catch_up="all")
    set_next_fire(db, "ping", Cron.parse(cron, tz).next_after(midnight.astimezone(UTC)))
    _walk(report_app, midnight.astimezone(UTC), hours=6, step=timedelta(minutes=15))
    fired = [datetime.fromisoformat(r[0]).astimezone(zone) for r in jobs_of(db, "ping")]
    assert [f.strftime("%H:%M") for f in fired] == local_times
    assert all(f.date().isoformat() == day for f in fired)


def test_pause_and_resume(report_app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    report_app.schedules.add("ping", cron="@hourly", key="ping")
    report_app.schedules.pause("ping")
    db.execute("UPDATE cronbase.schedules SET next_fire_at = now() - interval '2 hours'")
    assert tick(report_app) == []
    assert report_app.schedules.get("ping").is_paused
    resumed = report_app.schedules.resume("ping")
    assert not resumed.is_paused
    db_now = db.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    # Slots that passed while paused are not run: the next one is in the future.
    assert resumed.next_fire_at > db_now
    assert tick(report_app) == []
    assert jobs_of(db, "ping") == []


def test_runtime_schedules_survive_a_restart(
    report_app: cronbase.App, database_url: str, db: psycopg.Connection[Any]
) -> None:
    report_app.schedules.add(
        "send_weekly_report", cron="0 8 * * MON", payload={"user_id": 7}, key="weekly:7"
    )
    report_app.close()
    fresh = cronbase.App(database_url=database_url)
    try:

        @fresh.task(queue="reports")
        def send_weekly_report(user_id: int, scheduled_at: datetime) -> None:
            pass

        [schedule] = fresh.schedules.list()
        assert (schedule.key, schedule.payload, schedule.cron) == (
            "weekly:7",
            {"user_id": 7},
            "0 8 * * MON",
        )
        tick(fresh, schedule.next_fire_at + timedelta(seconds=1))
        [(scheduled_at, key)] = jobs_of(db, "send_weekly_report")
        assert datetime.fromisoformat(scheduled_at) == schedule.next_fire_at
        assert key.startswith("schedule:weekly:7@")
        job = fresh.jobs.list(task="send_weekly_report")[0]
        assert job.queue == "reports"
        assert job.payload["user_id"] == 7
    finally:
        fresh.close()


def test_removed_schedule_stops(report_app: cronbase.App, db: psycopg.Connection[Any]) -> None:
    report_app.schedules.add("ping", cron="@hourly", key="ping")
    report_app.schedules.remove("ping")
    assert report_app.schedules.list() == []
    with pytest.raises(ScheduleError, match="no schedule with key 'ping'"):
        report_app.schedules.remove("ping")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "0 25 * * *"}, "bad hour field '25'"),
        ({"cron": "* * * *"}, "4 fields"),
        ({"cron": "@hourly", "tz": "Europe/Berln"}, "unknown time zone 'Europe/Berln'"),
        ({"cron": "@hourly", "catch_up": "some"}, "unknown catch_up policy 'some'"),
    ],
)
def test_bad_schedules_are_refused_and_nothing_is_written(
    report_app: cronbase.App, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ScheduleError, match=message):
        report_app.schedules.add("ping", key="ping", **kwargs)
    assert report_app.schedules.list() == []


def test_unknown_task_or_payload_is_refused(report_app: cronbase.App) -> None:
    with pytest.raises(cronbase.UnknownTaskError, match="unknown task 'pong'"):
        report_app.schedules.add("pong", cron="@hourly")
    with pytest.raises(cronbase.PayloadError, match="send_weekly_report"):
        report_app.schedules.add("send_weekly_report", cron="@hourly", payload={"nope": 1})
    assert report_app.schedules.list() == []


def test_periodic_declares_a_schedule_and_the_handler_gets_the_slot(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    seen: list[datetime] = []

    @app.periodic(cron="0 2 * * *", tz="Europe/Berlin", key="nightly-cleanup")
    @app.task(queue="maintenance")
    def cleanup(scheduled_at: datetime) -> None:
        seen.append(scheduled_at)

    assert tick(app, datetime(2026, 1, 1, tzinfo=UTC)) == []  # upserted, nothing due yet
    [schedule] = app.schedules.list()
    assert (schedule.key, schedule.task, schedule.source) == ("nightly-cleanup", "cleanup", "code")
    assert tick(app, schedule.next_fire_at + timedelta(minutes=1))
    app.run_worker(burst=True, install_signal_handlers=False)
    assert len(seen) == 1
    assert seen[0] == schedule.next_fire_at
    assert seen[0].astimezone(ZoneInfo("Europe/Berlin")).hour == 2


def test_periodic_refuses_a_bad_expression_at_declaration(app: cronbase.App) -> None:
    @app.task
    def hourly() -> None:
        pass

    with pytest.raises(ScheduleError, match="bad minute field '99'"):
        app.periodic(cron="99 * * * *")(hourly)


def test_async_twins_do_the_same(report_app: cronbase.App) -> None:
    async def main() -> None:
        added = await report_app.schedules.add_async(
            "send_weekly_report", cron="0 8 * * MON", payload={"user_id": 1}, key="weekly:1"
        )
        assert [s.key for s in await report_app.schedules.list_async()] == ["weekly:1"]
        assert (await report_app.schedules.pause_async("weekly:1")).is_paused
        resumed = await report_app.schedules.resume_async("weekly:1")
        assert not resumed.is_paused
        assert resumed.next_fire_at == added.next_fire_at  # no Monday 08:00 passed meanwhile
        assert (await report_app.schedules.get_async("weekly:1")).payload == {"user_id": 1}
        await report_app.schedules.remove_async("weekly:1")
        with pytest.raises(ScheduleError, match="no schedule with key 'weekly:1'"):
            await report_app.schedules.get_async("weekly:1")
        with pytest.raises(ScheduleError, match="bad hour field '24'"):
            await report_app.schedules.add_async("ping", cron="0 24 * * *")
        await report_app.aclose()

    asyncio.run(main())


def test_a_scheduler_connection_the_server_ended_is_replaced_not_a_failed_tick(
    app: cronbase.App, db: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A restart ends the scheduler's connection while its loop sleeps between ticks: the next
    tick takes a new one instead of failing (which logged a second outage after the worker's
    other parts had said the database was back)."""
    sessions = (
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'cronbase-scheduler' "
        "AND state = 'idle' AND datname = current_database()"
    )

    async def scenario() -> list[int]:
        # Ticks 2 s apart: the connection is ended well inside a sleep, not during a tick.
        scheduler = Scheduler(app.db, app.tasks, app.periodic_schedules, interval=2)
        loop = asyncio.create_task(scheduler.run())
        seen: list[int] = []
        try:
            # Bounded waits: its first connection idle between ticks, then ended by the server.
            for _ in range(600):
                if rows := db.execute(sessions).fetchall():
                    break
                await asyncio.sleep(0.1)
            assert rows, "the scheduler never connected"
            first = rows[0][0]
            db.execute("SELECT pg_terminate_backend(%s)", [first])
            for _ in range(600):
                seen = [pid for (pid,) in db.execute(sessions).fetchall()]
                if seen and first not in seen:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(2.5)  # another tick on the new connection
        finally:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop
        return seen

    caplog.set_level(logging.INFO)
    seen = asyncio.run(scenario())
    assert seen, "no new scheduler connection"
    failed = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert failed == [], failed
