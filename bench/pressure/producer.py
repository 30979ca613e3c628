"""A Python producer process: defers the mix (``mix.py``) through its subject's own API, paced
without drift at its share of the offered rate, until SIGTERM."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

from . import mix, subjects
from .reporter import Reporter


def stop_on_sigterm() -> threading.Event:
    """An event set by SIGTERM (the fleet's stop for producers and the probe)."""
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    return stopping


def producer_main(
    out: Any,
    key: str,
    index: int,
    url: str,
    schedule: list[tuple[float, float, int]],
    go: Any,
) -> None:
    """``schedule``: this producer's jobs/s and jobs per call over the timeline,
    ``[(from_second, rate, batch)]`` (``config.producer_schedule``)."""
    stopping = stop_on_sigterm()
    enqueuer = subjects.enqueuer(key, url)
    reporter = Reporter("enqueued")
    reporter.start(out)
    out.put(("ready", f"producer {index}"))
    n = calls = 0
    try:
        while not go.wait(0.1):
            if stopping.is_set():
                return
        pacer = mix.Pacer(schedule)
        while not stopping.is_set():
            wait = pacer.wait()
            if wait > 0 and stopping.wait(wait):
                break
            kind, delay, batch = mix.call_kind(calls), mix.delay_of(calls), pacer.batch
            t = time.time()
            enqueuer.enqueue(mix.payloads(index, n, batch, t + delay, kind), delay)
            reporter.record(t, time.time() - t, t + delay, batch)
            n += batch
            calls += 1
            pacer.called(batch)
    finally:
        reporter.close()
        out.put(("deferred", index, n))
        enqueuer.close()
