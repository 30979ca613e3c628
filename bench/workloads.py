"""The workloads: enqueue, drain, pickup latency, big table. Each returns plain measurements.

A measurement is ``(workload, system, config, value, unit)``; ``bench.run`` repeats them and
keeps the median. Every loop is bounded: by a job count and by a time cap.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from . import harness


@dataclass
class Settings:
    jobs: int = 20_000
    bulk_chunk: int = 1_000
    repeats: int = 3
    enqueue_cap: float = 10.0  # seconds for one single-enqueue run
    drain_cap: float = 15.0  # seconds for one drain run
    latency_rate: float = 100.0
    latency_seconds: float = 5.0
    big_finished: int = 1_000_000
    big_future: int = 100_000
    claim_samples: int = 300
    fair_jobs: int = 100_000  # tenant a's backlog in the fairness run


@dataclass
class Measurement:
    workload: str
    system: str
    config: str
    value: float
    unit: str
    extra: dict[str, Any] | None = None


# -- 1. enqueue ------------------------------------------------------------------------------------


def enqueue_single(subject: ModuleType, url: str, s: Settings) -> Measurement:
    subject.reset(url)
    # Bounded in time: a slow system enqueues fewer than s.jobs (the rate is what counts).
    probe = max(50, s.jobs // 40)
    seconds = subject.enqueue_single(url, probe)
    rate = probe / seconds
    n = max(probe, min(s.jobs, int(rate * s.enqueue_cap)))
    subject.reset(url)
    seconds = subject.enqueue_single(url, n)
    return Measurement(
        "enqueue", subject.NAME, "single, 1 per txn", n / seconds, "jobs/s", {"n": n}
    )


def enqueue_bulk(subject: ModuleType, url: str, s: Settings, copy: bool = False) -> Measurement:
    subject.reset(url)
    fn = subject.enqueue_copy if copy else subject.enqueue_bulk
    seconds = fn(url, s.jobs, s.bulk_chunk)
    config = f"{'COPY' if copy else 'bulk'}, {s.bulk_chunk}/call"
    return Measurement("enqueue", subject.NAME, config, s.jobs / seconds, "jobs/s", {"n": s.jobs})


# -- 2. drain --------------------------------------------------------------------------------------


def drain(
    subject: ModuleType,
    url: str,
    s: Settings,
    config: Any,
    procs: int,
    label: str,
    *,
    batch: int,
    reset: bool = True,
) -> Measurement:
    """``procs`` worker processes drain ``s.jobs`` pre-loaded no-op jobs (or run for the cap)."""
    if reset:
        subject.reset(url)
    subject.preload(url, s.jobs)
    result = harness.run_children(subject.drain_child, [(url, config)] * procs, s.drain_cap)
    done = subject.count_done(url)
    if result.finished and done != s.jobs:
        raise RuntimeError(f"{subject.NAME} {label}: {done} of {s.jobs} jobs done")
    return Measurement(
        "drain",
        subject.NAME,
        f"{label}, {procs} proc" + ("s" if procs > 1 else ""),
        done / result.elapsed,
        "jobs/s",
        {
            "done": done,
            "elapsed": result.elapsed,
            "capped": not result.finished,
            "procs": procs,
            "batch": batch,
        },
    )


# -- 3. pickup latency -----------------------------------------------------------------------------


def latency(subject: ModuleType, url: str, s: Settings) -> list[Measurement]:
    """Jobs enqueued at ``latency_rate``/s against an idle, listening worker: enqueue-to-start."""
    subject.reset(url)
    n = int(s.latency_rate * s.latency_seconds)
    timeout = s.latency_seconds + 15.0
    with harness.Children(subject.latency_child, [(url, n, timeout)]) as worker:
        worker.wait_ready()
        worker.go()
        time.sleep(0.5)  # idle, waiting
        subject.latency_produce(url, n, s.latency_rate)
        result = worker.collect(timeout + 5.0)
    values = result.reports[0] if result.reports else []
    if len(values) < n:
        raise RuntimeError(f"{subject.NAME}: {len(values)} of {n} latency jobs ran")
    config = f"{s.latency_rate:.0f} jobs/s, {len(values)} jobs"
    return [
        Measurement(
            "latency",
            subject.NAME,
            f"p{p} pickup, {config}",
            harness.percentile(values, p) * 1000,
            "ms",
        )
        for p in (50, 95, 99)
    ]
