"""The soak's orchestration (the order is in ``bench/soak/__init__.py``): capacity, the
processes, the sampling timeline with the idle transaction, the final drain, the verdicts."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

import cronbase

from .. import harness
from ..cluster import Cluster, running_cluster
from ..machine import machine
from . import analysis, children, tables
from .collector import Collector
from .config import SoakConfig

SCHEMA = "cronbase"
HOT_TABLE = "jobs"
READY_TIMEOUT = 60.0
STOP_TIMEOUT = 40.0
CAPACITY_DRAINS = 3
BIN_SETTLE = 1.5  # seconds after a boundary before its bin is closed (children flush at 0.5 s)
CTX = harness.CTX
Log = Callable[[str], None]


def _print(line: str) -> None:
    print(line, flush=True)


def measure_capacity(cluster: Cluster, config: SoakConfig) -> list[float]:
    """Jobs/s of CAPACITY_DRAINS burst drains of pre-loaded jobs by the soak's worker set-up
    (in a database of their own); the soak takes the best, so that a moment of other load on a
    shared machine does not set the rate for the whole run."""
    url = cluster.create_database("soak_capacity")
    cronbase.App(database_url=url).migrate()
    rates = []
    for _ in range(CAPACITY_DRAINS):
        children.preload(url, config.capacity_jobs, config.schedule_every)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE cronbase.jobs")
        args = [(url, config.concurrency)] * config.workers
        result = harness.run_children(children.capacity_child, args, cap=120.0)
        if not result.finished:
            raise RuntimeError("a capacity drain did not finish in 120 s")
        rates.append(config.capacity_jobs / result.elapsed)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("TRUNCATE cronbase.jobs, cronbase.workers CASCADE")
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute("DROP DATABASE soak_capacity WITH (FORCE)")
    return rates


def _wait_ready(collector: Collector, count: int, procs: list[Any]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while len(collector.ready) < count:
        if any(not p.is_alive() for p in procs):
            raise RuntimeError("a soak process died while starting; see its output above")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(collector.ready)} of {count} soak processes got ready")
        time.sleep(0.05)


def _stop(procs: list[Any]) -> None:
    """SIGTERM (a cronbase worker's graceful stop), then SIGKILL for what outlives it."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT
    for p in procs:
        p.join(timeout=max(0.1, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


class IdleTransaction:
    """A session that begins a REPEATABLE READ transaction, reads, and sits idle until closed.

    REPEATABLE READ keeps the transaction's snapshot, and so its xmin, until it ends: vacuum
    cannot remove a row version that snapshot might see. (A READ COMMITTED session that only
    read would drop its snapshot after each statement and hold nothing back.)"""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url)
        self.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        self.conn.execute("SELECT count(*) FROM cronbase.schedules").fetchone()

    def close(self) -> None:
        self.conn.commit()
        self.conn.close()


def _sample_row(
    config: SoakConfig,
    t: float,
    start: float,
    reading: dict[str, Any],
    figures: dict[str, float],
) -> dict[str, Any]:
    mib = analysis.MIB
    all_tables = reading["tables"]
    hot = all_tables.get(HOT_TABLE) or dict.fromkeys(
        ("table_bytes", "index_bytes", "total_bytes", "live", "dead"), 0
    )
    auto = hot.get("last_autovacuum")
    idle = config.idle
    s = config.sample_seconds
    if config.is_steady(t):
        note = "*"
    elif t < config.window + s - 1e-6:
        note = "window reached" if t >= config.window - 1e-6 else "filling"
    elif idle is not None and t - s < idle[1] and t > idle[0]:
        note = "idle in transaction"
    else:
        note = "recovering"
    return {
        "t": t,
        **figures,
        "hot_total_mb": hot["total_bytes"] / mib,
        "hot_table_mb": hot["table_bytes"] / mib,
        "hot_index_mb": hot["index_bytes"] / mib,
        "hot_live": int(hot["live"]),
        "hot_dead": int(hot["dead"]),
        "hot_last_autovacuum": (
            dt.datetime.fromisoformat(auto).timestamp() - start if auto else None
        ),
        "all_total_mb": sum(r["total_bytes"] for r in all_tables.values()) / mib,
        "xmin_age": int(reading.get("xmin_age") or 0),
        "xmin_holder": reading.get("xmin_holder"),
        "idle_in_transaction": int(reading.get("idle_in_transaction") or 0),
        "load": os.getloadavg()[0],
        "steady": config.is_steady(t),
        "note": note,
        "tables": all_tables,
    }


def soak(cluster: Cluster, config: SoakConfig, rate: float, log: Log) -> dict[str, Any]:
    """Run the timeline; returns samples, executions and schedule slots."""
    url = cluster.create_database("soak")
    cronbase.App(database_url=url).migrate()
    out = CTX.Queue()
    stop, go = CTX.Event(), CTX.Event()
    workers = [
        CTX.Process(
            target=children.run_entry,
            args=(
                children.worker_main,
                out,
                f"worker {i}",
                url,
                config.concurrency,
                config.window,
                config.retention_interval,
                config.schedule_every,
            ),
        )
        for i in range(config.workers)
    ]
    share = rate / config.producers
    others = [
        CTX.Process(
            target=children.run_entry,
            args=(children.producer_main, out, i, url, share, config.batch, stop, go),
        )
        for i in range(config.producers)
    ]
    others.append(
        CTX.Process(
            target=children.run_entry,
            args=(children.probe_main, out, url, config.probe_rate, config.concurrency, stop, go),
        )
    )
    s = config.sample_seconds
    samples: list[dict[str, Any]] = []
    collector = Collector(out, time.time(), s)
    idle_tx: IdleTransaction | None = None
    with collector, psycopg.connect(url, autocommit=True) as conn:
        try:
            for p in workers:
                p.start()
            _wait_ready(collector, len(workers), workers)
            for p in others:
                p.start()
            _wait_ready(collector, len(workers) + len(others), workers + others)
            start = collector.start = time.time()
            go.set()
            idle = config.idle
            events: list[tuple[float, str]] = [
                (k * s, "sample") for k in range(1, math.floor(config.seconds / s + 1e-6) + 1)
            ]
            if idle is not None:
                events += [(idle[0], "open"), (idle[1], "close")]
            for at, what in sorted(events):
                wait = start + at - time.time()
                if wait > 0:
                    time.sleep(wait)
                if what == "open":
                    idle_tx = IdleTransaction(url)
                    log(f"  {at:6.0f}s idle-in-transaction session opened")
                elif what == "close" and idle_tx is not None:
                    idle_tx.close()
                    idle_tx = None
                    log(f"  {at:6.0f}s idle-in-transaction session committed")
                elif what == "sample":
                    reading = tables.sample(conn, SCHEMA)
                    time.sleep(max(0.0, start + at + BIN_SETTLE - time.time()))
                    figures = collector.close_bin(round(at / s) - 1)
                    row = _sample_row(config, at, start, reading, figures)
                    samples.append(row)
                    log(
                        f"  {at:6.0f}s hot {row['hot_total_mb']:8.1f} MiB, dead"
                        f" {row['hot_dead']:>9,}, p99 enqueue {row['enqueue_p99_ms']:6.1f} claim"
                        f" {row['claim_p99_ms']:6.1f} pickup {row['pickup_p99_ms']:7.1f} ms,"
                        f" {row['ran_per_s']:7,.0f} jobs/s {row['note']}"
                    )
            end = time.time()
        finally:
            stop.set()
            if idle_tx is not None:
                idle_tx.close()
            for p in others:
                p.join(timeout=STOP_TIMEOUT)
            _stop([p for p in others if p.is_alive()])
            drain_started = time.monotonic()
            deferred = sum(collector.deferred.values())
            # The backlog runs out (bounded): then the workers stop.
            while collector.done() < deferred and time.monotonic() - drain_started < 120:
                time.sleep(0.2)
            drained = time.monotonic() - drain_started
            _stop(workers)
    slots = sorted(collector.ticks)
    in_run = [x for x in slots if start <= x <= end]
    ticks = {
        "fired": len(in_run),
        "duplicates": len(slots) - len(set(slots)),
        "expected": max(0, math.floor((end - start) / config.schedule_every) - 2),
    }
    return {
        "samples": samples,
        "executions": collector.executions(),
        "ticks": ticks,
        "drain_seconds": drained,
    }


def run(config: SoakConfig, out_dir: Path | None, log: Log = _print) -> dict[str, Any]:
    """The whole soak; writes ``soak-<stamp>.json``/``.md`` (and ``.png``) to ``out_dir``."""
    when = dt.datetime.now(dt.UTC)
    load_before = os.getloadavg()
    started = time.monotonic()
    with running_cluster(config.server_settings()) as cluster:
        log(f"PostgreSQL {cluster.version} in {cluster.folder}")
        drains = measure_capacity(cluster, config)
        capacity = max(drains)
        rate = capacity * config.rate_fraction
        if config.max_rate:
            rate = min(rate, config.max_rate)
        log(
            f"capacity {capacity:,.0f} jobs/s, best of"
            f" {', '.join(f'{d:,.0f}' for d in drains)} ({config.workers} workers x concurrency"
            f" {config.concurrency}); offering {rate:,.0f} jobs/s for {config.minutes:g} min,"
            f" a sample every {config.sample_seconds:g} s, retention window {config.window:g} s"
        )
        measured = soak(cluster, config, rate, log)
    samples = measured["samples"]
    fitted = analysis.slopes(config, samples)
    verdicts = analysis.checks(
        config, samples, measured["executions"], measured["ticks"], rate, fitted
    )
    result: dict[str, Any] = {
        "date": when.isoformat(timespec="seconds"),
        "elapsed_seconds": round(time.monotonic() - started, 1),
        "machine": machine(),
        "load_before": " ".join(f"{x:.2f}" for x in load_before),
        "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "postgres": cluster.version,
        "config": {k: getattr(config, k) for k in config.__dataclass_fields__},
        "autovacuum_naptime": config.autovacuum_naptime,
        "sample_seconds": config.sample_seconds,
        "window": config.window,
        "retention_interval": config.retention_interval,
        "idle": config.idle,
        "recovered": config.recovered,
        "hot_table": HOT_TABLE,
        "capacity": capacity,
        "capacity_drains": drains,
        "rate": rate,
        **measured,
        "slopes": fitted,
        "checks": verdicts,
        "passed": all(c["ok"] is not False for c in verdicts),
    }
    result["markdown"] = analysis.markdown(result)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        stem = out_dir / f"{config.label}-{when.strftime('%Y%m%dT%H%M%SZ')}"
        stem.with_suffix(".md").write_text(result["markdown"])
        stem.with_suffix(".json").write_text(json.dumps(result, indent=2, default=str))
        if analysis.plot(result, stem.with_suffix(".png")):
            result["plot"] = str(stem.with_suffix(".png"))
        result["files"] = str(stem) + ".{json,md" + (",png}" if "plot" in result else "}")
    return result
