"""``current_job()``: what a running handler knows about its own job."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field

from .errors import CronbaseError
from .job import Payload

_current: ContextVar[JobContext] = ContextVar("cronbase_current_job")


@dataclass
class JobContext:
    """The job a handler is running: its id, attempt, and a way to report progress."""

    id: int
    task: str
    queue: str
    attempt: int
    max_attempts: int
    payload: Payload
    # Called (from any thread) when progress changes, so the worker can store it soon.
    _on_progress: Callable[[], None] = field(repr=False, default=lambda: None)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _progress: float | None = field(default=None, repr=False)
    _stage: str | None = field(default=None, repr=False)

    def set_progress(self, percent: float, stage: str | None = None) -> None:
        """Report progress (0 to 100) and optionally the stage; stored with the next heartbeat.

        >>> cronbase.current_job().set_progress(40, stage="rendering")  # doctest: +SKIP
        """
        if not 0 <= percent <= 100:
            raise ValueError(f"progress must be within 0..100, got {percent!r}")
        with self._lock:
            self._progress = float(percent)
            if stage is not None:
                self._stage = stage
        self._on_progress()

    @property
    def progress(self) -> tuple[float | None, str | None]:
        with self._lock:
            return self._progress, self._stage


def current_job() -> JobContext:
    """The job the calling handler is running; raises outside a handler."""
    try:
        return _current.get()
    except LookupError:
        raise CronbaseError("current_job() was called outside a running job") from None


def set_current(context: JobContext) -> None:
    _current.set(context)
