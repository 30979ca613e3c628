"""A worker's options, checked once: queues (or a concurrency per queue), concurrency, burst,
intervals, and what a long-running worker does besides running jobs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from ..checks import INT4_MAX, check_name
from ..durations import DurationLike, duration
from ..errors import ConfigurationError
from ..operations.retention import Retention

DEFAULT_RETENTION = Retention()
# Retention not given: a long-running worker prunes by DEFAULT_RETENTION, a burst one not at all.
_UNSET = Retention(interval=timedelta(days=1))


@dataclass(frozen=True)
class WorkerOptions:
    # The queues it claims from (None: all), and with per-queue concurrency each one's slots.
    queues: list[str] | None
    queue_caps: dict[str, int] | None
    concurrency: int
    burst: bool
    poll_interval: float
    reap_interval: float
    shutdown_grace: float
    # How long an error that waiting cannot cure (schema gone, permission denied) may last
    # before the worker hands back its jobs and exits.
    fatal_after: float
    # A long-running worker also fires due schedule slots and prunes old finished jobs (one
    # worker at a time); a burst worker fires none, and prunes once as it ends when given a
    # retention (`cronbase tick` ticks, then drains and prunes).
    schedule: bool
    retention: Retention | None
    metrics_port: int | None
    metrics_host: str
    install_signal_handlers: bool

    @classmethod
    def build(
        cls,
        *,
        queues: Sequence[str] | Mapping[str, int] | None = None,
        concurrency: int = 10,
        burst: bool = False,
        poll_interval: DurationLike = timedelta(seconds=1),
        reap_interval: DurationLike = timedelta(seconds=5),
        shutdown_grace: DurationLike = timedelta(seconds=25),
        install_signal_handlers: bool = True,
        schedule: bool = True,
        retention: Retention | None = _UNSET,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        fatal_after: DurationLike = timedelta(seconds=30),
    ) -> WorkerOptions:
        if queues is not None and not queues:
            raise ConfigurationError("queues must name at least one queue (or be None for all)")
        for queue in queues or []:
            check_name("queue", queue)
        # Per-queue concurrency: each queue's jobs at once, counted by the worker (its own
        # limit; a fleet-wide one is app.queues.set_limit).
        caps: dict[str, int] | None = None
        if isinstance(queues, Mapping):
            for queue, cap in queues.items():
                if not isinstance(cap, int) or isinstance(cap, bool) or not 1 <= cap <= INT4_MAX:
                    raise ConfigurationError(
                        f"queue {queue!r}: concurrency must be a whole number from 1 to "
                        f"{INT4_MAX:,}, got {cap!r}"
                    )
            caps = dict(sorted(queues.items()))
            concurrency = sum(caps.values())
        if not 1 <= concurrency <= INT4_MAX:  # the workers table's integer column
            raise ConfigurationError(
                f"concurrency must be from 1 to {INT4_MAX:,}, got {concurrency}"
            )
        if metrics_port is not None and (
            not isinstance(metrics_port, int)
            or isinstance(metrics_port, bool)
            or not 1 <= metrics_port <= 65535
        ):
            raise ConfigurationError(
                f"metrics_port must be a port from 1 to 65535 (or None), got {metrics_port!r}"
            )
        return cls(
            queues=sorted(set(queues)) if queues else None,
            queue_caps=caps,
            concurrency=concurrency,
            burst=burst,
            # Durations: timedeltas or seconds (durations.py), kept as seconds for asyncio.
            poll_interval=duration("poll_interval", poll_interval, positive=True).total_seconds(),
            reap_interval=duration("reap_interval", reap_interval, positive=True).total_seconds(),
            shutdown_grace=duration("shutdown_grace", shutdown_grace).total_seconds(),
            fatal_after=duration("fatal_after", fatal_after).total_seconds(),
            schedule=schedule and not burst,
            retention=(None if burst else DEFAULT_RETENTION) if retention is _UNSET else retention,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            install_signal_handlers=install_signal_handlers,
        )

    def describe(self) -> str:
        """The queues as the start line shows them: ``*``, ``emails,reports``, ``emails=5``."""
        if self.queue_caps:
            return ",".join(f"{q}={n}" for q, n in self.queue_caps.items())
        return ",".join(self.queues or ["*"])
