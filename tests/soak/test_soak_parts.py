"""The soak's parts that need no load: the slope fit, the checks on made-up samples (a flat run
passes, a hot table that keeps its jobs fails), and the table sampler finding partitions (in any
schema) under their root table, as the partitioned job history will have them."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from bench.soak import analysis, tables
from bench.soak.analysis import fit
from bench.soak.config import SoakConfig


def test_fit_recovers_slope_and_step() -> None:
    ts = [i / 60 for i in range(20)]
    steps = [int(i >= 12) for i in range(20)]
    ys = [
        5 + 3 * t + 2 * s + (0.01 if i % 2 else -0.01)
        for i, (t, s) in enumerate(zip(ts, steps, strict=True))
    ]
    slope, error, step = fit(ts, ys, steps)
    assert slope == pytest.approx(3, abs=0.2)
    assert step == pytest.approx(2, abs=0.05)
    assert 0 < error < 0.2
    flat, _, none = fit(ts, [7.0] * 20, [0] * 20)
    assert flat == pytest.approx(0, abs=1e-9)
    assert none == 0


def _samples(config: SoakConfig, rate: float, kept: float) -> list[dict[str, Any]]:
    """CI's timeline with a plateau of live rows (the retention window's worth), dead tuples that
    pile up behind the idle transaction, and ``kept`` of every job staying in the hot table."""
    idle = config.idle
    assert idle is not None
    out = []
    for k in range(1, 21):
        t = k * config.sample_seconds
        wobble = 1 + (0.02 if k % 2 else -0.02)
        live = rate * config.window * wobble + kept * rate * t
        during = idle[0] < t <= config.recovered
        out.append(
            {
                "t": t,
                "steady": config.is_steady(t),
                "hot_live": int(live),
                "hot_dead": 15_000 if during else int(4_000 * wobble),
                "hot_total_mb": live * 500 / analysis.MIB,
                "enqueue_p99_ms": 10.0,
                "claim_p99_ms": 4.0,
                "pickup_p99_ms": 20.0 * wobble,
                "ran_per_s": rate,
            }
        )
    return out


def _verdicts(kept: float) -> dict[str, bool | None]:
    config, rate = SoakConfig.ci(), 300.0
    samples = _samples(config, rate, kept)
    executions = {"deferred": 36_000, "lost": 0, "twice": 0, "unknown": 0}
    ticks = {"fired": 24, "duplicates": 0, "expected": 22}
    fitted = analysis.slopes(config, samples)
    found = analysis.checks(config, samples, executions, ticks, rate, fitted)
    return {c["check"]: c["ok"] for c in found}


def test_checks_pass_a_flat_run_and_fail_a_hot_table_that_keeps_jobs() -> None:
    leaks = {"hot table live rows: no leak", "hot table size: no leak"}
    flat = _verdicts(kept=0.0)
    assert leaks <= {name for name, ok in flat.items() if ok is True}, flat
    assert not [name for name, ok in flat.items() if ok is False], flat
    # A fifth of the jobs never pruned: 60 rows/s where the limit is 30 (10% of 300 jobs/s).
    leaking = _verdicts(kept=0.2)
    assert {name for name, ok in leaking.items() if ok is False} >= leaks, leaking
    # Within the limit (5% kept) the leak checks pass.
    slow = _verdicts(kept=0.05)
    assert all(slow[name] for name in leaks), slow


def test_sampler_groups_partitions_under_their_root(database_url: str) -> None:
    schema, other = "soak_sampler_test", "soak_sampler_parts"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}; CREATE SCHEMA {other}")
        try:
            conn.execute(
                f"CREATE TABLE {schema}.history (id bigint, at date) PARTITION BY RANGE (at);"
                f"CREATE TABLE {schema}.history_a PARTITION OF {schema}.history"
                "  FOR VALUES FROM ('2026-01-01') TO ('2026-02-01');"
                f"CREATE TABLE {other}.history_b PARTITION OF {schema}.history"
                "  FOR VALUES FROM ('2026-02-01') TO ('2026-03-01');"
                f"CREATE INDEX ON {schema}.history (id);"
                f"CREATE TABLE {schema}.plain (id bigint PRIMARY KEY);"
                f"INSERT INTO {schema}.history SELECT i, '2026-01-15' FROM generate_series(1, 500) i;"
                f"INSERT INTO {schema}.history SELECT i, '2026-02-15' FROM generate_series(1, 300) i;"
                f"ANALYZE {schema}.history_a, {other}.history_b"
            )
            # The writers' statistics reach pg_stat_user_tables within a second or so.
            deadline = time.monotonic() + 10
            reading = tables.sample(conn, schema)
            while reading["tables"]["history"]["live"] < 800 and time.monotonic() < deadline:
                time.sleep(0.1)
                reading = tables.sample(conn, schema)
        finally:
            conn.execute(f"DROP SCHEMA {schema} CASCADE; DROP SCHEMA {other} CASCADE")
    assert set(reading["tables"]) == {"history", "plain"}
    history = reading["tables"]["history"]
    assert history["partitions"] == 2
    assert history["total_bytes"] > 0
    assert history["index_bytes"] > 0
    assert history["live"] == 800
    assert reading["tables"]["plain"]["partitions"] == 0


def test_dead_tuples_recover_allows_a_naptimes_churn_and_fails_dead_tuples_that_stay() -> None:
    config, rate = SoakConfig.ci(), 300.0
    executions = {"deferred": 36_000, "lost": 0, "twice": 0, "unknown": 0}
    ticks = {"fired": 24, "duplicates": 0, "expected": 22}
    idle = config.idle
    assert idle is not None

    def verdict(before: int, after: int) -> bool | None:
        samples = _samples(config, rate, 0.0)
        for s in samples:
            if not (idle[0] < s["t"] <= config.recovered):
                s["hot_dead"] = before if s["t"] <= idle[0] else after
        fitted = analysis.slopes(config, samples)
        found = analysis.checks(config, samples, executions, ticks, rate, fitted)
        return {c["check"]: c["ok"] for c in found}["dead tuples recover after it"]

    churn = analysis.DEAD_PER_JOB * rate * config.autovacuum_naptime
    # Sampled 2 s after each autovacuum before, 5 s after: more dead tuples, all within churn.
    assert verdict(before=1_200, after=int(churn) - 1) is True
    # Left behind by the idle transaction (15,000 during it) and never cleared.
    assert verdict(before=1_200, after=15_000) is False
