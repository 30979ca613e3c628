"""The throughput chart's scale: whole "nice" steps (1, 2, 5 x 10^k), labels inside the picture."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from cronbase.dashboard.charts import CHAR, WIDTH, nice_ticks, throughput_svg
from cronbase.operations.stats import Minute


@pytest.mark.parametrize(
    ("peak", "ticks"),
    [
        (0, [0, 1]),
        (1, [0, 1]),
        (3, [0, 1, 2, 3]),
        (5, [0, 2, 4, 6]),
        (7, [0, 2, 4, 6, 8]),
        (13, [0, 5, 10, 15]),  # the old scale's middle label: 6.5
        (40, [0, 10, 20, 30, 40]),
        (99, [0, 50, 100]),
        (1613, [0, 500, 1000, 1500, 2000]),  # the old one: 806.5
        (25_000, [0, 10_000, 20_000, 30_000]),
    ],
)
def test_the_ticks_are_whole_nice_steps_from_zero_past_the_peak(
    peak: int, ticks: list[int]
) -> None:
    assert nice_ticks(peak) == ticks


@pytest.mark.parametrize("peak", [*range(130), 999, 1001, 1613, 4321, 77_777, 10**7 + 1])
def test_every_step_is_one_two_or_five_times_a_power_of_ten(peak: int) -> None:
    ticks = nice_ticks(peak)
    step = ticks[1]
    assert ticks[0] == 0
    assert ticks[-1] >= peak
    assert len(ticks) - 1 <= 4
    assert ticks == [step * i for i in range(len(ticks))]
    assert re.fullmatch(r"[125]0*", str(step)), step


def minutes_peaking_at(peak: int) -> list[Minute]:
    start = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)
    return [Minute(start + timedelta(minutes=i), peak if i == 30 else 0, 0) for i in range(60)]


@pytest.mark.parametrize("peak", [13, 1613, 250_000])
def test_the_scale_labels_are_whole_and_fit_left_of_the_plot(peak: int) -> None:
    svg = str(throughput_svg(minutes_peaking_at(peak)))
    labels = re.findall(
        r'<text class="label" x="([\d.]+)" y="[\d.]+" text-anchor="end">([^<]+)<', svg
    )
    assert [int(text) for _, text in labels] == nice_ticks(peak)  # int(): never "806.5"
    for x, text in labels:
        assert float(x) - len(text) * CHAR >= 0, text  # right-aligned at x, inside the viewBox


def test_the_time_labels_stay_inside_the_picture_at_both_ends() -> None:
    # The hour starts on a ten-minute mark and its last minute is one: labels at both edges.
    start = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)
    svg = str(throughput_svg([Minute(start + timedelta(minutes=i), 1, 0) for i in range(61)]))
    found = re.findall(r'x="([\d.]+)" y="[\d.]+" text-anchor="middle">([^<]+)<', svg)
    assert found[0][1] == "10:00 UTC"
    assert found[-1][1] == "11:00"
    for x, text in found:
        half = len(text) * CHAR / 2
        assert float(x) - half >= 0, text
        assert float(x) + half <= WIDTH, text
