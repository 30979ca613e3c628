"""A producer thread for failover tests: defers jobs of ``deliver(n)`` without end, noting each
call (when it started and ended, the jobs' n, their ids, or the error when it raised), so a test
can tell acknowledged jobs from the rest (tests/e2e/test_failover.py, tests/hosts/test_patroni.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import cronbase

# The producer's pace between defers (one job, then five in one defer_many, in turn).
PRODUCER_PAUSE = 0.02


@dataclass(frozen=True)
class Call:
    """One defer or defer_many call of the producer."""

    started: float  # time.monotonic()
    ended: float
    ns: tuple[int, ...]  # the payloads' n
    ids: tuple[int, ...] | None  # None: it raised (not acknowledged)
    error: str | None = None


class Producer(threading.Thread):
    """Defers ``deliver`` jobs until stopped, noting every call and whether it raised."""

    def __init__(
        self, task: cronbase.Task[Any, Any], first_n: int, *, pause: float = PRODUCER_PAUSE
    ) -> None:
        super().__init__(name="failover-producer", daemon=True)
        self.task = task
        self.pause = pause
        self.next_n = first_n
        self.calls: list[Call] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        single = True
        while not self.stopping.is_set():
            ns = (self.next_n,) if single else tuple(range(self.next_n, self.next_n + 5))
            self.next_n += len(ns)
            started = time.monotonic()
            try:
                if single:
                    ids: tuple[int, ...] = (self.task.defer(n=ns[0]),)
                else:
                    ids = tuple(self.task.defer_many([{"n": n} for n in ns]))
            except Exception as exc:
                line = (str(exc).strip().splitlines() or [""])[0]
                self.calls.append(
                    Call(started, time.monotonic(), ns, None, f"{type(exc).__name__}: {line}")
                )
            else:
                self.calls.append(Call(started, time.monotonic(), ns, ids))
            single = not single
            # Pacing (not a wait for a condition): a steady trickle of defers.
            self.stopping.wait(self.pause)

    def stop(self) -> None:
        self.stopping.set()
        if self.ident is not None:  # started
            self.join(30)
        assert not self.is_alive(), "the producer did not stop within 30 s"
