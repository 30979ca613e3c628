"""OpenTelemetry tracing: a producer span per defer, whose trace context is stored with the job,
and a consumer span per attempt linked to it; and metrics beside the Prometheus ones
(opentelemetry_metrics.py) for teams that ship them over OTLP (the ``otel`` extra:
opentelemetry-api).

```pycon
>>> from cronbase.contrib.opentelemetry import instrument
>>> instrument(app)  # doctest: +SKIP
```
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import time
import weakref
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
except ImportError as exc:
    raise ImportError(
        f"cronbase.contrib.opentelemetry needs opentelemetry-api ({exc}); "
        "install it with: pip install opentelemetry-api (cronbase's otel extra: pip install -e "
        "'.[otel]' in its clone)"
    ) from exc

from .opentelemetry_metrics import DatabaseGauges, JobMetrics

if TYPE_CHECKING:
    from ..context import JobContext
    from ..db.database import Database
    from ..hooks import DeferCall, Hooks
    from ..job import JSONValue

__all__ = ["instrument", "is_instrumented", "uninstrument"]

logger = logging.getLogger("cronbase")

# Names from opentelemetry-semantic-conventions 0.66b2 (semantic conventions 1.44.0):
# opentelemetry/semconv/_incubating/attributes/messaging_attributes.py and, for error.type,
# opentelemetry/semconv/attributes/error_attributes.py. Spelled out here because only
# opentelemetry-api is a run-time dependency. The messaging conventions are still "Development":
# span names follow "{messaging.operation.name} {destination}", with the queue as destination.
SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"
MESSAGING_SYSTEM = "messaging.system"
MESSAGING_OPERATION_TYPE = "messaging.operation.type"
MESSAGING_OPERATION_NAME = "messaging.operation.name"
MESSAGING_DESTINATION_NAME = "messaging.destination.name"
MESSAGING_MESSAGE_ID = "messaging.message.id"
MESSAGING_BATCH_MESSAGE_COUNT = "messaging.batch.message_count"
MESSAGING_CLIENT_ID = "messaging.client.id"
ERROR_TYPE = "error.type"
CRONBASE_TASK = "cronbase.task"
CRONBASE_ATTEMPT = "cronbase.attempt"

# The key of jobs.metadata that holds the defer's trace context (W3C traceparent, baggage...).
METADATA_KEY = "otel"


class _HasHooks(Protocol):
    """What instrument() needs of an App (kept narrow: features do not import app.py)."""

    @property
    def hooks(self) -> Hooks: ...

    @property
    def db(self) -> Database: ...


class _Instrumentation:
    """The two middleware one App gets; holds the tracer and the instruments so instrument()
    again can swap them."""

    def __init__(self, tracer: trace.Tracer, job_metrics: JobMetrics) -> None:
        self.tracer = tracer
        self.metrics = job_metrics

    @contextlib.contextmanager
    def send(self, call: DeferCall) -> Iterator[None]:
        """The producer span around one defer or defer_many that goes to the database."""
        attributes: dict[str, str | int] = {
            MESSAGING_SYSTEM: "cronbase",
            MESSAGING_OPERATION_TYPE: "send",
            MESSAGING_OPERATION_NAME: "send",
            MESSAGING_DESTINATION_NAME: call.queue,
            CRONBASE_TASK: call.task,
        }
        if len(call.payloads) != 1:
            # The conventions keep the batch count off single-message spans; a defer_many of
            # one job cannot be told from a defer here, and needs no count either.
            attributes[MESSAGING_BATCH_MESSAGE_COUNT] = len(call.payloads)
        span = self.tracer.start_span(
            f"send {call.queue}", kind=SpanKind.PRODUCER, attributes=attributes
        )
        context = trace.set_span_in_context(span)
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=context)
        if carrier:  # empty when there is nothing to propagate (no SDK: an invalid span)
            otel: dict[str, JSONValue] = dict(carrier.items())
            call.metadata[METADATA_KEY] = otel
        # Current during the insert, so a database instrumentation's span is its child.
        token = otel_context.attach(context)
        measured = _measured(attributes)
        try:
            yield
        except Exception as exc:
            _failed(span, exc, sealed=call.encrypted)  # a refusal may quote the payload
            measured[ERROR_TYPE] = _error_type(exc)
            self.metrics.sent.add(len(call.payloads), measured)
            raise
        else:
            if len(call.ids) == 1:
                span.set_attribute(MESSAGING_MESSAGE_ID, str(call.ids[0]))
            self.metrics.sent.add(len(call.ids), measured)
        finally:
            otel_context.detach(token)
            span.end()

    @contextlib.contextmanager
    def process(self, job: JobContext) -> Iterator[None]:
        """The consumer span around one attempt, current while the handler runs."""
        stored = _stored_context(job)
        remote = trace.get_current_span(stored).get_span_context()
        links = [Link(remote)] if remote.is_valid else []
        # A new trace, linked to the defer: jobs run minutes or days after their defer, and a
        # span around worker.run() must not become the parent of every job the worker runs.
        # The stored context still brings its baggage along.
        parent = trace.set_span_in_context(trace.INVALID_SPAN, stored)
        attributes: dict[str, str | int] = {
            MESSAGING_SYSTEM: "cronbase",
            MESSAGING_OPERATION_TYPE: "process",
            MESSAGING_OPERATION_NAME: "process",
            MESSAGING_DESTINATION_NAME: job.queue,
            MESSAGING_MESSAGE_ID: str(job.id),
            CRONBASE_TASK: job.task,
            CRONBASE_ATTEMPT: job.attempt,
        }
        if job.worker_id is not None:
            attributes[MESSAGING_CLIENT_ID] = job.worker_id
        span = self.tracer.start_span(
            f"process {job.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
        )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        measured = _measured(attributes)
        self.metrics.consumed.add(1, measured)
        started = time.perf_counter()
        try:
            yield
        except BaseException as exc:
            # BaseException too: an async handler past its timeout sees CancelledError here.
            _failed(span, exc, sealed=job.encrypted)
            measured[ERROR_TYPE] = _error_type(exc)
            raise
        finally:
            self.metrics.processed(time.perf_counter() - started, measured)
            otel_context.detach(token)
            span.end()


def _error_type(exc: BaseException) -> str:
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins.")


# A span's attributes that metrics carry too: the ids (job, worker, attempt) would give every
# job its own time series.
_METRIC_ATTRIBUTES = (
    MESSAGING_SYSTEM,
    MESSAGING_OPERATION_NAME,
    MESSAGING_DESTINATION_NAME,
    CRONBASE_TASK,
)


def _measured(attributes: Mapping[str, str | int]) -> dict[str, str | int]:
    return {k: attributes[k] for k in _METRIC_ATTRIBUTES}


def _failed(span: trace.Span, exc: BaseException, *, sealed: bool = False) -> None:
    kind = type(exc)
    span.set_attribute(ERROR_TYPE, _error_type(exc))
    if sealed:
        # An encrypted task's error message and traceback are stored sealed: a span, exported
        # in plain to a tracing backend, carries the error's class alone.
        span.set_status(Status(StatusCode.ERROR, f"{kind.__name__} (message encrypted)"))
        return
    span.record_exception(exc)
    span.set_status(
        Status(StatusCode.ERROR, f"{kind.__name__}: {exc}" if str(exc) else kind.__name__)
    )


def _stored_context(job: JobContext) -> Context:
    """The context the job's defer stored, or an empty one; jobs.metadata may have been written
    by other SQL, an older cronbase or another tool, so anything odd in it is ignored."""
    metadata = job.metadata
    stored = metadata.get(METADATA_KEY) if isinstance(metadata, Mapping) else None
    if not isinstance(stored, Mapping):
        return Context()
    carrier = {k: v for k, v in stored.items() if isinstance(k, str) and isinstance(v, str)}
    try:
        return propagate.extract(carrier, context=Context())
    except Exception:  # a custom propagator that chokes on a bad value must not fail the job
        logger.debug("job %d: unreadable trace context %r; no link", job.id, carrier, exc_info=True)
        return Context()


# One instrumentation per App (its Hooks), dropped with it.
_installed: weakref.WeakKeyDictionary[Hooks, _Instrumentation] = weakref.WeakKeyDictionary()


def _version() -> str | None:
    try:
        return importlib.metadata.version("cronbase")
    except importlib.metadata.PackageNotFoundError:
        return None


def _tracer(tracer_provider: trace.TracerProvider | None) -> trace.Tracer:
    return trace.get_tracer(__name__, _version(), tracer_provider, schema_url=SCHEMA_URL)


def _meter(meter_provider: metrics.MeterProvider | None) -> metrics.Meter:
    return metrics.get_meter(__name__, _version() or "", meter_provider, schema_url=SCHEMA_URL)


# Each App's database gauges, when the last instrument() asked for them.
_gauges: weakref.WeakKeyDictionary[Hooks, DatabaseGauges] = weakref.WeakKeyDictionary()


def instrument(
    app: _HasHooks,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
    *,
    database_metrics: bool = False,
) -> None:
    """Trace and measure ``app``'s defers and attempts (``app``: a :class:`cronbase.App`).

    Each defer or defer_many that reaches the database gets a PRODUCER span "send {queue}" whose
    trace context is stored in the jobs' metadata; each attempt a CONSUMER span "process {queue}"
    linked to it, current while the handler runs. Spans go to ``tracer_provider``, else the
    global one. Calling it again changes the providers and adds nothing; call it in the
    processes that defer and in those that run workers.

    Metrics go to ``meter_provider``, else the global one: the messaging conventions'
    ``messaging.client.sent.messages``, ``messaging.client.consumed.messages`` and
    ``messaging.process.duration``. With ``database_metrics=True`` also the database side
    (queue depth by status, the oldest wait, workers needed, heartbeat ages, schedules'
    lateness, table sizes, the xmin horizon) as observable gauges named ``cronbase.*``, read
    from the database at each collection: ask for those in one process only.

    ```pycon
    >>> instrument(app, tracer_provider=provider)  # doctest: +SKIP
    >>> instrument(app, meter_provider=meters, database_metrics=True)  # doctest: +SKIP
    ```
    """
    hooks = app.hooks
    tracer = _tracer(tracer_provider)
    meter = _meter(meter_provider)
    # A meter cannot drop an instrument: the gauges of an earlier call go quiet instead.
    earlier = _gauges.pop(hooks, None)
    if earlier is not None:
        earlier.stop()
    if database_metrics:
        _gauges[hooks] = DatabaseGauges(meter, app.db)
    installed = _installed.get(hooks)
    if installed is not None:
        installed.tracer = tracer
        installed.metrics = JobMetrics(meter)
        return
    installed = _Instrumentation(tracer, JobMetrics(meter))
    hooks.defer_middleware.append(installed.send)
    hooks.job_middleware.append(installed.process)
    _installed[hooks] = installed


def uninstrument(app: _HasHooks) -> None:
    """Stop tracing and measuring ``app``; nothing happens when it was not instrumented."""
    hooks = app.hooks
    gauges = _gauges.pop(hooks, None)
    if gauges is not None:
        gauges.stop()
    installed = _installed.pop(hooks, None)
    if installed is None:
        return
    # Bound methods compare equal (not identical) each time they are read: remove by equality.
    with contextlib.suppress(ValueError):  # already taken out of the list by hand
        hooks.defer_middleware.remove(installed.send)
    with contextlib.suppress(ValueError):
        hooks.job_middleware.remove(installed.process)


def is_instrumented(app: _HasHooks) -> bool:
    """Whether :func:`instrument` was called for ``app`` (and not undone)."""
    return app.hooks in _installed
