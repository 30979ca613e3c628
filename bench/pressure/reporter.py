"""The children's side of the measurements: what a worker's handler, a producer and the claim
probe record, sent to the coordinator through one multiprocessing queue every FLUSH_SECONDS
(the Node processes print the same messages as JSON lines: ``node/report.mjs``).

Messages (tuples, kind first):
``("ready", name)``; ``("ran", starts, pickups, idents, codes)`` per attempt (arrays: handler
start times, seconds from due to start on first attempts and NaN otherwise, job idents,
``mix.Code`` values); ``("enqueued", times, seconds, dues, counts)`` per producer call (its
start, its duration, its jobs' due time, its job count); ``("claim", times, seconds)`` per
probe; ``("deferred", producer, jobs)`` when a producer stops; ``("unavailable", what,
reason)`` when the probe cannot time its subject's claim; ``("error", name, text)`` when a
child fails (fatal to the scenario); ``("warning", name, text)`` (listed in the report).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import traceback
from array import array
from collections.abc import Callable
from typing import Any

from . import mix

FLUSH_SECONDS = 0.5


class Reporter:
    """Buffers records under a lock and flushes them from a thread of its own."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "ran", "enqueued" or "claim"
        self.out: Any = None
        self._lock = threading.Lock()
        self._columns = self._empty()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _empty(self) -> tuple[array[Any], ...]:
        if self.kind == "ran":
            return array("d"), array("d"), array("q"), array("b")
        if self.kind == "enqueued":
            return array("d"), array("d"), array("d"), array("l")
        return array("d"), array("d")

    def start(self, out: Any) -> None:
        self.out = out
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def record(self, *values: float) -> None:
        with self._lock:
            for column, value in zip(self._columns, values, strict=True):
                column.append(value)

    def attempt(self, payload: dict[str, Any], is_first: bool) -> bool:
        """A handler starts ``payload``'s job: record it; True when the attempt must raise."""
        now = time.time()
        code = mix.code_of(payload, is_first)
        pickup = now - float(payload["t"]) if is_first else math.nan
        self.record(now, pickup, mix.ident(payload), int(code))
        return code is mix.Code.FIRST_FAILS

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_SECONDS):
            self.flush()

    def flush(self) -> None:
        with self._lock:
            columns, self._columns = self._columns, self._empty()
        if self.out is not None and columns[0]:
            self.out.put((self.kind, *columns))

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.flush()


# A worker process's handlers report through this one (started by the worker's entry).
HANDLER = Reporter("ran")


class _NotTheFlakyJobs(logging.Filter):
    """Drops the records of the retry jobs' planned failures (1 call in 10 fails on purpose;
    every library logs each one as a warning), keeping everything else."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += repr(record.exc_info[1])
        return mix.FlakyJobError.__name__ not in text


def quiet_planned_failures() -> None:
    """Warnings and errors to stderr, as Python's last-resort handler would print them, less
    the planned failures."""
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    handler.addFilter(_NotTheFlakyJobs())
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)


def run_entry(target: Callable[..., None], out: Any, name: str, *args: Any) -> None:
    """A child's entry: run ``target(out, *args)``; a failure is reported by name with its
    traceback (the coordinator prints it), KeyboardInterrupt is the parent's to handle."""
    quiet_planned_failures()
    with contextlib.suppress(KeyboardInterrupt):
        try:
            target(out, *args)
        except Exception:
            out.put(("error", name, traceback.format_exc()))
            raise
