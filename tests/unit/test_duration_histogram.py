"""The worker's duration histogram exposes what prometheus_client's own Histogram would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from cronbase.operations.metrics import DURATION_BUCKETS, DurationHistogram

# Bucket bounds themselves (a value equal to a bound is in that bucket), and values around them.
seconds = st.one_of(
    st.sampled_from([*DURATION_BUCKETS, 0.0, 7200.0]),
    st.floats(min_value=0.0, max_value=10_000.0, allow_nan=False),
)


@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), seconds), max_size=60))
def test_exposition_matches_prometheus_clients_histogram(observed: list[tuple[str, float]]) -> None:
    theirs_registry, ours_registry = CollectorRegistry(), CollectorRegistry()
    theirs = Histogram(
        "cronbase_job_duration_seconds",
        "Handler run time",
        ["task", "queue"],
        buckets=DURATION_BUCKETS,
        registry=theirs_registry,
    )
    ours = DurationHistogram("cronbase_job_duration_seconds", "Handler run time", DURATION_BUCKETS)
    ours_registry.register(ours)
    for task, value in observed:
        theirs.labels(task, "q").observe(value)
        ours.labels(task, "q").observe(value)
    expected = [
        line
        for line in generate_latest(theirs_registry).decode().splitlines()
        if "_created" not in line
    ]
    assert generate_latest(ours_registry).decode().splitlines() == expected
