"""OpenTelemetry metrics beside the Prometheus ones, for teams that ship metrics over OTLP:
the messaging conventions' counters and durations, recorded by the defer and job middleware of
:func:`cronbase.contrib.opentelemetry.instrument`, and (asked for) the database side, the same
figures a worker's ``/metrics`` serves, as observable gauges.

The gauges read the database when the meter provider's reader collects (a periodic reader: every
export interval), in that reader's thread, with the App's sync pool. Ask for them in one process
(a worker, or a small exporter process), not in every web process: each collection is a few
queries (:func:`cronbase.operations.metrics.database_state`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from ..operations.metrics import database_families, database_state

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from ..db.database import Database

# The Prometheus family each database gauge comes from (one owner of what is measured:
# operations/metrics.py), with its OpenTelemetry name (no unit suffix, dots between parts, as
# the OpenTelemetry naming rules ask), unit (UCUM) and description.
DATABASE_GAUGES: dict[str, tuple[str, str]] = {
    "cronbase_database_up": ("cronbase.database.up", "1"),
    "cronbase_queue_jobs": ("cronbase.queue.jobs", "{job}"),
    "cronbase_queue_oldest_waiting_seconds": ("cronbase.queue.oldest_waiting", "s"),
    "cronbase_queue_paused": ("cronbase.queue.paused", "1"),
    "cronbase_queue_scheduled_jobs": ("cronbase.queue.scheduled_jobs", "{job}"),
    "cronbase_queue_workers_needed": ("cronbase.queue.workers_needed", "{worker}"),
    "cronbase_worker_heartbeat_age_seconds": ("cronbase.worker.heartbeat_age", "s"),
    "cronbase_worker_overrunning_jobs": ("cronbase.worker.overrunning_jobs", "{job}"),
    "cronbase_schedule_late_seconds": ("cronbase.schedule.late", "s"),
    "cronbase_table_bytes": ("cronbase.table.size", "By"),
    "cronbase_table_rows": ("cronbase.table.rows", "{row}"),
    "cronbase_table_last_vacuum_timestamp_seconds": ("cronbase.table.last_vacuum", "s"),
    "cronbase_oldest_xmin_age_seconds": ("cronbase.database.oldest_xmin_age", "s"),
}

# Within one collection every gauge's callback runs in turn: they share one read of the
# database rather than making one each.
SHARED_READ_SECONDS = 1.0


class JobMetrics:
    """The messaging conventions' instruments (semantic conventions 1.44.0, "Development"):
    ``messaging.client.sent.messages`` per defer, ``messaging.client.consumed.messages`` and
    ``messaging.process.duration`` per attempt, each with the queue as destination, the task,
    and ``error.type`` when it failed."""

    def __init__(self, meter: metrics.Meter) -> None:
        self.sent = meter.create_counter(
            "messaging.client.sent.messages",
            unit="{message}",
            description="Jobs deferred (messages sent to a queue)",
        )
        self.consumed = meter.create_counter(
            "messaging.client.consumed.messages",
            unit="{message}",
            description="Attempts a worker started (messages it consumed)",
        )
        self.duration = meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="How long an attempt's handler ran",
        )

    def processed(self, seconds: float, attributes: dict[str, str | int]) -> None:
        """One attempt's run time (OpenTelemetry's Histogram.record)."""
        self.duration.record(seconds, attributes)


class DatabaseGauges:
    """Observable gauges over :func:`database_families`, read at most once per collection."""

    def __init__(self, meter: metrics.Meter, db: Database) -> None:
        self.db = db
        self.active = True
        self._lock = threading.Lock()
        self._families: dict[str, Metric] = {}
        self._read_at = float("-inf")
        for family, (name, unit) in DATABASE_GAUGES.items():
            meter.create_observable_gauge(
                name,
                callbacks=[self._callback(family)],
                unit=unit,
                description=f"{family} of cronbase's Prometheus metrics",
            )

    def _callback(self, family: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            if not self.active:
                return []
            found = self._read().get(family)
            if found is None:  # the database did not answer: only cronbase.database.up is 0
                return []
            return [Observation(s.value, dict(s.labels)) for s in found.samples]

        return observe

    def stop(self) -> None:
        """Observe nothing from now on (uninstrument, or instrument again)."""
        self.active = False

    def _read(self) -> dict[str, Metric]:
        with self._lock:
            if time.monotonic() - self._read_at > SHARED_READ_SECONDS:
                state = database_state(self.db)
                self._families = {f.name: f for f in database_families(state)}
                self._read_at = time.monotonic()
            return self._families
