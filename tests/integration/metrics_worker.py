"""A live worker serving its Prometheus metrics, for the tests that scrape what a real worker
serves (the metrics page's figures, the monitoring dashboard's queries)."""

from __future__ import annotations

import asyncio
import threading
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

import cronbase
from tests.servers import free_port


@contextmanager
def serving_metrics(app: cronbase.App) -> Iterator[Callable[[], str | None]]:
    """Run a worker of ``app`` on a free metrics port until the block ends; the block is given
    ``scrape()``: the metrics text, or None while the endpoint does not answer yet.

    The worker runs its own event loop in a thread, so the test's thread is free to poll the
    endpoint as a Prometheus server would; a worker still alive after the block is a failure.
    """
    port = free_port()
    worker = app.worker(
        install_signal_handlers=False, metrics_port=port, poll_interval=timedelta(seconds=0.05)
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(worker.run(),))
    thread.start()

    def scrape() -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return str(r.read().decode())
        except OSError:  # not listening yet
            return None

    try:
        yield scrape
    finally:
        # stop() from this thread must reach the worker's loop through call_soon_threadsafe.
        loop.call_soon_threadsafe(worker.stop)
        thread.join(60)
        loop.close()
    assert not thread.is_alive(), "the metrics worker did not stop within 60 s"
