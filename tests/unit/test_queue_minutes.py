"""Percentiles from the roll-up's wait buckets, and a queue's points from its minutes' rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cronbase.operations.queue_minutes import WAIT_BOUNDS, percentile, series

N = len(WAIT_BOUNDS) + 1
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def counts(**at: int) -> list[int]:
    waits = [0] * N
    for bucket, n in at.items():
        waits[int(bucket.removeprefix("b"))] = n
    return waits


def test_a_percentile_is_placed_within_its_bucket() -> None:
    # Ten waits in the bucket from 1 s to 2.5 s: the median halfway, the 10th percentile near 1.
    waits = counts(b5=10)
    assert percentile(waits, 0.5) == pytest.approx(1.75)
    assert percentile(waits, 0.1) == pytest.approx(1.15)
    # The first bucket starts at 0; the open last one answers its lower bound, an hour.
    assert percentile(counts(b0=4), 0.5) == pytest.approx(0.025)
    assert percentile(counts(b0=99, **{f"b{N - 1}": 1}), 1.0) == WAIT_BOUNDS[-1]
    assert percentile(counts(b0=1, b9=1), 0.95) is not None
    assert 30.0 <= (percentile(counts(b0=1, b9=1), 0.95) or 0) <= 60.0
    assert percentile([0] * N, 0.5) is None


def row(queue: str, minute: int, due: int = 0, started: int = 0, waits: list[int] | None = None):
    return {
        "queue": queue,
        "minute": T0 + timedelta(minutes=minute),
        "due": due,
        "running": 0,
        "started": started,
        "waits": waits if waits is not None else ([] if queue == "" else [0] * N),
    }


def test_points_sum_their_minutes_and_keep_the_last_depth() -> None:
    rows = [
        row("", 0),
        row("mail", 0, due=7, started=2, waits=counts(b1=2)),
        row("", 1),
        row("mail", 1, due=3, started=1, waits=counts(b9=1)),
        row("", 2),  # marked, nothing of mail: zero due then
        row("", 20),
        row("other", 20, due=9, started=4),
    ]
    (first, second) = series(rows, "mail", timedelta(minutes=15))
    assert (first.at, first.due, first.started) == (T0, 0, 3)
    assert first.waits == tuple(counts(b1=2, b9=1))
    assert (second.at, second.due, second.started) == (T0 + timedelta(minutes=15), 0, 0)
    by_minute = series(rows, "mail", timedelta(minutes=1))
    assert [p.due for p in by_minute] == [7, 3, 0, 0]
    # A row whose waits another code bucketed otherwise: its counts, no waits.
    odd = series(
        [row("", 0), row("mail", 0, due=1, started=5, waits=[5])], "mail", timedelta(minutes=1)
    )
    assert odd[0].started == 5
    assert odd[0].wait_p50 is None
