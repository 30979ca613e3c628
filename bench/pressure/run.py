"""The pressure benchmark's orchestration (the order is in ``bench/pressure/__init__.py``):
one cluster; per subject its capacity, then each scenario in a fresh database, sampled every
SAMPLE_SECONDS; the figures, verdicts, report and plots at the end."""

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

from ..cluster import Cluster
from ..machine import machine
from . import analysis, plot, report, subjects, tables
from .capacity import measure_capacity
from .collector import Collector
from .config import SAMPLE_SECONDS, PressureConfig, Scenario, producer_schedule, rate_at
from .databases import cluster_for_run, database
from .disturbances import Disturbance
from .probe import probe_main
from .processes import CTX, GO, Fleet, PySpec

BIN_SETTLE = 1.5  # seconds after a boundary before its interval is read (children flush at 0.5 s)
Log = Callable[[str], None]


def _print(line: str) -> None:
    print(line, flush=True)


def _progress(row: dict[str, Any]) -> str:
    def ms(v: float) -> str:
        return "   -" if v != v else f"{v:7.1f}"

    return (
        f"  {row['t']:5.0f}s {row['phase']:6} offered {row['offered_per_s']:7,.0f}/s enq"
        f" {row['enqueued_per_s']:7,.0f} done {row['completions_per_s']:7,.0f} depth"
        f" {row['depth']:>7,} pickup p50/p99 {ms(row['pickup_p50_ms'])}/{ms(row['pickup_p99_ms'])}"
        f" claim p99 {ms(row['claim_p99_ms'])} ms, hot dead {row['hot_dead']:>9,}"
        f" {row['hot_total_mb']:7.1f} MiB"
    )


def _row(
    at: float,
    scenario: Scenario,
    offered: list[tuple[float, float]],
    figures: dict[str, float],
    depths: list[int],
    reading: dict[str, Any],
    hot_tables: tuple[str, ...] | None,
) -> dict[str, Any]:
    s = int(SAMPLE_SECONDS)
    end = round(at)
    window = depths[max(0, end - s) : end]
    hot = tables.hot(reading["tables"], hot_tables)
    mib = 1024 * 1024
    return {
        "t": at,
        "phase": scenario.phase(at),
        "offered_per_s": rate_at(offered, at - SAMPLE_SECONDS / 2),
        **figures,
        "depth": depths[end - 1] if 0 < end <= len(depths) else 0,
        "max_depth": max(window) if window else 0,
        "hot_dead": hot["dead"],
        "hot_live": hot["live"],
        "hot_total_mb": hot["total_bytes"] / mib,
        "hot_heap_mb": hot["heap_bytes"] / mib,
        "hot_index_mb": hot["index_bytes"] / mib,
        "xmin_age": int(reading.get("xmin_age") or 0),
        "xmin_holder": reading.get("xmin_holder"),
        "tables": reading["tables"],
    }


def run_scenario(
    cluster: Cluster,
    subject: subjects.Subject,
    config: PressureConfig,
    scenario: Scenario,
    capacity: float,
    log: Log,
) -> dict[str, Any]:
    """One scenario for one subject, in a fresh database; returns its rows and figures."""
    offered = config.offered(scenario, capacity)
    readings: dict[float, dict[str, Any]] = {}
    disturbance_info: dict[str, Any] = {}
    with database(cluster, f"{subject.key}_{scenario.key}") as url:
        subject.setup(url)
        with (
            Collector(CTX.Queue(), SAMPLE_SECONDS) as collector,
            Fleet(collector) as fleet,
            psycopg.connect(url, autocommit=True, application_name="pressure sampler") as conn,
        ):
            workers = fleet.start(subject.workers(url, config.workers))
            probe = fleet.start(
                [PySpec("probe", probe_main, (subject.key, url, config.probe_rate, GO))]
            )
            schedules = [
                producer_schedule(offered, config.producers, config.batch, config.max_calls)
            ] * config.producers
            producers = fleet.start(subject.producers(url, schedules))
            samples = [
                k * SAMPLE_SECONDS for k in range(1, int(scenario.seconds / SAMPLE_SECONDS) + 1)
            ]
            # At a shared instant the sample comes first: it closes the interval before it.
            events = sorted(
                [(t, 0, "sample") for t in samples]
                + [(scenario.started, 1, "start"), (scenario.ended, 1, "end")]
            )
            disturbance: Disturbance | None = None
            start = collector.start = time.time()
            fleet.go()
            try:
                for at, _, what in events:
                    time.sleep(max(0.0, start + at - time.time()))
                    if collector.errors:
                        name, text = collector.errors[0]
                        raise RuntimeError(f"{name} failed:\n{text}")
                    if fleet.dead():
                        raise RuntimeError(f"{', '.join(fleet.dead())} exited during the run")
                    if what == "start":
                        reading = readings[max(readings)] if readings else {"tables": {}}
                        disturbance = Disturbance(
                            scenario, url, subject.schemas[0], subject.hot_tables, reading, config
                        )
                        log(f"  {at:5.0f}s disturbance starts: {scenario.title}")
                    elif what == "end" and disturbance is not None:
                        disturbance_info = disturbance.close()
                        disturbance = None
                        errors = disturbance_info.get("errors")
                        log(f"  {at:5.0f}s disturbance ends" + (f": {errors[0]}" if errors else ""))
                    elif what == "sample":
                        readings[at] = tables.sample(conn, subject.schemas)
                        time.sleep(max(0.0, start + at + BIN_SETTLE - time.time()))
                        index = round(at / SAMPLE_SECONDS) - 1
                        row = _row(
                            at,
                            scenario,
                            offered,
                            collector.figures(index),
                            collector.depths(round(at)),
                            readings[at],
                            subject.hot_tables,
                        )
                        log(_progress(row))
            finally:
                if disturbance is not None:
                    disturbance_info = disturbance.close()
            fleet.stop(producers)
            ended = time.time() - start
            # The workers finish what was deferred (scheduled jobs come due up to 30 s late).
            deferred = sum(collector.deferred.values())
            ids = list(collector.deferred)
            deadline = time.monotonic() + config.final_drain_cap
            while collector.done_of(ids) < deferred and time.monotonic() < deadline:
                time.sleep(0.2)
            drain_seconds = time.time() - start - ended
            is_drained = collector.done_of(ids) >= deferred
            fleet.stop(probe + workers)
        # Final figures, from every report (late ones included) and the whole ledger.
        depths = collector.depths(math.ceil(time.time() - start))
        rows = [
            _row(
                at,
                scenario,
                offered,
                collector.figures(round(at / SAMPLE_SECONDS) - 1),
                depths,
                readings[at],
                subject.hot_tables,
            )
            for at in sorted(readings)
        ]
        return {
            "scenario": scenario.key,
            "offered": offered,
            "producer_schedule": schedules[0],  # each producer's (from, jobs/s, jobs per call)
            "rows": rows,
            "depths": depths,
            # Raw pickups and claim timings of any intervals, for the figures (not in the JSON).
            "pooled": collector.pooled,
            "executions": collector.executions(),
            "final_drain_seconds": round(drain_seconds, 1),
            "is_drained": is_drained,
            "unavailable": dict(collector.unavailable),
            "warnings": list(collector.warnings),
            "disturbance": disturbance_info,
        }


def run(config: PressureConfig, out_dir: Path, log: Log = _print) -> dict[str, Any]:
    """The whole benchmark; writes report.md, results.json and a PNG per scenario."""
    when = dt.datetime.now(dt.UTC)
    started = time.monotonic()
    load_before = os.getloadavg()
    measured: dict[str, Any] = {}
    with cluster_for_run(log) as cluster:
        log(f"PostgreSQL {cluster.version} in {cluster.folder}")
        for key in config.subjects:
            subject = subjects.get(key)
            entry: dict[str, Any] = {
                "name": subject.name,
                "setup": subject.setup_note,
                "hot_tables": subject.hot_tables,
                "schemas": subject.schemas,
            }
            measured[key] = entry
            reason = subject.unavailable()
            if reason is not None:
                entry["unavailable"] = reason
                log(f"{subject.name}: not measured: {reason}")
                continue
            log(
                f"{subject.name}: capacity ({config.capacity_drains} drains of"
                f" {config.capacity_jobs:,} jobs, {config.workers} worker processes)"
            )
            try:
                drains = measure_capacity(cluster, subject, config, log)
            except Exception as error:
                entry["unavailable"] = f"capacity drain failed: {type(error).__name__}: {error}"
                log(f"{subject.name}: {entry['unavailable']}")
                continue
            capacity = max(drains)
            entry.update(capacity=capacity, capacity_drains=drains, scenarios={})
            if capacity <= 0:
                entry["unavailable"] = "its capacity drains ran nothing"
                continue
            for scenario_key in config.scenarios:
                scenario = config.scenario(scenario_key)
                rate = config.rate_fraction * capacity
                log(
                    f"{subject.name} / {scenario_key}: {rate:,.0f} jobs/s offered"
                    f" ({config.rate_fraction:.0%} of {capacity:,.0f})"
                    + (
                        f", {config.overload_factor * capacity:,.0f} during the overload"
                        if scenario_key == "overload"
                        else ""
                    )
                    + f"; clean {scenario.clean:.0f} s, disturbance {scenario.disturbance:.0f} s,"
                    f" recovery {scenario.recovery:.0f} s"
                )
                try:
                    result = run_scenario(cluster, subject, config, scenario, capacity, log)
                except Exception as error:
                    entry["scenarios"][scenario_key] = {
                        "failed": f"{type(error).__name__}: {error}"
                    }
                    log(f"{subject.name} / {scenario_key} failed: {error}")
                    continue
                result["summary"] = analysis.summarize(result, scenario)
                result["targets"] = analysis.targets(result, scenario, capacity, config)
                entry["scenarios"][scenario_key] = result
        version = cluster.version
    results: dict[str, Any] = {
        "date": when.isoformat(timespec="seconds"),
        "elapsed_seconds": round(time.monotonic() - started, 1),
        "machine": machine(),
        "load_before": " ".join(f"{x:.2f}" for x in load_before),
        "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "postgres": version,
        "config": {k: getattr(config, k) for k in config.__dataclass_fields__},
        "capacity_jobs": config.capacity_jobs,
        "scenarios": {k: vars(config.scenario(k)) for k in config.scenarios},
        "subjects": measured,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown = report.markdown(results)
    (out_dir / "report.md").write_text(markdown)
    pictures = [plot.scenario_png(results, key, out_dir / f"{key}.png") for key in config.scenarios]
    for entry in measured.values():  # the raw values are for the figures, not the JSON
        for result in entry.get("scenarios", {}).values():
            result.pop("pooled", None)
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
    results["markdown"] = markdown
    results["files"] = [
        str(out_dir / "report.md"),
        str(out_dir / "results.json"),
        *(str(p) for p in pictures if p is not None),
    ]
    return results
