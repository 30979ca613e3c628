"""cronbase.contrib.celery's pure parts: the compatibility table and its page, crontab and
intervals as cron, routes, and states."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from cronbase.contrib.celery import crontab, states
from cronbase.contrib.celery.beat import interval_cron
from cronbase.contrib.celery.compatibility import TABLE, markdown
from cronbase.contrib.celery.settings import route
from cronbase.errors import ConfigurationError, ScheduleError
from cronbase.job import JobStatus

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "celery-compatibility.md"


def test_the_page_shows_the_table_as_the_code_holds_it() -> None:
    text = PAGE.read_text("utf-8")
    found = re.search(
        r"<!-- table: cronbase.contrib.celery.compatibility.TABLE -->\n\n(.*)<!-- end of table -->",
        text,
        re.DOTALL,
    )
    assert found is not None, "the page has lost its table markers"
    assert found[1] == markdown(), "regenerate the table: compatibility.markdown()"


def test_every_row_says_how_close_it_is() -> None:
    for _part, rows in TABLE:
        for row in rows:
            assert re.match(r"(same|warned|refused|cronbase only)\b", row.behaviour), row


@pytest.mark.parametrize(
    ("schedule", "cron"),
    [
        (crontab(), "* * * * *"),
        (crontab(minute=30, hour=6, day_of_week="Mon-Fri"), "30 6 * * mon-fri"),
        (crontab(minute=[0, 30], hour="*/3"), "0,30 */3 * * *"),
        (crontab(minute=0, hour=0, day_of_month=1, month_of_year="jan"), "0 0 1 jan *"),
        (crontab(minute=0, day_of_week="sunday"), "0 * * * sun"),
        (crontab.from_string("5 4 * * 1"), "5 4 * * 1"),
    ],
)
def test_a_crontab_is_the_cron_expression_of_its_fields(schedule: crontab, cron: str) -> None:
    assert schedule.cron == cron


def test_a_crontab_cron_cannot_read_is_refused_naming_it() -> None:
    with pytest.raises(ScheduleError, match="61"):
        crontab(minute=61)


@pytest.mark.parametrize(
    ("every", "cron"),
    [
        (1, "* * * * * *"),
        (30.0, "*/30 * * * * *"),
        (timedelta(minutes=15), "0 */15 * * * *"),
        (timedelta(hours=6), "0 0 */6 * * *"),
        (timedelta(days=1), "0 0 0 * * *"),
    ],
)
def test_an_interval_is_the_clock_aligned_cron_of_its_period(
    every: float | timedelta, cron: str
) -> None:
    assert interval_cron("entry", every) == cron


@pytest.mark.parametrize("every", [7, 0.5, timedelta(minutes=90), timedelta(days=2), 0])
def test_an_interval_no_cron_expression_has_is_refused(every: float | timedelta) -> None:
    with pytest.raises(ScheduleError, match="entry"):
        interval_cron("entry", every)


def test_routes_match_names_globs_and_regexes_in_order() -> None:
    routes = [
        {"proj.mail.urgent": "urgent", "proj.mail.*": {"queue": "emails"}},
        {re.compile(r"proj\.(video|audio)\."): {"queue": "media"}},
    ]
    assert route(routes, "proj.mail.urgent") == "urgent"
    assert route(routes, "proj.mail.send") == "emails"
    assert route(routes, "proj.video.encode") == "media"
    assert route(routes, "proj.other") is None
    with pytest.raises(ConfigurationError, match="exchange has no meaning"):
        route({"x": {"queue": "q", "exchange": "e"}}, "x")


def test_every_job_status_reads_as_a_celery_state() -> None:
    assert {s: states.state_of(s) for s in JobStatus} == {
        JobStatus.PENDING: "PENDING",
        JobStatus.QUEUED: "PENDING",
        JobStatus.RUNNING: "STARTED",
        JobStatus.FAILED: "RETRY",
        JobStatus.SUCCEEDED: "SUCCESS",
        JobStatus.DEAD: "FAILURE",
        JobStatus.CANCELLED: "REVOKED",
    }
    assert states.state_of(None) == "PENDING"
