"""OpenTelemetry metrics beside the Prometheus ones: the messaging counters and durations a
defer and each attempt record, and the database gauges, read by the SDK's own reader from an
App on the test database (what an OTLP exporter would be handed)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import cronbase
from cronbase.contrib.opentelemetry import instrument, uninstrument
from cronbase.contrib.opentelemetry_metrics import DATABASE_GAUGES
from cronbase.operations.metrics import database_families, database_state

NO_RETRY_SOON = cronbase.Backoff(base=timedelta(hours=1), jitter=0)


class Measured:
    """A MeterProvider of its own (no global state) read on demand."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found


@pytest.fixture
def measured(app: cronbase.App) -> Iterator[Measured]:
    meters = Measured()
    instrument(app, meter_provider=meters.provider)
    yield meters
    uninstrument(app)
    meters.provider.shutdown()


def run_burst(app: cronbase.App) -> None:
    worker = app.worker(burst=True, install_signal_handlers=False, schedule=False, retention=None)
    asyncio.run(worker.run())


def by_attributes(points: list[Any]) -> dict[tuple[tuple[str, Any], ...], Any]:
    return {tuple(sorted(p.attributes.items())): p for p in points}


def test_defers_and_attempts_are_counted_and_timed_by_queue_task_and_error(
    app: cronbase.App, measured: Measured
) -> None:
    @app.task(queue="emails")
    def send() -> None:
        pass

    @app.task(queue="emails", max_attempts=2, retry=NO_RETRY_SOON)
    def bounce() -> None:
        raise ValueError("mailbox full")

    send.defer()
    send.defer()
    bounce.defer()
    run_burst(app)

    common = {"messaging.system": "cronbase", "messaging.destination.name": "emails"}
    sent = by_attributes(measured.points("messaging.client.sent.messages"))
    assert {k: p.value for k, p in sent.items()} == {
        tuple(sorted({**common, "messaging.operation.name": "send", "cronbase.task": t}.items())): n
        for t, n in ((send.name, 2), (bounce.name, 1))
    }
    consumed = measured.points("messaging.client.consumed.messages")
    assert sum(p.value for p in consumed) == 3  # bounce's second attempt waits an hour
    durations = by_attributes(measured.points("messaging.process.duration"))
    ok = {**common, "messaging.operation.name": "process", "cronbase.task": send.name}
    failed = {**ok, "cronbase.task": bounce.name, "error.type": "ValueError"}
    assert set(durations) == {tuple(sorted(ok.items())), tuple(sorted(failed.items()))}
    assert durations[tuple(sorted(ok.items()))].count == 2
    assert durations[tuple(sorted(failed.items()))].count == 1
    # No per-job attribute: a job id or a worker id would make a time series per job.
    for point in durations.values():
        assert "messaging.message.id" not in point.attributes
        assert "messaging.client.id" not in point.attributes


def test_database_gauges_read_the_tables_and_stop_with_uninstrument(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(queue="reports")
    def build() -> None:
        pass

    for _ in range(3):
        build.defer()
    db.execute(
        "INSERT INTO cronbase.schedules (key, task, cron, next_fire_at) "
        "VALUES ('nightly', %s, '0 3 * * *', now() - interval '10 minutes')",
        [build.name],
    )
    meters = Measured()
    instrument(app, meter_provider=meters.provider, database_metrics=True)
    try:
        jobs = by_attributes(meters.points("cronbase.queue.jobs"))
        assert jobs[(("queue", "reports"), ("status", "queued"))].value == 3
        assert jobs[(("queue", "reports"), ("status", "running"))].value == 0
        (up,) = meters.points("cronbase.database.up")
        assert up.value == 1
        (late,) = meters.points("cronbase.schedule.late")
        assert late.attributes == {"schedule": "nightly"}
        assert late.value >= 600
        uninstrument(app)
        assert meters.points("cronbase.queue.jobs") == []
    finally:
        uninstrument(app)
        meters.provider.shutdown()


def test_every_database_metric_has_its_gauge(app: cronbase.App) -> None:
    # One owner of what the database side measures (operations/metrics.py): a family added
    # there without a gauge here would be missing for OTLP users.
    served = {f.name for f in database_families(database_state(app.db))}
    assert served == set(DATABASE_GAUGES), served ^ set(DATABASE_GAUGES)
