"""cronbase_schedule_late_seconds, the metric the CronbaseScheduleMissed alert reads: how long
ago each schedule's next slot came without being fired, on rows written by other SQL."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

import cronbase
from cronbase.operations.metrics import database_families, database_state
from cronbase.schedule.scheduler import Scheduler


def lateness(app: cronbase.App) -> dict[str, float]:
    families = {f.name: f for f in database_families(database_state(app.db))}
    samples = families["cronbase_schedule_late_seconds"].samples
    return {s.labels["schedule"]: s.value for s in samples}


def test_lateness_grows_from_the_missed_slot_and_a_tick_clears_it(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def report() -> None:
        pass

    db.execute(
        "INSERT INTO cronbase.schedules (key, task, cron, next_fire_at, is_paused) VALUES "
        "('missed', %(t)s, '*/5 * * * *', now() - interval '10 minutes', false), "
        "('ahead', %(t)s, '0 * * * *', now() + interval '1 hour', false), "
        "('paused', %(t)s, '*/5 * * * *', now() - interval '3 hours', true)",
        {"t": report.name},
    )
    late = lateness(app)
    assert set(late) == {"missed", "ahead", "paused"}
    # The database's clock: ten minutes ago, give or take the test's own run time.
    assert 600 <= late["missed"] < 3600, late
    assert late["ahead"] == 0, late
    assert late["paused"] == 0, late  # its slots are skipped on purpose: no alert

    asyncio.run(Scheduler(app.db, app.tasks, app.periodic_schedules).tick())
    after = lateness(app)
    assert after["missed"] == 0, after  # fired, its next slot is ahead again
    assert after["paused"] == 0, after
    fired = db.execute(
        "SELECT count(*) FROM cronbase.jobs WHERE task = %s", [report.name]
    ).fetchone()
    assert fired == (1,)


def test_a_database_without_schedules_serves_the_family_empty(app: cronbase.App) -> None:
    # The dashboard and the rules query the metric: a scrape must name it even with no rows.
    families = {f.name: f for f in database_families(database_state(app.db))}
    assert families["cronbase_schedule_late_seconds"].samples == []
