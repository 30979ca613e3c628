"""The soak's settings and its timeline: when the retention window is reached, when the idle
transaction opens and closes, how often to sample. Everything scales with the run's length."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SoakConfig:
    minutes: float = 20.0
    # Of the measured capacity. The capacity drain has the 2 cores to itself; the soak shares
    # them with the producers, the probe and autovacuum, and moves every job to the history
    # (bench/README.md, "The soak"). 0.5 was a backlog; so was 0.3 once the generic plain claim
    # tripled the drain (14,141 jobs/s measured, 4,242 offered: the hot table bloated to 380 MiB
    # between autovacuum rounds, pickup p99 up to 129 s). 0.1 is ~1,400 jobs/s here.
    rate_fraction: float = 0.1
    max_rate: float | None = None  # jobs/s: a ceiling on the producers' rate
    workers: int = 2  # worker processes
    concurrency: int = 10  # each worker's (cronbase's default)
    producers: int = 1  # producer processes
    batch: int = 20  # jobs per defer_many call; 1: defer()
    capacity_jobs: int = 40_000  # pre-loaded for the capacity drain
    schedule_every: int = 5  # seconds between schedule slots (a six-field cron)
    probe_rate: float = 5.0  # claim probes per second
    is_idle_transaction: bool = True
    # Fractions of the run: the retention window; the idle transaction's start and end; the
    # end of its recovery (samples between its start and this are not "steady").
    window_fraction: float = 0.15
    idle_from: float = 0.35
    idle_until: float = 0.50
    recovered_at: float = 0.70
    window_seconds: float | None = None  # overrides window_fraction
    label: str = "soak"
    settings: dict[str, str] = field(default_factory=dict)  # extra server settings

    @classmethod
    def ci(cls) -> SoakConfig:
        """The 2-minute version CI runs: the same invariants at small scale (<= 300 jobs/s)."""
        return cls(
            minutes=2.0,
            rate_fraction=0.1,
            max_rate=300.0,
            capacity_jobs=5_000,
            batch=5,
            label="soak-ci",
        )

    @property
    def seconds(self) -> float:
        return self.minutes * 60

    @property
    def sample_seconds(self) -> float:
        """A minute, or a twentieth of a shorter run (6 s for CI's 2 minutes)."""
        return min(60.0, self.seconds / 20)

    @property
    def window(self) -> float:
        """Retention keeps finished jobs this many seconds."""
        return self.window_seconds or self.window_fraction * self.seconds

    @property
    def retention_interval(self) -> float:
        """How often a worker prunes: a tenth of the window, 1-10 s (default 5 minutes)."""
        return max(1.0, min(10.0, self.window / 10))

    @property
    def autovacuum_naptime(self) -> int:
        """PostgreSQL's default (60 s) from a 20-minute run up; a twentieth of a shorter run,
        so that autovacuum comes round as often relative to the run (6 s for CI)."""
        return max(1, min(60, round(self.seconds / 20)))

    @property
    def idle(self) -> tuple[float, float] | None:
        if not self.is_idle_transaction:
            return None
        return self.idle_from * self.seconds, self.idle_until * self.seconds

    @property
    def recovered(self) -> float:
        return self.recovered_at * self.seconds

    def is_steady(self, t: float) -> bool:
        """A sample ending at ``t`` (covering ``t - sample_seconds`` to ``t``) is steady when the
        retention window was reached at least one sample earlier and it does not overlap the
        idle transaction or its recovery."""
        s = self.sample_seconds
        if t < self.window + s - 1e-6:
            return False
        idle = self.idle
        return idle is None or t <= idle[0] + 1e-6 or t - s >= self.recovered - 1e-6

    def server_settings(self) -> dict[str, str]:
        return {"autovacuum_naptime": f"{self.autovacuum_naptime}s", **self.settings}
