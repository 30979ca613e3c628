"""How ``self.retry(countdown=...)`` sets the delay before the next attempt, and Celery's backoff.

cronbase retries a failed attempt after its task's retry policy's ``delay_after(attempt, exc)``.
A Celery task's policy is :class:`RetryDelay`: it reads the delay from the :class:`Retry` the
handler raised; any other failure (a timeout) waits ``default_retry_delay``.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from ...retry import Backoff
from .exceptions import Retry


class RetryDelay(Backoff):
    """The delay a :class:`Retry` carries (its ``when``: seconds, or an aware datetime), else
    ``fallback`` (the task's ``default_retry_delay``)."""

    def __init__(self, fallback: timedelta) -> None:
        # Backoff wants a positive base: a zero fallback is answered by delay() itself.
        super().__init__(base=max(fallback, timedelta(milliseconds=1)), factor=1.0, jitter=0.0)
        object.__setattr__(self, "fallback", fallback)

    def delay_after(self, attempt: int, exc: BaseException | None) -> timedelta:
        """The delay after failed attempt ``attempt``: the Retry's it raised, else the
        fallback."""
        if isinstance(exc, Retry) and exc.when is not None:
            return retry_delay(exc.when)
        return self.delay(attempt)

    def delay(self, attempt: int) -> timedelta:
        """The delay after a failure that is not a :class:`Retry`: the fallback."""
        fallback: timedelta = self.fallback  # type: ignore[attr-defined]
        return fallback


def retry_delay(when: float | datetime) -> timedelta:
    """A Retry's ``when`` as a delay from now (never below zero)."""
    if isinstance(when, datetime):
        return max(when - datetime.now(UTC), timedelta(0))
    return timedelta(seconds=max(float(when), 0.0))


def exponential_backoff(factor: int, retries: int, maximum: int, full_jitter: bool) -> int:
    """Celery's ``get_exponential_backoff_interval``: ``min(maximum, factor * 2**retries)``
    seconds, or with full jitter a whole number of seconds from 0 to that."""
    countdown = min(maximum, factor * (1 << retries))  # Celery's factor * 2**retries
    if full_jitter:
        countdown = random.randrange(countdown + 1)  # spreading retries, not secrets
    return max(0, countdown)
