"""The pressure benchmark's settings, and the timeline of each scenario: a clean phase, the
disturbance, the recovery, sampled every SAMPLE_SECONDS."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

SAMPLE_SECONDS = 10.0
SCENARIO_KEYS = ("idle", "readers", "overload")
TITLES = {
    "idle": "an idle-in-transaction session holding an xid",
    "readers": "four REPEATABLE READ readers scanning the queue's tables",
    "overload": "1.5x the clean capacity offered",
}


@dataclass(frozen=True)
class Scenario:
    """One scenario's timeline, in seconds from the moment the producers start."""

    key: str
    clean: float
    disturbance: float
    recovery: float

    @property
    def title(self) -> str:
        return TITLES[self.key]

    @property
    def started(self) -> float:
        """When the disturbance starts."""
        return self.clean

    @property
    def ended(self) -> float:
        """When the disturbance ends."""
        return self.clean + self.disturbance

    @property
    def seconds(self) -> float:
        return self.clean + self.disturbance + self.recovery

    def phase(self, t: float) -> str:
        """The phase of the sample interval that ends at ``t`` (phases are whole intervals)."""
        if t <= self.started + 1e-6:
            return "clean"
        if t <= self.ended + 1e-6:
            return "during"
        return "after"


@dataclass(frozen=True)
class PressureConfig:
    subjects: tuple[str, ...]
    scenarios: tuple[str, ...] = SCENARIO_KEYS
    is_quick: bool = False
    rate_fraction: float = 0.4
    overload_factor: float = 1.5  # of the clean capacity, during the overload
    workers: int = 2  # worker processes per subject
    producers: int = 2  # producer processes
    # Jobs per producer call (one statement each): at least `batch`, more when a producer's
    # share would need more than `max_calls` calls a second. One insert per call cannot reach
    # the rates (40% of a drain is thousands of jobs/s), and calls of 5 fell short too on 2
    # shared cores: Python producers topped out at ~2,000 jobs/s in all (~200 calls/s each,
    # the workers and PostgreSQL beside them), so a 1.5x overload of the raw-SQL table was
    # never offered. Calls of 5 up to 500 jobs/s per producer, then ~100 calls/s.
    batch: int = 5
    max_calls: float = 100.0
    probe_rate: float = 5.0  # claim probes per second
    readers: int = 4
    reader_period: float = 4.0  # seconds between one reader's scans (staggered)
    capacity_drains: int = 3

    @property
    def capacity_jobs(self) -> int:
        """Jobs pre-loaded for each capacity drain."""
        return 20_000 if self.is_quick else 60_000

    @property
    def capacity_cap(self) -> float:
        """A capacity drain's time cap, seconds (a slow subject is measured on what it ran)."""
        return 60.0 if self.is_quick else 120.0

    @property
    def final_drain_cap(self) -> float:
        """After the producers stop: how long the workers get to finish what was deferred
        (scheduled jobs come due up to 30 s after their defer)."""
        return 45.0 if self.is_quick else 90.0

    def scenario(self, key: str) -> Scenario:
        """The phases. The overload's recovery is longer: its backlog (0.5x capacity x the
        overload) drains at the spare 0.6x capacity first (150 s after a 3-minute overload),
        and the check that every figure is back to its clean value is made 60 s after that."""
        if self.is_quick:
            if key == "overload":
                return Scenario(key, clean=30.0, disturbance=40.0, recovery=120.0)
            return Scenario(key, clean=30.0, disturbance=90.0, recovery=60.0)
        if key == "overload":
            return Scenario(key, clean=120.0, disturbance=180.0, recovery=240.0)
        return Scenario(key, clean=120.0, disturbance=600.0, recovery=180.0)

    def offered(self, scenario: Scenario, capacity: float) -> list[tuple[float, float]]:
        """The offered rate over the timeline, jobs/s in total: ``[(from_second, rate)]``."""
        base = self.rate_fraction * capacity
        if scenario.key != "overload":
            return [(0.0, base)]
        return [
            (0.0, base),
            (scenario.started, self.overload_factor * capacity),
            (scenario.ended, base),
        ]


def producer_schedule(
    offered: list[tuple[float, float]], producers: int, batch: int, max_calls: float
) -> list[tuple[float, float, int]]:
    """Each producer's share of an offered schedule: ``[(from_second, jobs/s, jobs per
    call)]``."""
    out = []
    for start, rate in offered:
        share = rate / producers
        out.append((start, share, max(batch, math.ceil(share / max_calls))))
    return out


def rate_at(schedule: list[tuple[float, float]], t: float) -> float:
    """The rate in force at ``t`` seconds of a ``[(from_second, rate)]`` schedule."""
    return float(segment_at(schedule, t)[1])


def segment_at(schedule: list[Any], t: float) -> Any:
    """The entry of a schedule sorted by its first field (seconds) in force at ``t``."""
    chosen = schedule[0]
    for entry in schedule:
        if t + 1e-9 >= entry[0]:
            chosen = entry
    return chosen
