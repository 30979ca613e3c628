"""cronbase.contrib.celery's beat schedule as cronbase schedules (one job per slot), and a
Celery app module run by the ``cronbase`` command (``--app proj.celery_app:app``): worker, tick,
task discovery and shared tasks, in real processes on the real database."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.cli.common import load_app
from cronbase.contrib.celery import Celery, CeleryCompatibilityWarning, crontab
from cronbase.errors import ConfigurationError, ScheduleError
from cronbase.schedule.scheduler import Scheduler
from tests.e2e.test_cli import cli_env

CRONBASE = Path(sys.executable).with_name("cronbase")


@pytest.fixture
def capp(app: cronbase.App) -> Iterator[Celery]:
    return Celery("proj", cronbase_app=app)


def tick(capp: Celery, now: datetime) -> list[int]:
    wrapped = capp.wrapped  # declared by the test's capp.cronbase_app already
    return asyncio.run(Scheduler(wrapped.db, wrapped.tasks, wrapped.periodic_schedules).tick(now))


def test_beat_entries_are_declared_as_schedules_and_fire_once_per_slot(
    capp: Celery, db: psycopg.Connection[Any]
) -> None:
    @capp.task(name="proj.report")
    def report(team: str, full: bool = False) -> str:
        return team

    @capp.task(name="proj.ping")
    def ping() -> None: ...

    capp.conf.timezone = "Europe/Berlin"
    capp.conf.beat_schedule = {
        "weekday-report": {
            "task": "proj.report",
            "schedule": crontab(minute=30, hour=6, day_of_week="mon-fri"),
            "args": ("sales",),
            "kwargs": {"full": True},
            "options": {"queue": "reports"},
        },
    }
    capp.conf.beat_schedule["every-ten-minutes"] = {
        "task": "proj.ping",
        "schedule": timedelta(minutes=10),
    }
    with pytest.warns(CeleryCompatibilityWarning, match=r"clock-aligned slots \(cron '0 \*/10"):
        periodic = capp.cronbase_app.periodic_schedules
    report_spec = periodic["weekday-report"]
    assert (report_spec.cron.expression, str(report_spec.cron.zone)) == (
        "30 6 * * mon-fri",
        "Europe/Berlin",
    )
    assert (report_spec.payload, report_spec.queue) == ({"team": "sales", "full": True}, "reports")
    assert periodic["every-ten-minutes"].cron.expression == "0 */10 * * * *"

    # The first tick stores the schedules; put the report's next slot at a Monday 06:30 in
    # Berlin (05:30 UTC in winter): a tick after it fires it once, a second one fires nothing.
    monday = datetime(2026, 1, 5, 5, 30, tzinfo=UTC)
    tick(capp, datetime.now(UTC))
    db.execute(
        "UPDATE cronbase.schedules SET next_fire_at = %s WHERE key = 'weekday-report'", [monday]
    )
    fired = tick(capp, monday + timedelta(seconds=2))
    again = tick(capp, monday + timedelta(seconds=30))
    rows = db.execute(
        "SELECT task, queue, payload - 'scheduled_at', idempotency_key FROM cronbase.jobs_all "
        "WHERE id = ANY(%s) ORDER BY id",
        [fired],
    ).fetchall()
    assert ("proj.report", "reports", {"team": "sales", "full": True}) in [r[:3] for r in rows]
    assert any(r[3] == "schedule:weekday-report@2026-01-05T05:30:00Z" for r in rows)
    assert len(rows) == 1
    assert again == []


def test_add_periodic_task_from_on_after_configure(capp: Celery) -> None:
    @capp.task(name="proj.hello")
    def hello(name: str) -> str:
        return name

    @capp.on_after_configure.connect
    def setup(sender: Celery, **kwargs: Any) -> None:
        sender.add_periodic_task(crontab(minute=0), hello.s("world"), name="hourly-hello")

    spec = capp.cronbase_app.periodic_schedules["hourly-hello"]
    assert (spec.cron.expression, spec.payload) == ("0 * * * *", {"name": "world"})


def test_what_beat_cannot_map_is_refused(capp: Celery) -> None:
    @capp.task(name="proj.job")
    def job() -> None: ...

    with pytest.raises(ScheduleError, match="fires on days that match both"):
        crontab(day_of_week=1, day_of_month="1-7")
    with pytest.raises(ScheduleError, match="nowfun"):
        crontab(nowfun=datetime.now)
    capp.conf.beat_schedule = {"odd": {"task": "proj.job", "schedule": 7}}
    with pytest.raises(ScheduleError, match=r"every 7s has no cron expression"):
        capp.finalize()
    capp.conf.beat_schedule = {"gone": {"task": "proj.nope", "schedule": crontab()}}
    with pytest.raises(ConfigurationError, match=r"no task 'proj.nope'; registered: proj.job"):
        capp.finalize()
    capp.conf.beat_schedule = {
        "late": {"task": "proj.job", "schedule": crontab(), "options": {"expires": 5}}
    }
    with pytest.raises(ConfigurationError, match=r"option 'expires' is not supported"):
        capp.finalize()
    capp.conf.beat_schedule = {"obj": {"task": "proj.job", "schedule": object()}}
    with pytest.raises(ConfigurationError, match="is not supported; give a crontab"):
        capp.finalize()


def test_load_app_takes_an_object_with_a_cronbase_app(
    capp: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = type(sys)("celery_app_for_load")
    module.app = capp  # type: ignore[attr-defined]
    module.other = object()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "celery_app_for_load", module)
    assert load_app("celery_app_for_load:app") is capp.wrapped
    with pytest.raises(ConfigurationError, match=r"is a object, not a cronbase\.App"):
        load_app("celery_app_for_load:other")


PROJECT = {
    "shop/__init__.py": "",
    "shop/celery_app.py": """
        from datetime import timedelta
        from cronbase.contrib.celery import Celery, crontab

        app = Celery("shop")
        app.conf.update(
            task_default_queue="shop",
            beat_schedule={
                "nightly": {"task": "shop.tasks.nightly", "schedule": crontab(minute=0, hour=3)},
            },
        )
        app.autodiscover_tasks(["shop"])
    """,
    "shop/tasks.py": """
        from cronbase.contrib.celery import shared_task

        @shared_task
        def double(n: int) -> int:
            return 2 * n

        @shared_task
        def nightly() -> None: ...
    """,
    "shop/produce.py": """
        from shop.celery_app import app
        from shop.tasks import double

        print(double.delay(21).id)
    """,
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for name, text in PROJECT.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def run(project: Path, database_url: str, *args: str) -> str:
    done = subprocess.run(
        args,
        cwd=project,
        env=cli_env(database_url),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
def test_the_command_runs_a_celery_app_its_discovered_tasks_and_its_beat_schedule(
    project: Path, database_url: str, db: psycopg.Connection[Any]
) -> None:
    job_id = int(run(project, database_url, sys.executable, "-m", "shop.produce").strip())
    run(project, database_url, str(CRONBASE), "--app", "shop.celery_app:app", "worker", "--burst")
    status, result, queue = db.execute(
        "SELECT status, result, queue FROM cronbase.jobs_all WHERE id = %s", [job_id]
    ).fetchone() or (None, None, None)
    assert (status, result, queue) == ("succeeded", 42, "shop")
    run(project, database_url, str(CRONBASE), "--app", "shop.celery_app:app", "tick", "--no-run")
    schedules = db.execute("SELECT key, task, cron FROM cronbase.schedules").fetchall()
    assert schedules == [("nightly", "shop.tasks.nightly", "0 3 * * *")]


DJANGO_PROJECT = """
import django
from django.conf import settings

settings.configure(
    INSTALLED_APPS=["shop"], CELERY_TIMEZONE="Europe/Berlin", CELERY_TASK_DEFAULT_QUEUE="dj"
)
django.setup()

from cronbase.contrib.celery import Celery

app = Celery("dj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.finalize()
print(app.conf.timezone, app.conf.task_default_queue, *sorted(app.tasks))
"""


@pytest.mark.slow
def test_django_settings_and_installed_apps_configure_the_app(
    project: Path, database_url: str
) -> None:
    out = run(project, database_url, sys.executable, "-c", DJANGO_PROJECT)
    assert out.split() == ["Europe/Berlin", "dj", "shop.tasks.double", "shop.tasks.nightly"]
