"""Process and timing plumbing shared by every workload: worker processes, pacing, statistics.

Worker processes are started with ``spawn`` (no state inherited from the parent), get ready
(imports, connections), report ready, and wait for one "go" so the clock starts for all at once.
Each reports the ``time.monotonic()`` at which its run returned (a system-wide clock on Linux).
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing as mp
import queue as queue_module
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

CTX = mp.get_context("spawn")
READY_TIMEOUT = 60.0


@dataclass
class ChildrenResult:
    elapsed: float  # seconds from "go" until the last child finished, or the cap
    finished: bool  # every child returned before the cap
    reports: list[Any]


def _entry(
    target: Callable[..., Any], ready: Any, go: Any, out: Any, args: tuple[Any, ...]
) -> None:
    def signal_ready() -> None:
        ready.put(True)
        go.wait()

    report = target(signal_ready, *args)
    out.put((time.monotonic(), report))


class Children:
    """Processes each running ``target(signal_ready, *args)``: start, wait ready, go, collect.

    ``target`` calls ``signal_ready()`` once set up; that call returns when :meth:`go` is called.
    """

    def __init__(self, target: Callable[..., Any], args: Sequence[tuple[Any, ...]]) -> None:
        self._ready, self._out, self._go = CTX.Queue(), CTX.Queue(), CTX.Event()
        self._procs = [
            CTX.Process(target=_entry, args=(target, self._ready, self._go, self._out, a))
            for a in args
        ]
        self.start = 0.0

    def __enter__(self) -> Children:
        for p in self._procs:
            p.start()
        return self

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        waiting = len(self._procs)
        while waiting:
            try:
                self._ready.get(timeout=0.2)
                waiting -= 1
            except queue_module.Empty:
                if not all(p.is_alive() for p in self._procs):
                    raise RuntimeError("a benchmark process died; see its output above") from None
                if time.monotonic() > deadline:
                    raise RuntimeError("a benchmark process did not get ready") from None

    def go(self) -> None:
        self.start = time.monotonic()
        self._go.set()

    def collect(self, cap: float) -> ChildrenResult:
        """Wait until every child returned, or until ``cap`` seconds after :meth:`go`."""
        ends: list[float] = []
        reports: list[Any] = []
        deadline = self.start + cap
        while len(ends) < len(self._procs):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                end, report = self._out.get(timeout=min(remaining, 0.5))
            except queue_module.Empty:
                if not any(p.is_alive() for p in self._procs) and self._out.empty():
                    raise RuntimeError("a benchmark process died; see its output above") from None
                continue
            ends.append(end)
            reports.append(report)
        finished = len(ends) == len(self._procs)
        elapsed = (max(ends) - self.start) if finished else cap
        return ChildrenResult(elapsed, finished, reports)

    def __exit__(self, *exc: object) -> None:
        for p in self._procs:
            p.join(timeout=10 if self._go.is_set() else 0)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()


def run_children(
    target: Callable[..., Any], args: Sequence[tuple[Any, ...]], cap: float
) -> ChildrenResult:
    """Start, wait until all are ready, start the clock, collect (bounded by ``cap``)."""
    with Children(target, args) as children:
        children.wait_ready()
        children.go()
        return children.collect(cap)


def paced(n: int, rate: float, enqueue: Callable[[float], None]) -> None:
    """Call ``enqueue(time.time())`` ``n`` times at ``rate`` per second (no drift)."""
    interval = 1.0 / rate
    start = time.monotonic()
    for i in range(n):
        wait = start + i * interval - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        enqueue(time.time())


async def paced_async(n: int, rate: float, enqueue: Callable[[float], Awaitable[None]]) -> None:
    interval = 1.0 / rate
    start = time.monotonic()
    for i in range(n):
        wait = start + i * interval - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        await enqueue(time.time())


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(p / 100 * len(ordered))))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    clean = [v for v in values if v == v]  # drop NaN
    return statistics.median(clean) if clean else float("nan")


def count(url: str, sql: str) -> int:
    """One ``SELECT count(*) ...`` on its own connection (each subject's jobs-done figure)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql.encode()).fetchone()
    assert row is not None
    return int(row[0])
