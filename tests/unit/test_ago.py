"""The coarse ``ago`` filter: "21 min ago", not "1294s ago" nor "21 min 34 s ago"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cronbase.dashboard.filters import ago
from cronbase.dashboard.render import Renderer

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "now"),
        (0.4, "now"),
        (12, "12 s ago"),
        (59.9, "59 s ago"),
        (60, "1 min ago"),
        (1294, "21 min ago"),
        (3599, "59 min ago"),
        (3 * 3600 + 1800, "3 h ago"),
        (2 * 86400 + 3600, "2 d ago"),
        (-1294, "in 21 min"),
        (-45, "in 45 s"),
    ],
)
def test_ago_is_coarse_with_seconds_only_under_a_minute(seconds: float, text: str) -> None:
    assert ago(NOW - timedelta(seconds=seconds), NOW) == text


def test_ago_of_nothing_is_empty() -> None:
    assert ago(None, NOW) == ""


def test_the_templates_have_it() -> None:
    env = Renderer().templates.env
    moment = datetime.now(UTC) - timedelta(minutes=21, seconds=34)
    assert env.from_string("{{ t | ago }}").render(t=moment) == "21 min ago"
