"""Task versions (``@app.task(version=N)``, migration 0018): a job deferred for version N is
claimed only by workers that have version N or later of its task; the registry records each
worker's code (workers.version, schema_version) and unserved_jobs names what nobody serves."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from rich.console import Console

import cronbase
from cronbase.cli.jobs import job_details
from cronbase.db.migrate import LATEST_VERSION
from cronbase.schedule.scheduler import Scheduler
from cronbase.worker.claim import claimable_names
from cronbase.worker.startup import package_version
from tests.conftest import SCHEMA


def two_releases(database_url: str) -> tuple[cronbase.App, cronbase.App, list[str]]:
    """The same task, ``work``, at version 1 (the previous code) and version 2 (the new code),
    each App with its own registry on the one database; ``ran`` says which code ran what."""
    ran: list[str] = []
    old = cronbase.App(database_url=database_url, schema=SCHEMA)
    new = cronbase.App(database_url=database_url, schema=SCHEMA)

    @old.task(name="work")
    def work_v1(n: int) -> None:
        ran.append(f"v1:{n}")

    @new.task(name="work", version=2)
    def work_v2(n: int) -> None:
        # The handler sees which version its job was deferred for (a v1 job keeps its shape).
        ran.append(f"v2:{n}:job{cronbase.current_job().task_version}")

    return old, new, ran


def burst(app: cronbase.App) -> None:
    app.run_worker(burst=True, install_signal_handlers=False, schedule=False, retention=None)


def state(db: psycopg.Connection[Any], job_id: int) -> tuple[str, int, int | None]:
    row = db.execute(
        "SELECT status, attempts, task_version FROM cronbase.jobs_all WHERE id = %s", [job_id]
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def test_names_a_worker_claims_by() -> None:
    assert claimable_names({"a": 1, "b": 3}) == ["a", "b", "b@2", "b@3"]
    assert claimable_names({}) == []


@pytest.mark.parametrize("bad", [0, -1, "2", 2.0, True, 1001])
def test_a_bad_version_is_refused_naming_it(app: cronbase.App, bad: object) -> None:
    with pytest.raises(cronbase.ConfigurationError, match=r"^version must be a whole number") as e:

        @app.task(version=bad)  # type: ignore[call-overload]
        def handler() -> None: ...

    assert repr(bad) in str(e.value)
    assert "\n" not in str(e.value)


def test_an_old_worker_leaves_version_2_jobs_and_a_new_one_claims_both(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    old, new, ran = two_releases(database_url)
    try:
        v1 = old.tasks["work"].defer(n=1)
        v2 = new.tasks["work"].defer(n=2)
        many = new.tasks["work"].defer_many([{"n": 3}, {"n": 4}])
        keyed = new.tasks["work"].configure(idempotency_key="k").defer(n=5)
        assert state(db, v1) == ("queued", 0, None)
        assert {state(db, i)[2] for i in [v2, *many, keyed]} == {2}
        # The API, `cronbase jobs show` and the job page (test_http.py) say it too.
        assert (old.jobs.get(v1).task_version, new.jobs.get(v2).task_version) == (None, 2)
        for job_id, shown in ((v2, ["task version  2"]), (v1, [])):
            console = Console(width=100, record=True)
            console.print(job_details(new.jobs.get(job_id)))
            lines = [line.strip() for line in console.export_text().splitlines()]
            assert [line for line in lines if line.startswith("task version")] == shown

        burst(old)
        assert ran == ["v1:1"]
        # Untouched by the old code: no attempt burnt, waiting for a worker that has version 2.
        assert {state(db, i) for i in [v2, *many, keyed]} == {("queued", 0, 2)}

        v1_again = old.tasks["work"].defer(n=6)
        burst(new)
        assert sorted(ran) == [
            "v1:1",
            "v2:2:job2",
            "v2:3:job2",
            "v2:4:job2",
            "v2:5:job2",
            "v2:6:job1",
        ]
        assert state(db, v1_again)[:2] == ("succeeded", 1)
        assert state(db, v2) == ("succeeded", 1, 2)
    finally:
        old.close()
        new.close()


def test_limited_versioned_jobs_follow_the_same_rule(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    # claim_flow_jobs has the task filter too (a task with a fleet-wide limit).
    ran: list[str] = []
    old = cronbase.App(database_url=database_url, schema=SCHEMA)
    new = cronbase.App(database_url=database_url, schema=SCHEMA)

    @old.task(name="limited", global_concurrency=1)
    def limited_v1() -> None:
        ran.append("v1")

    @new.task(name="limited", global_concurrency=1, version=3)
    def limited_v3() -> None:
        ran.append("v3")

    try:
        job = new.tasks["limited"].defer()
        burst(old)
        assert state(db, job) == ("queued", 0, 3)
        burst(new)
        assert ran == ["v3"]
        assert state(db, job)[:2] == ("succeeded", 1)
    finally:
        old.close()
        new.close()


def test_unserved_jobs_name_a_version_no_live_worker_has(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    old, new, _ = two_releases(database_url)
    try:
        old.tasks["work"].defer(n=1)
        new.tasks["work"].defer(n=2)
        # A live worker of the previous code: it has version 1 of "work" only.
        db.execute(
            "INSERT INTO cronbase.workers (id, hostname, pid, concurrency, tasks) "
            "VALUES ('old', 'h', 1, 1, ARRAY['work'])"
        )
        assert [(u.task, u.queue, u.waiting) for u in new.unserved_jobs()] == [
            ("work@2", "default", 1)
        ]
        db.execute(
            "INSERT INTO cronbase.workers (id, hostname, pid, concurrency, tasks) "
            "VALUES ('new', 'h', 2, 1, ARRAY['work', 'work@2'])"
        )
        assert new.unserved_jobs() == []
    finally:
        old.close()
        new.close()


def test_a_worker_registers_its_versions_and_its_code(app: cronbase.App) -> None:
    @app.task(version=3)
    def shaped() -> None: ...

    @app.task
    def plain() -> None: ...

    worker = app.worker(install_signal_handlers=False, schedule=False, retention=None)

    async def main() -> list[Any]:
        task = asyncio.create_task(worker.run())
        await worker.started.wait()
        try:
            return await app.workers_async()
        finally:
            worker.stop()
            await task

    (info,) = asyncio.run(main())
    assert info.tasks == ["plain", "shaped", "shaped@2", "shaped@3"]
    assert (info.version, info.schema_version) == (package_version(), LATEST_VERSION)
    assert info.to_json()["schema_version"] == LATEST_VERSION


def test_scheduled_jobs_carry_their_task_version(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(version=2)
    def ping() -> None: ...

    app.schedules.add("ping", cron="*/5 * * * *", key="ping")
    slot = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    db.execute("UPDATE cronbase.schedules SET next_fire_at = %s WHERE key = 'ping'", [slot])
    scheduler = Scheduler(app.db, app.tasks, app.periodic_schedules)
    fired = asyncio.run(scheduler.tick(slot + timedelta(seconds=3)))
    by_hand = app.schedules.run_now("ping")
    assert len(fired) == 1
    assert {state(db, job)[2] for job in [*fired, by_hand]} == {2}
