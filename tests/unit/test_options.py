"""JobOptions.check: every bad option is refused with one line naming the bad value."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any

import pytest

from cronbase import CronbaseError, JobOptions

AWARE = datetime(2030, 1, 1, tzinfo=UTC)


class NoOffset(tzinfo):
    """A tzinfo that knows no offset: datetimes with it are naive all the same."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None

    def tzname(self, dt: datetime | None) -> str | None:
        return None


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"queue": "emails", "priority": -32768, "max_attempts": 1},
        {"priority": 32767, "max_attempts": 2**31 - 1},
        {"run_at": AWARE},
        {"run_at": datetime(2030, 1, 1, tzinfo=timezone(timedelta(hours=-5)))},
        {"delay": timedelta(0)},
        {"delay": timedelta(days=30)},
        {"lease": timedelta(milliseconds=1)},
        {"idempotency_key": "charge:812", "dedupe_key": "invoice:812"},
        {"dedupe_key": "cache:prices", "on_duplicate": "replace"},
    ],
)
def test_good_options_pass(options: dict[str, Any]) -> None:
    JobOptions(**options).check()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"run_at": AWARE, "delay": timedelta(seconds=1)}, "not both"),
        ({"run_at": datetime(2030, 1, 1)}, "naive"),
        ({"run_at": datetime(2030, 1, 1, tzinfo=NoOffset())}, "naive"),
        ({"run_at": "2030-01-01T00:00:00Z"}, "'2030-01-01T00:00:00Z'"),
        ({"delay": timedelta(seconds=-5)}, "days=-1"),
        ({"delay": 30}, "30"),
        ({"priority": 32768}, "32768"),
        ({"priority": -32769}, "-32769"),
        ({"priority": 1.5}, "1.5"),
        ({"priority": "high"}, "'high'"),
        ({"priority": True}, "True"),
        ({"max_attempts": 0}, "got 0"),
        ({"max_attempts": -1}, "-1"),
        ({"max_attempts": 2**31}, str(2**31)),
        ({"max_attempts": "3"}, "'3'"),
        ({"lease": timedelta(0)}, "lease"),
        ({"lease": 60}, "60"),
        ({"queue": ""}, "queue"),
        ({"queue": 5}, "5"),
        ({"queue": None}, "None"),
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"idempotency_key": 812}, "812"),
        ({"dedupe_key": ""}, "dedupe_key"),
        ({"on_duplicate": "overwrite"}, "'overwrite'"),
        ({"on_duplicate": "replace"}, "dedupe_key"),
        ({"on_duplicate": "replace", "dedupe_key": "k", "idempotency_key": "i"}, "idempotency"),
    ],
)
def test_bad_options_are_refused_naming_the_value(options: dict[str, Any], named: str) -> None:
    with pytest.raises(CronbaseError) as caught:
        JobOptions(**options).check()
    message = str(caught.value)
    assert named in message
    assert "\n" not in message


def test_has_keys() -> None:
    assert not JobOptions().has_keys
    assert JobOptions(idempotency_key="a").has_keys
    assert JobOptions(dedupe_key="b").has_keys
