"""The overview's throughput chart: labelled axes, every minute hoverable, text escaped."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from cronbase.dashboard.charts import throughput_svg
from cronbase.operations.stats import Minute


def hour(start: datetime) -> list[Minute]:
    return [Minute(start + timedelta(minutes=i), i % 7, i % 3) for i in range(60)]


def test_the_time_axis_is_labelled_every_ten_minutes_and_the_scale_in_whole_steps() -> None:
    svg = str(throughput_svg(hour(datetime(2026, 11, 24, 10, 3, tzinfo=UTC))))
    labels = re.findall(r'text-anchor="middle">([^<]+)</text>', svg)
    assert labels == ["10:10 UTC", "10:20", "10:30", "10:40", "10:50", "11:00"]
    scale = re.findall(r'text-anchor="end">([^<]+)</text>', svg)
    assert scale == ["0", "2", "4", "6", "8"]  # peak 8: whole, nice steps (see test_chart_ticks)
    assert "attempts per minute" in svg
    assert svg.count("<title>") == 60  # every minute has its hover text
    assert "10:03 UTC: 0 attempts succeeded, 0 attempts failed" in svg


def test_an_empty_hour_still_draws_its_axes() -> None:
    svg = str(throughput_svg([]))
    assert svg.startswith("<svg")
    assert "<rect" not in svg
