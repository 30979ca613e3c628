"""The systems under pressure, one module each, behind one interface (:class:`Subject`).

Every subject runs the same offered load (``mix.py``) through its own API, with its own worker
set-up, retry mechanism and claim statement; the harness only starts its processes, reads its
reports and samples its tables. Registered by key, so a child process finds its subject again.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from ..processes import NodeSpec, PySpec

# key -> module; each module defines SUBJECT.
MODULES = {
    "cronbase": "cronbase_app",
    "raw": "raw_sql",
    "pgqueuer": "pgqueuer_app",
    "procrastinate": "procrastinate_app",
    "pgboss": "pgboss",
}


class Enqueuer(Protocol):
    """A producer's handle on its subject: one call defers ``payloads`` (one statement)."""

    def enqueue(self, payloads: list[dict[str, Any]], delay: float) -> None: ...

    def close(self) -> None: ...


class Prober(Protocol):
    """The probe's handle: :meth:`claim` runs the subject's claim statement once in a
    transaction it rolls back, and returns the statement's seconds."""

    def claim(self) -> float: ...

    def close(self) -> None: ...


class Subject(Protocol):
    key: str
    name: str
    schemas: tuple[str, ...]  # where its tables live (each database holds one subject)
    # Its hot tables by root name (partitions summed under it); None: every table of its
    # schemas (cronbase, whose storage is being rebuilt: whatever it has is measured).
    hot_tables: tuple[str, ...] | None
    setup_note: str  # its worker set-up, for the report

    def unavailable(self) -> str | None:
        """Why it cannot be measured here (a missing runtime), or None."""
        ...

    def setup(self, url: str) -> None: ...

    def preload(self, url: str, n: int) -> None:
        """``n`` immediate jobs of ``mix.PRELOAD_PRODUCER`` for a capacity drain, in one
        statement: the workers are already waiting, and the drain starts on all of them."""
        ...

    def workers(self, url: str, count: int) -> list[PySpec | NodeSpec]: ...

    def producers(
        self, url: str, schedules: list[list[tuple[float, float, int]]]
    ) -> list[PySpec | NodeSpec]:
        """A producer per schedule (``config.producer_schedule``)."""
        ...

    def prober(self, url: str) -> Prober: ...


def get(key: str) -> Subject:
    module = importlib.import_module(f"{__name__}.{MODULES[key]}")
    subject: Subject = module.SUBJECT
    return subject


def enqueuer(key: str, url: str) -> Enqueuer:
    """A Python subject's producer handle: its module's ``Enqueuer`` (pg-boss's producers are
    Node processes and have none)."""
    module = importlib.import_module(f"{__name__}.{MODULES[key]}")
    made: Enqueuer = module.Enqueuer(url)
    return made


def python_producers(
    key: str, url: str, schedules: list[list[tuple[float, float, int]]]
) -> list[PySpec | NodeSpec]:
    """The Python subjects' producers (``producer.py``), one per schedule."""
    from ..processes import GO
    from ..producer import producer_main

    return [
        PySpec(f"producer {i}", producer_main, (key, i, url, schedule, GO))
        for i, schedule in enumerate(schedules)
    ]


class PythonSubject:
    """What the Python subjects share: their workers run the module's ``worker_main``, their
    producers are ``producer.py``'s, their probe is the module's prober; a subclass names them."""

    key: ClassVar[str]
    worker_main: ClassVar[Callable[..., None]]  # (out, name, url), as a staticmethod
    prober_type: ClassVar[Callable[[str], Prober]]

    def unavailable(self) -> str | None:
        return None

    def workers(self, url: str, count: int) -> list[PySpec | NodeSpec]:
        main = type(self).worker_main
        return [PySpec(f"worker {i}", main, (f"worker {i}", url)) for i in range(count)]

    def producers(
        self, url: str, schedules: list[list[tuple[float, float, int]]]
    ) -> list[PySpec | NodeSpec]:
        return python_producers(self.key, url, schedules)

    def prober(self, url: str) -> Prober:
        return type(self).prober_type(url)
