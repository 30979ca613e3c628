"""``current_job()`` in inline mode: the worker's attempt (``worker/executor.py``) runs the handler,
and this is the context inline mode has it make instead of the worker's, because there is no
database: steps are kept on the :class:`InlineJob`, sleeps return at once, an event wait is
answered from the events emitted in the block, and ``transaction()`` says to use a database.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from ..context import JobContext
from ..errors import CronbaseError, WorkflowError
from ..workflow.durable import Durable, Suspend, check_seconds, check_wait, step_value

if TYPE_CHECKING:
    from ..worker.claim import ClaimedJob
    from .inline_store import InlineJob


class InlineDurable(Durable):
    """step / sleep / wait_for in inline mode: steps kept on the InlineJob (a retry skips the
    finished ones), sleeps return at once (no time passes in inline mode), wait_for returns an
    event emitted in the block or suspends the job until ``app.events.emit`` runs it again."""

    def __init__(self, context: JobContext, job: InlineJob, events: dict[str, Any]) -> None:
        self.context = context
        self.job = job
        self.events = events
        self.names = set()
        self.sleeps = 0

    def step(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Any) -> Any:
        self._claim_name(name)
        if name not in self.job.steps:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                if inspect.iscoroutine(value):
                    value.close()
                raise WorkflowError(f"step {name!r}: {fn!r} is async: use await step_async()")
            self.job.steps[name] = step_value(name, value)
        return self.job.steps[name]

    async def step_async(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Any
    ) -> Any:
        self._claim_name(name)
        if name not in self.job.steps:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
            self.job.steps[name] = step_value(name, value)
        return self.job.steps[name]

    def sleep(self, duration: timedelta | float) -> None:
        check_seconds("sleep()", duration)
        self.job.steps[self._sleep_name()] = None

    async def sleep_async(self, duration: timedelta | float) -> None:
        self.sleep(duration)

    def wait_for(self, key: str, timeout: timedelta | float | None) -> Any:
        check_wait(key, timeout)
        if key in self.events:
            return self.events[key]
        raise Suspend(None, waiting_for=key)

    async def wait_for_async(
        self,
        key: str,
        timeout: timedelta | float | None,  # noqa: ASYNC109  # as Durable's
    ) -> Any:
        return self.wait_for(key, timeout)


class InlineJobContext(JobContext):
    """``current_job()`` in inline mode: all of it works but what needs the database."""

    def transaction(self) -> NoReturn:
        raise self._no_database("transaction()")

    def transaction_async(self) -> NoReturn:
        raise self._no_database("transaction_async()")

    def _no_database(self, what: str) -> CronbaseError:
        return CronbaseError(
            f"job {self.id} (task {self.task!r}): {what} needs a database and inline mode has "
            "none; test this handler on a test database with cronbase.testing.drain(app) "
            "(the cronbase_app fixture gives one)"
        )


def inline_context(claimed: ClaimedJob, job: InlineJob, events: dict[str, Any]) -> JobContext:
    """The context of one inline attempt of ``job``: no lease, no database, its steps in
    memory."""
    context = InlineJobContext(
        id=claimed.id,
        task=claimed.task,
        queue=claimed.queue,
        attempt=claimed.attempt,
        max_attempts=claimed.max_attempts,
        payload=claimed.payload,
        metadata=claimed.metadata,
        task_version=claimed.task_version or 1,
    )
    context._durable = InlineDurable(context, job, events)
    return context
