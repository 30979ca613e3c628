"""Prometheus metrics: what a worker did (counters, durations) and what the database holds.

Two sources. A worker counts its own events (claimed, finished by status, handler durations,
lease renewals) in :class:`WorkerMetrics`. :class:`DatabaseCollector` reads queue depth, the
oldest waiting job's age and worker heartbeat ages from the database at scrape time, so every
scrape agrees with the tables whichever process serves it. ``cronbase worker --metrics-port N``
serves both; the dashboard's ``/metrics`` serves the database side.

Under a supervisor (``cronbase worker --processes N --metrics-port P``) each worker process
writes its counters to files in ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's multiprocess
mode) and serves nothing; the supervisor serves their sums and the database side, once
(:func:`supervisor_registry`).
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from ..errors import ConfigurationError
from ..job import JobStatus
from . import stats
from .demand import QueueDemand, demand, demand_async
from .storage import Storage, storage, storage_async

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from ..db.database import Database, Row
    from ..worker.claim import ClaimedJob
    from ..worker.outcomes import Outcome

logger = logging.getLogger("cronbase")

# Handler durations from a millisecond to an hour.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)


@dataclass(frozen=True)
class DatabaseState:
    """What the database-side metrics show, read in one scrape; ``overview`` None when the
    database did not answer."""

    overview: stats.Overview | None
    workers: list[Row]
    storage: Storage | None = None
    # Per queue, the workers of the default concurrency its work in hand needs.
    demand: list[QueueDemand] = field(default_factory=list)
    # Per schedule key, seconds since its next slot came without being fired.
    schedules: list[Row] = field(default_factory=list)


def database_state(db: Database) -> DatabaseState:
    try:
        workers = db.fetch_all(db.queries.list_workers)
        late = db.fetch_all(db.queries.schedule_lateness)
        return DatabaseState(stats.overview(db), workers, storage(db), demand(db), late)
    except Exception as exc:  # a scrape must answer even when the database does not
        logger.warning("metrics: database unavailable: %s", exc)
        return DatabaseState(None, [])


async def database_state_async(db: Database) -> DatabaseState:
    try:
        overview = await stats.overview_async(db)
        workers = await db.fetch_all_async(db.queries.list_workers)
        late = await db.fetch_all_async(db.queries.schedule_lateness)
        stored, wanted = await storage_async(db), await demand_async(db)
        return DatabaseState(overview, workers, stored, wanted, late)
    except Exception as exc:
        logger.warning("metrics: database unavailable: %s", exc)
        return DatabaseState(None, [])


def database_families(state: DatabaseState) -> Iterator[Metric]:
    """Queue depth by queue and status, oldest waiting age, pauses, heartbeat ages, handlers
    past their timeout, schedules' lateness."""
    up = GaugeMetricFamily("cronbase_database_up", "1 when the database answered this scrape")
    if state.overview is None:
        up.add_metric([], 0)
        yield up
        return
    depth = GaugeMetricFamily(
        "cronbase_queue_jobs", "Jobs in the table by queue and status", labels=["queue", "status"]
    )
    oldest = GaugeMetricFamily(
        "cronbase_queue_oldest_waiting_seconds",
        "How long the oldest due job of the queue has waited (0 when none waits)",
        labels=["queue"],
    )
    paused = GaugeMetricFamily(
        "cronbase_queue_paused", "1 when the queue is paused", labels=["queue"]
    )
    scheduled = GaugeMetricFamily(
        "cronbase_queue_scheduled_jobs",
        "Queued jobs whose run_at is still ahead (counted in cronbase_queue_jobs queued too)",
        labels=["queue"],
    )
    heartbeat = GaugeMetricFamily(
        "cronbase_worker_heartbeat_age_seconds",
        "Seconds since each registered worker last renewed its leases",
        labels=["worker"],
    )
    overrunning = GaugeMetricFamily(
        "cronbase_worker_overrunning_jobs",
        "Handlers each worker runs past their timeout (cancelled, not returned), as of its last "
        "heartbeat",
        labels=["worker"],
    )
    for q in state.overview.queues:
        for status in JobStatus:
            depth.add_metric([q.queue, status.value], q.counts[status])
        oldest.add_metric([q.queue], q.oldest_wait or 0.0)
        paused.add_metric([q.queue], 1 if q.is_paused else 0)
        scheduled.add_metric([q.queue], q.scheduled)
    needed = GaugeMetricFamily(
        "cronbase_queue_workers_needed",
        "Workers of the default concurrency (10) the queue's running and due jobs need: "
        "ceil((running + due) / 10), a paused queue's due jobs left out, at most its max_running",
        labels=["queue"],
    )
    for d in state.demand:
        needed.add_metric([d.queue], d.workers_needed)
    for w in state.workers:
        heartbeat.add_metric([w["id"]], w["heartbeat_age"])
        overrunning.add_metric([w["id"]], w["overrunning"])
    late = GaugeMetricFamily(
        "cronbase_schedule_late_seconds",
        "Seconds since the schedule's next slot came without being fired (0 while it is ahead, "
        "and when the schedule is paused): growing means no scheduler runs",
        labels=["schedule"],
    )
    for s in state.schedules:
        late.add_metric([s["key"]], s["late_seconds"])
    up.add_metric([], 1)
    yield from (depth, oldest, paused, scheduled, needed, heartbeat, overrunning, late, up)
    if state.storage is not None:
        yield from storage_families(state.storage)


def storage_families(stored: Storage) -> Iterator[Metric]:
    """Per cronbase table: bytes (heap, indexes), rows (live, dead), seconds since its last
    vacuum; and the age of the oldest transaction holding vacuum back."""
    size = GaugeMetricFamily(
        "cronbase_table_bytes", "Bytes on disk per cronbase table", labels=["table", "part"]
    )
    rows = GaugeMetricFamily(
        "cronbase_table_rows",
        "Rows per cronbase table, live and dead (the statistics' estimates)",
        labels=["table", "state"],
    )
    vacuumed = GaugeMetricFamily(
        "cronbase_table_last_vacuum_timestamp_seconds",
        "When the table (any of its partitions) was last vacuumed, by hand or by autovacuum",
        labels=["table"],
    )
    for t in stored.tables:
        size.add_metric([t.name, "heap"], t.heap_bytes)
        size.add_metric([t.name, "indexes"], t.index_bytes)
        rows.add_metric([t.name, "live"], t.live_rows)
        rows.add_metric([t.name, "dead"], t.dead_rows)
        last = max((v for v in (t.last_vacuum, t.last_autovacuum) if v), default=None)
        if last is not None:
            vacuumed.add_metric([t.name], last.timestamp())
    held = GaugeMetricFamily(
        "cronbase_oldest_xmin_age_seconds",
        "How long the oldest transaction holding back vacuum in the database has been open "
        "(0: none)",
    )
    oldest = stored.oldest
    held.add_metric([], oldest.age if oldest is not None and oldest.age is not None else 0.0)
    yield from (size, rows, vacuumed, held)


class DatabaseCollector(Collector):
    """The database side, read at each scrape (a worker's metrics endpoint, in its thread)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[Metric]:
        return database_families(database_state(self.db))


class _Families(Collector):
    def __init__(self, state: DatabaseState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        return database_families(self.state)


async def database_metrics_async(db: Database) -> bytes:
    """The database-side metrics as Prometheus text (the dashboard's /metrics), read with the
    async pool: no thread, no sync pool in the dashboard's process."""
    registry = CollectorRegistry()
    registry.register(_Families(await database_state_async(db)))
    return generate_latest(registry)


class _DurationSeries:
    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; the last is +Inf
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le).
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.total += seconds


class DurationHistogram(Collector):
    """Handler run times by task and queue, exposed as a Prometheus histogram.

    The worker observes once per job on its event loop: a bisect and two additions, where
    prometheus_client's ``Histogram.observe`` takes locks and walks the buckets (~8% of a drain's
    worker CPU, bench/README.md). A scrape from the metrics thread copies each series' counts
    first, so its buckets and count agree.
    """

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = tuple(float(b) for b in buckets)
        self._series: dict[tuple[str, str], _DurationSeries] = {}

    def labels(self, task: str, queue: str) -> _DurationSeries:
        series = self._series.get((task, queue))
        if series is None:
            series = self._series[(task, queue)] = _DurationSeries(self.bounds)
        return series

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=["task", "queue"])
        for (task, queue), series in list(self._series.items()):
            counts, total = list(series.counts), series.total
            cumulative, buckets = 0, []
            for bound, n in zip((*self.bounds, float("inf")), counts, strict=True):
                cumulative += n
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            family.add_metric([task, queue], buckets, total)
        yield family


def is_multiprocess() -> bool:
    """Whether this process writes its metrics to ``PROMETHEUS_MULTIPROC_DIR`` (the variable
    prometheus_client reads when it is imported; a supervisor sets it for its processes)."""
    return "PROMETHEUS_MULTIPROC_DIR" in os.environ or "prometheus_multiproc_dir" in os.environ


class _SharedDurations:
    """Handler run times in multiprocess mode: prometheus_client's Histogram, whose values live
    in this process's file, so the supervisor sums them (a DurationHistogram lives in memory,
    which the supervisor cannot read). It costs more per job (a lock and an mmap write per
    value; bench/README.md), paid only under a supervisor serving metrics."""

    def __init__(self, histogram: Histogram) -> None:
        self.histogram = histogram
        self._series: dict[tuple[str, str], Histogram] = {}

    def labels(self, task: str, queue: str) -> Histogram:
        series = self._series.get((task, queue))
        if series is None:
            series = self._series[(task, queue)] = self.histogram.labels(task, queue)
        return series


# Label values of a counter's child: (task, queue), (task, queue, status).
K = TypeVar("K", bound=tuple[str, ...])


class WorkerMetrics:
    """One worker's own counters; ``registry`` also gets the database collector.

    In multiprocess mode (:func:`is_multiprocess`) the counters write to this process's files,
    which the supervisor's registry reads; this registry is then not served."""

    def __init__(self, db: Database) -> None:
        self.registry = CollectorRegistry()
        self.claimed = self._counter("cronbase_jobs_claimed", "Jobs claimed by this worker")
        self.finished = self._counter(
            "cronbase_jobs_finished",
            "Attempts this worker finished, by the job's resulting status "
            "(succeeded, failed = will retry, dead)",
            ("task", "queue", "status"),
        )
        self.duration: DurationHistogram | _SharedDurations
        if is_multiprocess():
            self.duration = _SharedDurations(
                Histogram(
                    "cronbase_job_duration_seconds",
                    "Handler run time",
                    ["task", "queue"],
                    buckets=DURATION_BUCKETS,
                    registry=self.registry,
                )
            )
        else:
            self.duration = DurationHistogram(
                "cronbase_job_duration_seconds", "Handler run time", DURATION_BUCKETS
            )
            self.registry.register(self.duration)
        self.timeouts = self._counter(
            "cronbase_jobs_timed_out", "Attempts cancelled at their task's timeout"
        )
        self.overruns = self._counter(
            "cronbase_jobs_overran",
            "Timed-out attempts whose handler was still running a second after it was cancelled "
            "(sync handlers that ignore is_cancelled(); the Workers page names them)",
        )
        self.lease_renewals = self._counter(
            "cronbase_lease_renewals", "Leases this worker renewed", labels=()
        )
        self.registry.register(DatabaseCollector(db))
        # Children of the labelled counters, by label values: looked up once per batch.
        self._claimed: dict[tuple[str, str], Counter] = {}
        self._finished: dict[tuple[str, str, str], Counter] = {}

    def _counter(
        self, name: str, documentation: str, labels: tuple[str, ...] = ("task", "queue")
    ) -> Counter:
        return Counter(name, documentation, labels, registry=self.registry)

    def count_claimed(self, jobs: Iterable[ClaimedJob]) -> None:
        """A batch of claimed jobs: counted once per task and queue."""
        counts: dict[tuple[str, str], int] = {}
        for job in jobs:
            key = (job.task, job.queue)
            counts[key] = counts.get(key, 0) + 1
        _add(self.claimed, self._claimed, counts)

    def count_finished(self, written: Iterable[tuple[Outcome, str]]) -> None:
        """A batch of written outcomes: counted once per task, queue and status; durations."""
        counts: dict[tuple[str, str, str], int] = {}
        for outcome, status in written:
            job = outcome.job
            key = (job.task, job.queue, status)
            counts[key] = counts.get(key, 0) + 1
            self.duration.labels(job.task, job.queue).observe(outcome.duration)
        _add(self.finished, self._finished, counts)


def _add(counter: Counter, children: dict[K, Counter], counts: dict[K, int]) -> None:
    """Add a batch's counts to ``counter``'s children by label values (each looked up once)."""
    for key, n in counts.items():
        child = children.get(key)
        if child is None:
            child = children[key] = counter.labels(*key)
        child.inc(n)


def supervisor_registry(db: Database, directory: str, *collectors: Collector) -> CollectorRegistry:
    """What a supervisor serves: the sums of its worker processes' counters and histograms (the
    files in ``directory``, their PROMETHEUS_MULTIPROC_DIR), the database side once (not once
    per process), and ``collectors`` (the supervisor's own)."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    registry.register(DatabaseCollector(db))
    for collector in collectors:
        registry.register(collector)
    return registry


def serve(port: int | None, host: str, registry: CollectorRegistry) -> WSGIServer | None:
    """Serve ``registry`` on http://host:port/metrics (None: no port, nothing served).
    A port that is taken, or an address this host does not have, is a ConfigurationError
    naming it: a worker starts this first, so it fails before it connects or registers."""
    if port is None:
        return None
    try:
        server = start_http_server(port, host, registry=registry)[0]
    except OSError as exc:
        raise ConfigurationError(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; pick another "
            "metrics port (--metrics-port / metrics_port), or stop what listens there"
        ) from None
    logger.info("metrics on http://%s:%d/metrics", host, port)
    return server


def stop(server: WSGIServer | None) -> None:
    """Stop what :func:`serve` started (nothing for None)."""
    if server is not None:
        server.shutdown()
        server.server_close()
