"""examples/tracing.py: OpenTelemetry spans for a defer and for the attempt that runs it.

Run ``python -m examples.tracing`` from the repository root (the embedded PostgreSQL without
configuration; needs ``cronbase[otel]`` and opentelemetry-sdk): it defers one invoice inside a
"checkout" span, runs a burst worker, and prints one line per finished span.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

import cronbase
from cronbase.contrib.opentelemetry import instrument

app = cronbase.App()
instrument(app)  # spans go to the global tracer provider, wherever your process sets it up
tracer = trace.get_tracer("shop")


@app.task(queue="invoices")
def send_invoice(invoice_id: int) -> None:
    with tracer.start_as_current_span("render pdf"):  # a child of the attempt's span
        ...


def one_line(span: ReadableSpan) -> str:
    """Name, kind, then trace, span, parent and linked span ids (their first 8 hex digits)."""

    def short(context: trace.SpanContext | None) -> str:
        return "-" if context is None else f"{context.span_id:016x}"[:8]

    assert span.context is not None
    trace_id = f"{span.context.trace_id:032x}"[:8]
    links = ",".join(short(link.context) for link in span.links) or "-"
    ids = f"span {short(span.context)} parent {short(span.parent)} links {links}"
    return f"{span.name:<16} {span.kind.name:<8} trace {trace_id} {ids}\n"


if __name__ == "__main__":
    provider = TracerProvider()  # in production: a BatchSpanProcessor(OTLPSpanExporter())
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(formatter=one_line)))
    trace.set_tracer_provider(provider)

    app.migrate()
    with tracer.start_as_current_span("checkout"):
        send_invoice.defer(invoice_id=42)  # "send invoices", a child of "checkout"
    app.run_worker(burst=True)
    # send invoices    PRODUCER trace 7d1e56bc span 5f0a2c11 parent 90b3e7d4 links -
    # checkout         INTERNAL trace 7d1e56bc span 90b3e7d4 parent - links -
    # render pdf       INTERNAL trace c41f9e0a span 2e8d4a90 parent 61c7f3b2 links -
    # process invoices CONSUMER trace c41f9e0a span 61c7f3b2 parent - links 5f0a2c11
