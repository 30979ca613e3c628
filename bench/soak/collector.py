"""The parent's side of the children's reports: timings binned into sample intervals, and every
job's executions counted (exactly once is the invariant).

A bin holds the raw values of one interval until :meth:`Collector.close_bin` reduces them to
percentiles; every job's count is one byte in a per-producer ``bytearray`` (saturating at 255).
"""

from __future__ import annotations

import math
import queue as queue_module
import threading
from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from .children import ID_SHIFT

SEQ_MASK = (1 << ID_SHIFT) - 1


def percentile(values: array[float] | list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(p / 100 * len(ordered))))
    return ordered[rank - 1]


@dataclass
class Bin:
    pickups: array[float] = field(default_factory=lambda: array("d"))
    enqueues: array[float] = field(default_factory=lambda: array("d"))
    claims: array[float] = field(default_factory=lambda: array("d"))
    ran: int = 0
    enqueued: int = 0


class Collector:
    """Reads the children's queue on a thread of its own until :meth:`stop`."""

    def __init__(self, out: Any, start: float, bin_seconds: float) -> None:
        self.out = out
        self.start = start  # time.time() of the soak's start
        self.bin_seconds = bin_seconds
        self.bins: dict[int, Bin] = defaultdict(Bin)
        self.runs: dict[int, bytearray] = defaultdict(bytearray)
        self.ran_total = 0
        self.ticks: list[float] = []
        self.deferred: dict[int, int] = {}
        self.ready: list[str] = []
        self.stopped: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Collector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._drain_queue()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                message = self.out.get(timeout=0.2)
            except queue_module.Empty:
                continue
            self.handle(message)

    def _drain_queue(self) -> None:
        while True:
            try:
                self.handle(self.out.get_nowait())
            except queue_module.Empty:
                return

    def _bin(self, t: float) -> Bin:
        return self.bins[max(0, int((t - self.start) // self.bin_seconds))]

    def handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        with self._lock:
            if kind == "ran":
                times, pickups, ids = (array("d", message[1]), array("d", message[2]), array("q"))
                ids.frombytes(message[3])
                for t, pickup in zip(times, pickups, strict=True):
                    b = self._bin(t)
                    b.pickups.append(pickup)
                    b.ran += 1
                for ident in ids:
                    counts, seq = self.runs[ident >> ID_SHIFT], ident & SEQ_MASK
                    if seq >= len(counts):
                        counts.extend(bytes(seq + 1 - len(counts) + 65536))
                    if counts[seq] < 255:
                        counts[seq] += 1
                self.ran_total += len(ids)
            elif kind in ("enqueue", "claim"):
                times, values = array("d", message[1]), array("d", message[2])
                per_call = message[3] // len(times) if kind == "enqueue" and times else 0
                for t, v in zip(times, values, strict=True):
                    b = self._bin(t)
                    (b.enqueues if kind == "enqueue" else b.claims).append(v)
                    b.enqueued += per_call
            elif kind == "tick":
                self.ticks.extend(message[1])
            elif kind == "deferred":
                self.deferred[message[1]] = message[2]
            elif kind == "ready":
                self.ready.append(message[1])
            elif kind == "stopped":
                self.stopped.append(message[1])

    def close_bin(self, index: int) -> dict[str, float]:
        """The figures of one interval (its raw values are dropped)."""
        with self._lock:
            b = self.bins.pop(index, Bin())
        s = self.bin_seconds
        return {
            "enqueue_p99_ms": percentile(b.enqueues, 99) * 1000,
            "claim_p99_ms": percentile(b.claims, 99) * 1000,
            "pickup_p50_ms": percentile(b.pickups, 50) * 1000,
            "pickup_p99_ms": percentile(b.pickups, 99) * 1000,
            "ran_per_s": b.ran / s,
            "enqueued_per_s": b.enqueued / s,
            "claim_probes": len(b.claims),
        }

    def executions(self) -> dict[str, int]:
        """Jobs deferred, and of them: never ran, ran more than once; runs of unknown jobs."""
        with self._lock:
            lost = twice = unknown = 0
            for producer, total in self.deferred.items():
                counts = self.runs.get(producer, bytearray())
                seen = counts[:total]
                lost += total - len(seen) + seen.count(0)
                twice += len(seen) - seen.count(0) - seen.count(1)
                unknown += sum(counts[total:])
            unknown += sum(sum(c) for p, c in self.runs.items() if p not in self.deferred)
            return {
                "deferred": sum(self.deferred.values()),
                "runs": self.ran_total,
                "lost": lost,
                "twice": twice,
                "unknown": unknown,
            }

    def done(self) -> int:
        with self._lock:
            return self.ran_total
