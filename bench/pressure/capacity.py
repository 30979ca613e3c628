"""A subject's clean capacity: burst drains of pre-loaded no-op jobs by the very worker set-up
its scenarios run, the best of a few."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..cluster import Cluster
from . import subjects
from .collector import Collector
from .config import SAMPLE_SECONDS, PressureConfig
from .databases import database
from .mix import PRELOAD_PRODUCER
from .processes import CTX, Fleet


def measure_capacity(
    cluster: Cluster,
    subject: subjects.Subject,
    config: PressureConfig,
    log: Callable[[str], None],
) -> list[float]:
    """Jobs/s of each of ``capacity_drains`` burst drains by the scenario's own worker set-up,
    each in a fresh database: the workers start and wait, the jobs are deferred in one
    statement, and the rate is counted between the first and the last handler start (so
    neither start-up nor stop is in it). The run takes the best drain: a moment of other load
    on a shared machine should not set the rate for the whole run."""
    rates = []
    n = config.capacity_jobs
    for i in range(config.capacity_drains):
        with database(cluster, f"{subject.key}_capacity") as url:
            subject.setup(url)
            with Collector(CTX.Queue(), SAMPLE_SECONDS) as collector, Fleet(collector) as fleet:
                workers = fleet.start(subject.workers(url, config.workers))
                subject.preload(url, n)
                deadline = time.monotonic() + config.capacity_cap
                while collector.done_of([PRELOAD_PRODUCER]) < n and time.monotonic() < deadline:
                    if collector.errors:
                        raise RuntimeError(f"a worker failed: {collector.errors[0][1]}")
                    time.sleep(0.1)
                fleet.stop(workers)
            done = collector.done_of([PRELOAD_PRODUCER])
            span = collector.last_start - collector.first_start
            rate = (done - 1) / span if done > 1 and span > 0 else 0.0
            rates.append(rate)
            note = (
                "" if done >= n else f" (capped at {config.capacity_cap:.0f} s: {done:,} of {n:,})"
            )
            log(f"  capacity drain {i + 1}: {rate:,.0f} jobs/s{note}")
    return rates
