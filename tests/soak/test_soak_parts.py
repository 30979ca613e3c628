"""The soak's parts that need no load: the slope fit, and the table sampler finding partitions
(in any schema) under their root table, as the partitioned job history will have them."""

from __future__ import annotations

import time

import psycopg
import pytest

from bench.soak import tables
from bench.soak.analysis import fit


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
