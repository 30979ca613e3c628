"""The offered load: which calls defer which kind of job, and what each job carries.

Each producer call defers a few jobs of one kind (one statement, one set of options):
80% of calls immediate, 10% scheduled 5-30 s ahead, 10% jobs that fail their first attempt and
are retried by the subject's own mechanism (~1 s backoff). The kind follows the call number, so
every run offers the same mix in the same order. A job's payload is ``{"p": producer, "n":
sequence, "t": due time (epoch seconds), "f": 1 when its first attempt must fail}``; its ident
is ``p << ID_SHIFT | n``.

What a handler reports per attempt (``Code``): its first attempt, which succeeds or raises
(retry jobs), or a later attempt (the retry), which succeeds. Pickup is measured on first
attempts only, from the job's due time.
"""

from __future__ import annotations

import time
from enum import IntEnum
from typing import Any

from .config import segment_at

ID_SHIFT = 40
PRELOAD_PRODUCER = 7  # the producer number of the capacity drains' pre-loaded jobs
RETRY_DELAY = 1.0  # seconds: every subject's retry backoff for the first failure


class Kind(IntEnum):
    IMMEDIATE = 0
    SCHEDULED = 1
    RETRY = 2


class Code(IntEnum):
    """One attempt as a handler reports it."""

    FIRST_OK = 0  # a first attempt that succeeds
    FIRST_FAILS = 1  # a retry job's first attempt: it raises
    RETRY_OK = 2  # a later attempt: it succeeds


class FlakyJobError(Exception):
    """What a retry job raises on its first attempt."""


def call_kind(call: int) -> Kind:
    """The kind of a producer's ``call``-th call: 1 in 10 scheduled, 1 in 10 retry."""
    r = call % 10
    if r == 3:
        return Kind.SCHEDULED
    if r == 7:
        return Kind.RETRY
    return Kind.IMMEDIATE


def delay_of(call: int) -> float:
    """Seconds ahead a call's jobs are scheduled: 5-30, spread over successive scheduled calls."""
    if call_kind(call) is not Kind.SCHEDULED:
        return 0.0
    return float(5 + (call // 10 * 7) % 26)


def payloads(producer: int, first: int, count: int, due: float, kind: Kind) -> list[dict[str, Any]]:
    fail = int(kind is Kind.RETRY)
    return [{"p": producer, "n": first + i, "t": due, "f": fail} for i in range(count)]


def ident(payload: dict[str, Any]) -> int:
    return (int(payload["p"]) << ID_SHIFT) | int(payload["n"])


def code_of(payload: dict[str, Any], is_first: bool) -> Code:
    if not is_first:
        return Code.RETRY_OK
    return Code.FIRST_FAILS if payload.get("f") else Code.FIRST_OK


class Pacer:
    """Call times without drift for a ``[(from_second, jobs/s, jobs per call)]`` schedule
    (``config.producer_schedule``). When the caller falls more than a second behind (the
    database slower than the rate), the schedule restarts from now rather than burst to catch
    up: the shortfall shows as enqueued/s under offered/s."""

    def __init__(self, schedule: list[tuple[float, float, int]]) -> None:
        self.schedule = schedule
        self.start = time.monotonic()
        self.due = self.start

    @property
    def batch(self) -> int:
        """Jobs in the next call."""
        return int(segment_at(self.schedule, self.due - self.start)[2])

    def wait(self) -> float:
        """Seconds until the next call (0 when due); catches up as described above."""
        now = time.monotonic()
        if now - self.due > 1.0:
            self.due = now
        return max(0.0, self.due - now)

    def called(self, jobs: int) -> None:
        rate = segment_at(self.schedule, self.due - self.start)[1]
        self.due += jobs / rate if rate > 0 else 1.0
