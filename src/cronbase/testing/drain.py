"""``drain(app)``: run every job that is due on the App's (test) database in this process, with a
burst worker, and say how each attempt ended."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:
    from ..app import App
    from ..context import JobContext
    from ..job import Payload
    from ..task import Task


@dataclass(frozen=True)
class DrainedJob:
    """One attempt a drain ran. ``outcome``: 'succeeded', 'failed' (will be retried), 'dead',
    'released' or 'lost', as the ``on_job_end`` hooks see it."""

    id: int
    task: str
    payload: Payload
    outcome: str
    attempt: int
    error: BaseException | None
    duration: timedelta


class Drained(list[DrainedJob]):
    """The attempts a drain ran, in the order they ended."""

    def of(self, task: Task[Any, Any] | str) -> Drained:
        """The attempts of one task (a Task or its name)."""
        name = task if isinstance(task, str) else task.name
        return Drained(job for job in self if job.task == name)

    def assert_all_succeeded(self) -> Drained:
        """Fail, listing each attempt that did not succeed with its error, unless all did."""
        __tracebackhide__ = True  # failures point at the test's line
        bad = [job for job in self if job.outcome != "succeeded"]
        if bad:
            lines = [
                f"  job {job.id} {job.task} {job.payload!r} attempt {job.attempt}: "
                f"{job.outcome} ({type(job.error).__name__}: {job.error})"
                for job in bad
            ]
            raise AssertionError(
                f"{len(bad)} of {len(self)} drained attempts did not succeed:\n" + "\n".join(lines)
            )
        return self


def drain(app: App, *, queues: list[str] | None = None) -> Drained:
    """Run every job that is due (of ``queues``; None: all) until none is, and return how each
    attempt ended. Jobs the handlers defer that are due at once run too.

    ```pycon
    >>> cronbase.testing.drain(app)  # doctest: +SKIP
    [DrainedJob(id=1, task='send_invoice', payload={'invoice_id': 812}, outcome='succeeded', ...)]
    ```

    A failed job is due again only after its backoff, so retries with a backoff stay waiting
    (``failed``) for a later drain; with a backoff of a millisecond
    (``retry=cronbase.Backoff(base=timedelta(milliseconds=1))``) the next attempt runs in this
    drain or, at the latest, the next one.
    Scheduled jobs are not fired. Sync only outside an event loop: use :func:`drain_async` in
    async tests.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(drain_async(app, queues=queues))
    raise UsageError(
        "drain() was called with an event loop running in this thread; "
        "use `await cronbase.testing.drain_async(app)` in async code"
    )


async def drain_async(app: App, *, queues: list[str] | None = None) -> Drained:
    """The async twin of :func:`drain`."""
    worker = app.worker(
        queues=queues,
        burst=True,
        install_signal_handlers=False,
        schedule=False,
        retention=None,
        concurrency=1,
    )
    drained = Drained()

    def record(
        job: JobContext, outcome: str, error: BaseException | None, duration: timedelta
    ) -> None:
        # Only this worker's attempts: another worker of the same App may run in the process.
        if job.worker_id == worker.id:
            drained.append(
                DrainedJob(job.id, job.task, job.payload, outcome, job.attempt, error, duration)
            )

    app.hooks.job_end.append(record)
    try:
        await worker.run()
    finally:
        app.hooks.job_end.remove(record)
    return drained
