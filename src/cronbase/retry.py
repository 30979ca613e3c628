"""Retry policies: pure functions of the attempt number to the delay before the next attempt."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import timedelta

from .durations import DurationLike, duration


@dataclass(frozen=True, init=False)
class Backoff:
    """Exponential backoff with a cap and proportional jitter.

    The n-th retry waits ``min(cap, base * factor**(n-1))``, then moves by up to ``jitter`` of
    that either way, so a burst of failures does not come back in lockstep. ``base`` and
    ``cap`` are timedeltas or seconds.

    ```pycon
    >>> Backoff(base=timedelta(seconds=10), jitter=0).delay(3)
    datetime.timedelta(seconds=40)
    ```
    """

    base: timedelta = timedelta(seconds=5)
    cap: timedelta = timedelta(hours=1)
    factor: float = 2.0
    jitter: float = 0.2
    _random: random.Random = field(default_factory=random.Random, repr=False, compare=False)

    def __init__(
        self,
        base: DurationLike = timedelta(seconds=5),
        cap: DurationLike = timedelta(hours=1),
        factor: float = 2.0,
        jitter: float = 0.2,
        _random: random.Random | None = None,
    ) -> None:
        # Frozen: set once, here; base and cap as timedeltas (they may be given in seconds).
        object.__setattr__(self, "base", duration("Backoff base", base, signed=True))
        object.__setattr__(self, "cap", duration("Backoff cap", cap, signed=True))
        object.__setattr__(self, "factor", factor)
        object.__setattr__(self, "jitter", jitter)
        object.__setattr__(self, "_random", _random if _random is not None else random.Random())
        self.__post_init__()

    def __post_init__(self) -> None:
        if self.base <= timedelta(0):
            raise ValueError(f"Backoff base must be positive, got {self.base!r}")
        if self.cap < self.base:
            raise ValueError(f"Backoff cap {self.cap!r} is below its base {self.base!r}")
        if not self.factor >= 1:  # also refuses NaN
            raise ValueError(f"Backoff factor must be at least 1, got {self.factor!r}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"Backoff jitter must be within 0..1, got {self.jitter!r}")

    def bounds(self, attempt: int) -> tuple[timedelta, timedelta]:
        """The least and greatest delay after failed attempt number ``attempt`` (1-based)."""
        if attempt < 1:
            raise ValueError(f"attempt numbers start at 1, got {attempt}")
        cap = self.cap.total_seconds()
        try:
            # float(): an int factor would build a huge exact int for a big attempt number.
            growth = float(self.factor) ** (attempt - 1)
        except OverflowError:  # far past the cap
            growth = math.inf
        raw = min(cap, self.base.total_seconds() * growth)
        return (
            timedelta(seconds=raw * (1 - self.jitter)),
            timedelta(seconds=min(cap, raw * (1 + self.jitter))),
        )

    def delay_after(self, attempt: int, exc: BaseException | None) -> timedelta:
        """The delay before retrying after failed attempt ``attempt``, which raised ``exc``
        (None when the worker cannot tell: a child process's failure). The worker asks this;
        it is :meth:`delay`, and a subclass may read the exception (cronbase.contrib.celery's
        ``self.retry(countdown=...)`` carries its own delay)."""
        return self.delay(attempt)

    def delay(self, attempt: int) -> timedelta:
        """The delay before retrying after failed attempt number ``attempt`` (1-based)."""
        low, high = self.bounds(attempt)
        if low == high:
            return low
        return timedelta(seconds=self._random.uniform(low.total_seconds(), high.total_seconds()))
