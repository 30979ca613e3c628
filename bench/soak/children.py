"""The soak's processes: cronbase workers, producers and the claim probe, each started with
``spawn`` and reporting to the parent through one multiprocessing queue.

Workers and producers use cronbase's public API only (``App``, ``@app.task``,
``@app.periodic``, ``defer``/``defer_many``, ``app.worker()``, ``Retention``). The claim probe
is the one exception: it times the workers' own claim statement (``claim_jobs``, with the
worker's parameters) in a transaction it rolls back, through ``cronbase.worker.claim``, as
``bench/bigtable.py`` does.

Messages (tuples, kind first): ``("ready", name)``; ``("ran", starts, pickups, ids)`` (bytes of
``array('d')``/``array('q')``: handler start times, defer-to-start seconds, producer << 40 | seq);
``("tick", [slot timestamps])``; ``("enqueue", times, seconds, jobs)``; ``("claim", times,
seconds)``; ``("deferred", producer, count)``; ``("stopped", name)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from array import array
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg

import cronbase

try:  # exported from cronbase's top level soon; until then from where it lives
    from cronbase import Retention  # type: ignore[attr-defined]
except ImportError:
    from cronbase.operations.retention import Retention

ID_SHIFT = 40  # a job's id in the soak: producer << 40 | its sequence number
FLUSH_SECONDS = 0.5


def make_app(url: str, schedule_every: int = 5) -> cronbase.App:
    """The soak's application: a no-op job that reports its pickup, and a schedule."""
    app = cronbase.App(database_url=url)

    @app.task(name="soak_work")
    async def soak_work(p: int, n: int, t: float) -> None:
        _REPORTER.ran(time.time(), t, (p << ID_SHIFT) | n)

    @app.periodic(cron=f"*/{schedule_every} * * * * *", key="soak-tick")
    @app.task(name="soak_tick")
    async def soak_tick(scheduled_at: datetime) -> None:
        _REPORTER.tick(scheduled_at.timestamp())

    return app


class Reporter:
    """Collects what a process measures and sends it to the parent every FLUSH_SECONDS."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "ran", "enqueue" or "claim"
        self.out: Any = None
        self._lock = threading.Lock()
        self._new()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _new(self) -> None:
        self.times, self.values, self.ids = array("d"), array("d"), array("q")
        self.ticks: list[float] = []
        self.jobs = 0

    def start(self, out: Any) -> None:
        self.out = out
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def ran(self, now: float, deferred_at: float, ident: int) -> None:
        with self._lock:
            self.times.append(now)
            self.values.append(now - deferred_at)
            self.ids.append(ident)

    def tick(self, slot: float) -> None:
        with self._lock:
            self.ticks.append(slot)

    def measured(self, at: float, seconds: float, jobs: int = 0) -> None:
        with self._lock:
            self.times.append(at)
            self.values.append(seconds)
            self.jobs += jobs

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_SECONDS):
            self.flush()

    def flush(self) -> None:
        with self._lock:
            times, values, ids, ticks, jobs = (
                self.times,
                self.values,
                self.ids,
                self.ticks,
                self.jobs,
            )
            self._new()
        if times:
            if self.kind == "ran":
                self.out.put(("ran", times.tobytes(), values.tobytes(), ids.tobytes()))
            elif self.kind == "enqueue":
                self.out.put(("enqueue", times.tobytes(), values.tobytes(), jobs))
            else:
                self.out.put((self.kind, times.tobytes(), values.tobytes()))
        if ticks:
            self.out.put(("tick", ticks))

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.flush()


_REPORTER = Reporter("ran")  # the handlers' (one per worker process)


def worker_main(
    out: Any, name: str, url: str, concurrency: int, window: float, interval: float, every: int
) -> None:
    """A long-running cronbase worker (schedules on, retention on) until SIGTERM."""
    app = make_app(url, every)
    retention = Retention(
        succeeded=timedelta(seconds=window),
        cancelled=timedelta(seconds=window),
        dead=timedelta(seconds=window),
        events=timedelta(seconds=window),
        interval=timedelta(seconds=interval),
    )
    worker = app.worker(concurrency=concurrency, retention=retention)
    # The handler's flushes are one reporter's: it starts with the worker's loop.
    _REPORTER.start(out)

    async def main() -> None:
        running = asyncio.create_task(worker.run())
        started = asyncio.create_task(worker.started.wait())
        await asyncio.wait({running, started}, return_when=asyncio.FIRST_COMPLETED)
        if started.done():
            out.put(("ready", name))
        await running

    try:
        asyncio.run(main())
    finally:
        _REPORTER.close()
        out.put(("stopped", name))


def capacity_child(signal_ready: Callable[[], None], url: str, concurrency: int) -> int:
    """A burst worker for the capacity drain (``harness.run_children``): returns when nothing
    is due."""
    app = make_app(url)
    signal_ready()
    app.run_worker(concurrency=concurrency, burst=True, install_signal_handlers=False)
    return 0


def producer_main(
    out: Any, index: int, url: str, rate: float, batch: int, stop: Any, go: Any
) -> None:
    """Defer ``rate`` jobs per second in calls of ``batch`` (defer() when 1) until ``stop``;
    each call's wall time is its enqueue latency. Paced without drift; when it falls more
    than a second behind (the database slower than the rate), it starts its schedule again
    rather than burst to catch up."""
    app = make_app(url)
    work = app.tasks["soak_work"]
    app.pool()  # opened before the clock, as in a running application
    reporter = Reporter("enqueue")
    reporter.start(out)
    out.put(("ready", f"producer {index}"))
    go.wait()
    interval = batch / rate
    n = calls = 0
    start = time.monotonic()
    try:
        while not stop.is_set():
            wait = start + calls * interval - time.monotonic()
            if wait > 0:
                if stop.wait(wait):
                    break
            elif wait < -1.0:
                start, calls = time.monotonic(), 0
            t = time.time()
            if batch == 1:
                work.defer(p=index, n=n, t=t)
            else:
                work.defer_many([{"p": index, "n": n + i, "t": t} for i in range(batch)])
            reporter.measured(t, time.time() - t, batch)
            n += batch
            calls += 1
    finally:
        reporter.close()
        out.put(("deferred", index, n))
        app.close()


def probe_main(out: Any, url: str, rate: float, limit: int, stop: Any, go: Any) -> None:
    """Time the workers' claim statement (limit ``limit``, any queue) ``rate`` times a second,
    each in a transaction rolled back: the claimed jobs go back to waiting."""
    from cronbase.worker.claim import claim_jobs_sync, claim_params  # internal: see above

    queries = cronbase.App(database_url=url).queries
    params = claim_params(limit=limit, worker="soak-claim-probe")
    reporter = Reporter("claim")
    reporter.start(out)
    out.put(("ready", "probe"))
    go.wait()
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            while not stop.wait(1.0 / rate):
                with conn.transaction(force_rollback=True):
                    t = time.time()
                    begin = time.perf_counter()
                    claim_jobs_sync(conn, queries, params)
                    reporter.measured(t, time.perf_counter() - begin)
    finally:
        reporter.close()


def preload(url: str, n: int, schedule_every: int) -> None:
    """``n`` jobs for the capacity drain (in its own database), deferred in calls of 5,000."""
    with make_app(url, schedule_every) as app:
        work = app.tasks["soak_work"]
        t = time.time()
        for first in range(0, n, 5000):
            work.defer_many([{"p": 0, "n": i, "t": t} for i in range(first, min(n, first + 5000))])


def run_entry(target: Callable[..., None], *args: Any) -> None:
    """Process entry: run ``target`` and swallow KeyboardInterrupt (the parent decides)."""
    with contextlib.suppress(KeyboardInterrupt):
        target(*args)
