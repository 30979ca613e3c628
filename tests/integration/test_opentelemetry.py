"""cronbase.contrib.opentelemetry with the SDK's in-memory exporter and a real worker on the test
database: producer spans on defer, consumer spans per attempt linked to them, and what happens
when the stored trace context is missing, garbage, or rolled back with the caller's transaction."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import cronbase
from cronbase.contrib.opentelemetry import instrument, is_instrumented, uninstrument
from cronbase.schedule.scheduler import Scheduler
from tests.e2e.harness import after_inherited, run_example

from ..conftest import SCHEMA

REPO = Path(__file__).resolve().parents[2]
SOON = cronbase.Backoff(base=timedelta(milliseconds=1), jitter=0)
NO_RETRY_SOON = cronbase.Backoff(base=timedelta(hours=1), jitter=0)


class Traced:
    """A TracerProvider of its own (no global state) whose finished spans are kept in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self, kind: SpanKind | None = None) -> list[ReadableSpan]:
        found = self.exporter.get_finished_spans()
        return [s for s in found if kind is None or s.kind is kind]

    def one(self, kind: SpanKind) -> ReadableSpan:
        spans = self.spans(kind)
        assert len(spans) == 1, spans
        return spans[0]


@pytest.fixture
def traced(app: cronbase.App) -> Iterator[Traced]:
    tracing = Traced()
    instrument(app, tracer_provider=tracing.provider)
    yield tracing
    tracing.provider.shutdown()


def run_burst(app: cronbase.App) -> None:
    worker = app.worker(burst=True, install_signal_handlers=False, schedule=False, retention=None)
    asyncio.run(worker.run())


def stored(db: psycopg.Connection[Any], job_id: int) -> Any:
    row = db.execute("SELECT metadata FROM cronbase.jobs_all WHERE id = %s", [job_id]).fetchone()
    assert row is not None, f"no job {job_id}"
    return row[0]


def ids(span: ReadableSpan) -> tuple[int, int]:
    assert span.context is not None
    return span.context.trace_id, span.context.span_id


def linked_to(span: ReadableSpan) -> list[tuple[int, int]]:
    return [(link.context.trace_id, link.context.span_id) for link in span.links]


def test_a_defer_sends_and_each_attempt_processes_linked_to_it(
    app: cronbase.App, traced: Traced, db: psycopg.Connection[Any]
) -> None:
    @app.task(queue="emails")
    def send_invoice(invoice_id: int) -> None: ...

    job_id = send_invoice.defer(invoice_id=7)
    producer = traced.one(SpanKind.PRODUCER)
    assert producer.name == "send emails"
    assert dict(producer.attributes or {}) == {
        "messaging.system": "cronbase",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "emails",
        "messaging.message.id": str(job_id),
        "cronbase.task": "send_invoice",
    }
    assert producer.status.status_code is StatusCode.UNSET
    trace_id, span_id = ids(producer)
    # The W3C traceparent in jobs.metadata is the producer span's context.
    metadata = stored(db, job_id)
    version, stored_trace, stored_span, flags = metadata["otel"]["traceparent"].split("-")
    assert (version, stored_trace, stored_span) == ("00", f"{trace_id:032x}", f"{span_id:016x}")
    assert int(flags, 16) & 1  # sampled

    run_burst(app)
    consumer = traced.one(SpanKind.CONSUMER)
    assert consumer.name == "process emails"
    assert linked_to(consumer) == [(trace_id, span_id)]
    assert consumer.parent is None  # a link, not a parent: a trace of its own
    assert ids(consumer)[0] != trace_id
    attributes = dict(consumer.attributes or {})
    assert attributes.pop("messaging.client.id")  # the worker's id
    assert attributes == {
        "messaging.system": "cronbase",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "emails",
        "messaging.message.id": str(job_id),
        "cronbase.task": "send_invoice",
        "cronbase.attempt": 1,
    }
    assert consumer.status.status_code is StatusCode.UNSET
    assert app.jobs.get(job_id).status is cronbase.JobStatus.SUCCEEDED


def test_a_span_around_the_worker_is_not_the_parent_of_its_jobs(
    app: cronbase.App, traced: Traced
) -> None:
    @app.task
    async def handler() -> None: ...

    @app.task
    def sync_handler() -> None: ...

    handler.defer()
    sync_handler.defer()
    with traced.provider.get_tracer("test").start_as_current_span("deploy"):
        run_burst(app)
    consumers = traced.spans(SpanKind.CONSUMER)
    assert len(consumers) == 2
    assert [s.parent for s in consumers] == [None, None]


def test_defer_many_is_one_send_span_that_every_job_links_to(
    app: cronbase.App, traced: Traced, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def refresh(n: int) -> None: ...

    job_ids = refresh.defer_many([{"n": 1}, {"n": 2}, {"n": 3}])
    producer = traced.one(SpanKind.PRODUCER)
    attributes = dict(producer.attributes or {})
    assert attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in attributes  # one per message: not on a batch span
    assert len({str(stored(db, job_id)) for job_id in job_ids}) == 1

    run_burst(app)
    consumers = traced.spans(SpanKind.CONSUMER)
    assert sorted(str((s.attributes or {})["messaging.message.id"]) for s in consumers) == sorted(
        map(str, job_ids)
    )
    assert all(linked_to(s) == [ids(producer)] for s in consumers)


def test_async_defer_is_a_child_of_the_callers_span_and_carries_its_baggage(
    app: cronbase.App, traced: Traced
) -> None:
    tracer = traced.provider.get_tracer("test")
    seen: list[object] = []

    @app.task
    async def handler() -> None:
        seen.append(baggage.get_baggage("tenant"))

    async def checkout() -> int:
        token = otel_context.attach(baggage.set_baggage("tenant", "acme"))
        try:
            with tracer.start_as_current_span("checkout"):
                return await handler.defer_async()
        finally:
            otel_context.detach(token)

    asyncio.run(checkout())
    producer = traced.one(SpanKind.PRODUCER)
    (caller,) = [s for s in traced.spans() if s.name == "checkout"]
    assert producer.parent is not None
    assert (producer.parent.trace_id, producer.parent.span_id) == ids(caller)
    run_burst(app)
    assert seen == ["acme"]  # baggage travels with the job, though the trace does not
    assert linked_to(traced.one(SpanKind.CONSUMER)) == [ids(producer)]


def test_a_retried_job_has_one_consumer_span_per_attempt_and_failures_are_errors(
    app: cronbase.App, traced: Traced
) -> None:
    calls: list[int] = []

    @app.task(max_attempts=2, retry=SOON)
    def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionResetError("smtp went away")

    job_id = flaky.defer()
    run_burst(app)
    run_burst(app)
    assert app.jobs.get(job_id).status is cronbase.JobStatus.SUCCEEDED
    producer = traced.one(SpanKind.PRODUCER)
    first, second = sorted(traced.spans(SpanKind.CONSUMER), key=lambda s: s.start_time or 0)
    assert [(s.attributes or {})["cronbase.attempt"] for s in (first, second)] == [1, 2]
    assert linked_to(first) == linked_to(second) == [ids(producer)]
    assert first.status.status_code is StatusCode.ERROR
    assert first.status.description == "ConnectionResetError: smtp went away"
    assert (first.attributes or {})["error.type"] == "ConnectionResetError"
    (event,) = first.events
    assert event.name == "exception"
    assert (event.attributes or {})["exception.message"] == "smtp went away"
    assert second.status.status_code is StatusCode.UNSET
    assert "error.type" not in (second.attributes or {})


def test_an_encrypted_tasks_failure_span_carries_its_error_class_alone(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    from cronbase.payload.sealing import new_key

    app = cronbase.App(database_url=database_url, schema=SCHEMA, encryption_keys=f"k={new_key()}")
    tracing = Traced()
    instrument(app, tracer_provider=tracing.provider)
    try:

        @app.task(encrypt=True, max_attempts=1)
        def charge(card: str) -> None:
            raise ValueError(f"card {card} declined")

        charge.defer(card="4111-1111")
        run_burst(app)
        span = tracing.one(SpanKind.CONSUMER)
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "ValueError (message encrypted)"
        assert (span.attributes or {})["error.type"] == "ValueError"
        assert span.events == ()  # no exception event: its message and traceback hold the card
        assert "4111" not in str(span.to_json())
    finally:
        tracing.provider.shutdown()
        uninstrument(app)
        app.close()


def test_an_async_handler_past_its_timeout_ends_its_span_with_an_error(
    app: cronbase.App, traced: Traced
) -> None:
    @app.task(timeout=timedelta(milliseconds=50), retry=NO_RETRY_SOON)
    async def stuck() -> None:
        await asyncio.Event().wait()  # never set: only the timeout ends it

    job_id = stuck.defer()
    run_burst(app)
    assert app.jobs.get(job_id).status is cronbase.JobStatus.FAILED
    consumer = traced.one(SpanKind.CONSUMER)
    assert consumer.status.status_code is StatusCode.ERROR
    assert (consumer.attributes or {})["error.type"] == "asyncio.exceptions.CancelledError"


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_the_handlers_own_spans_are_children_of_the_consumer_span(
    app: cronbase.App, traced: Traced, is_async: bool
) -> None:
    tracer = traced.provider.get_tracer("test")
    if is_async:

        @app.task(name="render")
        async def render_async() -> None:
            with tracer.start_as_current_span("render pdf"):
                pass

        render_async.defer()
    else:

        @app.task(name="render")
        def render() -> None:
            with tracer.start_as_current_span("render pdf"):
                pass

        render.defer()
    run_burst(app)
    consumer = traced.one(SpanKind.CONSUMER)
    (inner,) = [s for s in traced.spans() if s.name == "render pdf"]
    assert inner.parent is not None
    assert (inner.parent.trace_id, inner.parent.span_id) == ids(consumer)
    # Nothing of the job's span is left current in the worker once the attempt is over.
    assert not trace.get_current_span().get_span_context().is_valid


@pytest.mark.parametrize(
    "metadata",
    [
        None,  # deferred with no instrumentation
        '{"otel": {"traceparent": "00-garbage-01"}}',
        '{"otel": {"traceparent": 12, "baggage": ["x"]}}',
        '{"otel": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}',
        "[1, 2]",
        '"otel"',
    ],
)
def test_jobs_without_a_readable_trace_context_run_with_a_span_without_link(
    app: cronbase.App, db: psycopg.Connection[Any], metadata: str | None
) -> None:
    ran: list[int] = []

    @app.task
    def handler(n: int) -> None:
        ran.append(n)

    job_id = handler.defer(n=1)  # before instrument(): no producer span, metadata NULL
    assert stored(db, job_id) is None
    if metadata is not None:
        db.execute(
            "UPDATE cronbase.jobs SET metadata = %s::jsonb WHERE id = %s", [metadata, job_id]
        )
    tracing = Traced()
    instrument(app, tracer_provider=tracing.provider)
    run_burst(app)
    assert ran == [1]
    assert app.jobs.get(job_id).status is cronbase.JobStatus.SUCCEEDED
    consumer = tracing.one(SpanKind.CONSUMER)
    assert consumer.links == ()
    assert consumer.status.status_code is StatusCode.UNSET
    assert not tracing.spans(SpanKind.PRODUCER)


def test_a_defer_in_the_callers_transaction_rolls_back_with_it(
    app: cronbase.App, traced: Traced, database_url: str, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def handler(n: int) -> None: ...

    with psycopg.connect(database_url) as conn:
        handler.configure(connection=conn).defer(n=1)
        handler.configure(connection=conn).defer_many([{"n": 2}, {"n": 3}])
        conn.rollback()
        kept = handler.configure(connection=conn).defer(n=4)
        conn.commit()
    rows = db.execute("SELECT id, metadata ? 'otel' FROM cronbase.jobs_all").fetchall()
    assert rows == [(kept, True)]
    # The sends happened as far as the caller could tell; the rollback undid their jobs.
    assert len(traced.spans(SpanKind.PRODUCER)) == 3
    run_burst(app)
    (consumer,) = traced.spans(SpanKind.CONSUMER)
    kept_send = [s for s in traced.spans(SpanKind.PRODUCER)][-1]
    assert linked_to(consumer) == [ids(kept_send)]


def test_a_defer_that_fails_leaves_an_error_span_and_no_job(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    tracing = Traced()
    with cronbase.App(database_url, schema=SCHEMA, max_payload_bytes=100) as small:

        @small.task
        def handler(text: str) -> None: ...

        instrument(small, tracer_provider=tracing.provider)
        with pytest.raises(cronbase.PayloadError):
            handler.defer(text="x" * 500)
    producer = tracing.one(SpanKind.PRODUCER)
    assert producer.status.status_code is StatusCode.ERROR
    assert (producer.attributes or {})["error.type"] == "cronbase.errors.PayloadError"
    assert "messaging.message.id" not in (producer.attributes or {})
    assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (0,)


def test_instrument_is_idempotent_and_uninstrument_stops_tracing(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def handler() -> None: ...

    first, second = Traced(), Traced()
    instrument(app, tracer_provider=first.provider)
    instrument(app, tracer_provider=first.provider)
    assert is_instrumented(app)
    assert (len(app.hooks.defer_middleware), len(app.hooks.job_middleware)) == (1, 1)
    handler.defer()
    assert len(first.spans(SpanKind.PRODUCER)) == 1

    instrument(app, tracer_provider=second.provider)  # a new provider, still one middleware
    assert (len(app.hooks.defer_middleware), len(app.hooks.job_middleware)) == (1, 1)
    handler.defer()
    assert (len(first.spans()), len(second.spans(SpanKind.PRODUCER))) == (1, 1)

    uninstrument(app)
    uninstrument(app)  # again: nothing to do
    assert not is_instrumented(app)
    assert (app.hooks.defer_middleware, app.hooks.job_middleware) == ([], [])
    untraced = handler.defer()
    assert stored(db, untraced) is None
    run_burst(app)
    assert (len(first.spans()), len(second.spans())) == (1, 1)


def test_the_tracing_example_prints_a_send_span_and_a_process_span_linked_to_it(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(CRONBASE_DATABASE_URL=database_url, PYTHONPATH=after_inherited(str(REPO)))
    env.pop("DATABASE_URL", None)
    result = run_example("tracing", env)
    # "name kind trace T span S parent P links L", one line per span, as the example shows.
    spans = {}
    for line in result.stdout.splitlines():
        name, rest = line[:16].strip(), line[16:].split()
        kind, fields = rest[0], dict(zip(rest[1::2], rest[2::2], strict=True))
        spans[name] = (kind, fields)
    assert sorted(spans) == ["checkout", "process invoices", "render pdf", "send invoices"]
    send, checkout = spans["send invoices"][1], spans["checkout"][1]
    process, render = spans["process invoices"][1], spans["render pdf"][1]
    assert spans["send invoices"][0] == "PRODUCER"
    assert spans["process invoices"][0] == "CONSUMER"
    assert (send["trace"], send["parent"]) == (checkout["trace"], checkout["span"])
    assert (process["parent"], process["links"]) == ("-", send["span"])
    assert process["trace"] != send["trace"]
    assert (render["trace"], render["parent"]) == (process["trace"], process["span"])
    row = db.execute(
        "SELECT status, metadata->'otel'->>'traceparent' FROM cronbase.jobs_all"
    ).fetchone()
    assert row is not None
    assert row[0] == "succeeded"
    assert row[1].split("-")[1].startswith(send["trace"])


def test_without_opentelemetry_installed_the_import_error_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "try:\n    import cronbase.contrib.opentelemetry\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "pip install opentelemetry-api" in result.stdout, result.stdout + result.stderr


def test_every_job_of_a_chain_links_to_the_send_span_of_its_defer(
    app: cronbase.App, traced: Traced, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def double(n: int) -> int:
        return n * 2

    @app.task
    def add(previous: int, k: int = 1) -> int:
        return previous + k

    with traced.provider.get_tracer("test").start_as_current_span("checkout") as caller:
        last = cronbase.chain(double.s(n=3), add.s()).defer()
    # One defer, one send span for the whole graph, a child of the caller's span.
    producer = traced.one(SpanKind.PRODUCER)
    assert producer.parent is not None
    assert (producer.parent.trace_id, producer.parent.span_id) == (
        caller.get_span_context().trace_id,
        caller.get_span_context().span_id,
    )
    job_ids = [row[0] for row in db.execute("SELECT id FROM cronbase.jobs_all ORDER BY id")]
    assert len(job_ids) == 2
    assert job_ids[-1] == last  # a chain's id is its last job's
    assert stored(db, job_ids[0]) == stored(db, job_ids[1])

    run_burst(app)  # the second job is queued once the first succeeds, in the same burst
    assert app.jobs.get(last).status is cronbase.JobStatus.SUCCEEDED
    assert app.jobs.get(last).result == 7
    consumers = traced.spans(SpanKind.CONSUMER)
    assert sorted(str((s.attributes or {})["messaging.message.id"]) for s in consumers) == [
        str(i) for i in job_ids
    ]
    assert all(linked_to(s) == [ids(producer)] for s in consumers)
    assert all(s.parent is None for s in consumers)


@pytest.mark.parametrize("fired_by", ["run_now", "tick"])
def test_a_job_a_schedule_fires_starts_a_trace_with_no_link(
    app: cronbase.App, traced: Traced, db: psycopg.Connection[Any], fired_by: str
) -> None:
    @app.task
    def ping() -> None: ...

    app.schedules.add("ping", cron="*/5 * * * *", key="ping")
    # Even fired inside a span: no defer runs, so no send span and no stored context.
    with traced.provider.get_tracer("test").start_as_current_span("admin"):
        if fired_by == "run_now":
            job_id = app.schedules.run_now("ping")
        else:
            slot = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
            db.execute("UPDATE cronbase.schedules SET next_fire_at = %s WHERE key = 'ping'", [slot])
            scheduler = Scheduler(app.db, app.tasks, app.periodic_schedules)
            (job_id,) = asyncio.run(scheduler.tick(slot + timedelta(seconds=1)))
    assert not traced.spans(SpanKind.PRODUCER)
    assert stored(db, job_id) is None

    run_burst(app)
    assert app.jobs.get(job_id).status is cronbase.JobStatus.SUCCEEDED
    consumer = traced.one(SpanKind.CONSUMER)
    assert consumer.links == ()
    assert consumer.parent is None
    assert (consumer.attributes or {})["cronbase.attempt"] == 1
