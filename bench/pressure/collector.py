"""The coordinator's side of the measurements: attempts, defers and claim timings binned into
sample intervals, and a ledger of the queue's depth, second by second.

Depth is counted from the reports, the same way for every subject, rather than by a query on
each subject's tables (which would add a scan of the very tables under pressure): a job is
waiting from its due time until its first attempt starts, and a retry job again from its first
attempt's start plus the 1 s backoff until its second attempt starts. Every change goes into a
per-second ledger; the depth at second s is the sum of the ledger up to s.
"""

from __future__ import annotations

import math
import queue as queue_module
import threading
from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from . import mix
from .mix import Code

SEQ_MASK = (1 << mix.ID_SHIFT) - 1


def percentile(values: Any, p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of the finite values; NaN when there are none."""
    ordered = sorted(v for v in values if v == v)
    if not ordered:
        return math.nan
    rank = max(1, min(len(ordered), math.ceil(p / 100 * len(ordered))))
    return float(ordered[rank - 1])


@dataclass
class Bin:
    """One sample interval's raw values."""

    pickups: array[float] = field(default_factory=lambda: array("d"))
    claims: array[float] = field(default_factory=lambda: array("d"))
    enqueue_seconds: array[float] = field(default_factory=lambda: array("d"))
    completions: int = 0
    enqueued: int = 0


class Collector:
    """Reads the Python children's queue on a thread of its own; the Node children's readers
    call :meth:`handle` directly. ``start`` (epoch seconds) is set at "go": bins and the ledger
    count from it."""

    def __init__(self, out: Any, bin_seconds: float) -> None:
        self.out = out
        self.bin_seconds = bin_seconds
        self.start = 0.0
        self.bins: dict[int, Bin] = defaultdict(Bin)
        self.ledger: dict[int, int] = defaultdict(int)
        self.completed: dict[int, bytearray] = defaultdict(bytearray)
        self.deferred: dict[int, int] = {}
        self.ready: list[str] = []
        self.errors: list[tuple[str, str]] = []
        self.warnings: list[tuple[str, str]] = []
        self.unavailable: dict[str, str] = {}
        self.completions = 0
        self.first_start = math.inf
        self.last_start = -math.inf
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
            except (EOFError, OSError):  # the queue's feeder went away with a killed child
                return
            self.handle(message)

    def _drain_queue(self) -> None:
        while True:
            try:
                self.handle(self.out.get_nowait())
            except (queue_module.Empty, EOFError, OSError):
                return

    def _second(self, t: float) -> int:
        return math.floor(t - self.start)

    def _bin(self, t: float) -> Bin:
        return self.bins[max(0, math.floor((t - self.start) / self.bin_seconds))]

    def handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        with self._lock:
            if kind == "ran":
                self._ran(*message[1:])
            elif kind == "enqueued":
                self._enqueued(*message[1:])
            elif kind == "claim":
                for t, seconds in zip(message[1], message[2], strict=True):
                    self._bin(t).claims.append(seconds)
            elif kind == "deferred":
                self.deferred[int(message[1])] = int(message[2])
            elif kind == "ready":
                self.ready.append(message[1])
            elif kind == "unavailable":
                self.unavailable[message[1]] = message[2]
            elif kind == "error":
                self.errors.append((message[1], message[2]))
            elif kind == "warning" and len(self.warnings) < 20:
                self.warnings.append((message[1], message[2]))

    def _ran(self, starts: Any, pickups: Any, idents: Any, codes: Any) -> None:
        for t, pickup, job, code in zip(starts, pickups, idents, codes, strict=True):
            b = self._bin(t)
            self.first_start = min(self.first_start, t)
            self.last_start = max(self.last_start, t)
            self.ledger[self._second(t)] -= 1  # every attempt's start ends a wait
            if code != Code.RETRY_OK:
                b.pickups.append(math.nan if pickup is None else pickup)
            if code == Code.FIRST_FAILS:  # waiting again once its backoff has passed
                self.ledger[self._second(t + mix.RETRY_DELAY)] += 1
            if code != Code.FIRST_FAILS:
                b.completions += 1
                self.completions += 1
                counts, seq = self.completed[int(job) >> mix.ID_SHIFT], int(job) & SEQ_MASK
                if seq >= len(counts):
                    counts.extend(bytes(seq + 1 - len(counts) + 65536))
                if counts[seq] < 255:
                    counts[seq] += 1

    def _enqueued(self, times: Any, seconds: Any, dues: Any, counts: Any) -> None:
        for t, took, due, n in zip(times, seconds, dues, counts, strict=True):
            b = self._bin(t)
            b.enqueued += int(n)
            b.enqueue_seconds.append(took)
            self.ledger[self._second(due)] += int(n)

    def depths(self, until: int) -> list[int]:
        """The depth at the end of each second ``0 .. until - 1``."""
        with self._lock:
            ledger = dict(self.ledger)
        running = sum(v for s, v in ledger.items() if s < 0)
        out = []
        for s in range(until):
            running += ledger.get(s, 0)
            out.append(running)
        return out

    def figures(self, index: int) -> dict[str, float]:
        """The figures of sample interval ``index`` as they stand (raw values are kept)."""
        with self._lock:
            b = self.bins.get(index, Bin())
            pickups, claims = list(b.pickups), list(b.claims)
            completions, enqueued = b.completions, b.enqueued
            enqueue = list(b.enqueue_seconds)
        s = self.bin_seconds
        return {
            "completions_per_s": completions / s,
            "enqueued_per_s": enqueued / s,
            "pickup_p50_ms": percentile(pickups, 50) * 1000,
            "pickup_p99_ms": percentile(pickups, 99) * 1000,
            "claim_p99_ms": percentile(claims, 99) * 1000,
            "claim_p50_ms": percentile(claims, 50) * 1000,
            "enqueue_p99_ms": percentile(enqueue, 99) * 1000,
            "first_attempts": len(pickups),
            "claim_probes": len(claims),
        }

    def pooled(self, indexes: range) -> dict[str, list[float]]:
        """Raw pickups and claim timings of several intervals (a phase's)."""
        with self._lock:
            bins = [self.bins[i] for i in indexes if i in self.bins]
            return {
                "pickups": [v for b in bins for v in b.pickups],
                "claims": [v for b in bins for v in b.claims],
            }

    def executions(self) -> dict[str, int]:
        """Jobs deferred, and of them: never completed, completed twice or more."""
        with self._lock:
            lost = twice = 0
            for producer, total in self.deferred.items():
                seen = self.completed.get(producer, bytearray())[:total]
                lost += total - len(seen) + seen.count(0)
                twice += len(seen) - seen.count(0) - seen.count(1)
            return {
                "deferred": sum(self.deferred.values()),
                "completions": self.completions,
                "never_completed": lost,
                "completed_twice": twice,
            }

    def done_of(self, producers: list[int]) -> int:
        """Completions of these producers' jobs (each job once)."""
        with self._lock:
            return sum(
                len(c) - c.count(0) for p, c in self.completed.items() if p in set(producers)
            )
