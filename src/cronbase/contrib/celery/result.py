"""``AsyncResult`` and ``GroupResult``: a job's Celery state, result and exception, read from
cronbase's jobs table; ``get()`` waits with ``app.jobs.wait`` (woken by NOTIFY).
"""

from __future__ import annotations

import builtins
import re
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ...context import running_job
from ...errors import JobNotFoundError
from ...job import Job, JobStatus
from . import states
from .exceptions import TaskRevokedError, TimeoutError
from .settings import warn

if TYPE_CHECKING:
    from ...app import App
    from .app import Celery

# A ParentFailed job's error names its parent: 'parent job 12 (task) is dead'.
_PARENT = re.compile(r"^parent job (\d+) ")
_MOST_PARENTS = 1000
# How often get() looks again for a job it cannot find yet (a task_id not deferred yet).
_LOOK_AGAIN = 0.5


class AsyncResult:
    """A job's result, as Celery's: ``.id``, ``.state``, ``.ready()``, ``.get(timeout=)``.

    ``id`` is the job's id as text, or the ``task_id=`` it was deferred with (its idempotency
    key). A job that is not there (not deferred yet, or pruned) is PENDING, as in Celery.

    >>> result = add.delay(2, 3)  # doctest: +SKIP
    >>> result.get(timeout=10)  # doctest: +SKIP
    5
    """

    def __init__(self, id: str | int, app: Celery | None = None) -> None:
        from .current import get_current

        if isinstance(id, bool) or not isinstance(id, str | int):
            raise TypeError(f"a result id is a job id or a task_id string, got {id!r}")
        self.id = str(id)
        self.app = app if app is not None else get_current()
        self._job_id: int | None = int(self.id) if self.id.isdigit() else None

    def __repr__(self) -> str:
        return f"<AsyncResult: {self.id}>"

    def __str__(self) -> str:
        return self.id

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AsyncResult):
            return self.id == other.id
        return isinstance(other, str) and other == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def _cronbase(self) -> App:
        return self.app.wrapped

    @property
    def job_id(self) -> int | None:
        """The cronbase job's id (None while a task_id names no job yet)."""
        if self._job_id is None:
            # A task_id is the job's idempotency key; the search also matches key prefixes and
            # dedupe keys, so keep the exact match.
            found = self._cronbase.jobs.search(search=self.id, limit=20)
            exact = [job.id for job in found if job.idempotency_key == self.id]
            self._job_id = exact[0] if exact else None
        return self._job_id

    def job(self) -> Job | None:
        """The cronbase job now (None when there is none)."""
        job_id = self.job_id
        if job_id is None:
            return None
        try:
            return self._cronbase.jobs.get(job_id)
        except JobNotFoundError:
            return None

    @property
    def state(self) -> str:
        """The Celery state (``states.BY_STATUS`` says how each job status reads). A job that
        never ran because a task before it in its workflow failed reads as that failure."""
        job = self.job()
        if job is None:
            return states.PENDING
        if job.status is JobStatus.RUNNING and not self._tracks_started(job):
            return states.PENDING
        root = self._failed_parent(job)
        if root is not None:
            return states.state_of(root.status)
        return states.state_of(job.status)

    def _tracks_started(self, job: Job) -> bool:
        task = self.app.tasks.get(job.task)
        return task is None or task.track_started or bool(self.app.conf.get("task_track_started"))

    def _failed_parent(self, job: Job) -> Job | None:
        """The failed job that cancelled this one (a workflow's parent, or its parent's...)."""
        if job.status is not JobStatus.CANCELLED or job.error_type != "ParentFailed":
            return None
        root = job
        for _ in range(_MOST_PARENTS):
            found = _PARENT.match(root.last_error or "")
            if found is None:
                break
            try:
                root = self._cronbase.jobs.get(int(found.group(1)))
            except JobNotFoundError:
                break
            if root.error_type != "ParentFailed":
                break
        warn(
            f"job {job.id} never ran: job {root.id} before it in its workflow is {root.status}; "
            "cronbase reports that failure for it, where Celery reports PENDING for a chain's "
            "later tasks (and FAILURE for a chord's body)",
            stacklevel=3,
        )
        return root

    status = state

    def ready(self) -> bool:
        """Whether the job is final: SUCCESS, FAILURE or REVOKED."""
        return self.state in states.READY_STATES

    def successful(self) -> bool:
        return self.state == states.SUCCESS

    def failed(self) -> bool:
        return self.state == states.FAILURE

    @property
    def result(self) -> Any:
        """The return value once SUCCESS; the exception when FAILURE, RETRY or REVOKED."""
        job = self.job()
        if job is None:
            return None
        root = self._failed_parent(job)
        return _outcome(job if root is None else root)

    info = result

    @property
    def traceback(self) -> str | None:
        """The traceback of the job's latest failed attempt (FAILURE, RETRY), else None."""
        job = self.job()
        if job is None or job.status not in (JobStatus.DEAD, JobStatus.FAILED):
            return None
        attempts = self._cronbase.jobs.attempts(job.id)
        return next((a.traceback for a in reversed(attempts) if a.traceback), None)

    @property
    def name(self) -> str | None:
        job = self.job()
        return None if job is None else job.task

    @property
    def date_done(self) -> datetime | None:
        job = self.job()
        return None if job is None else job.finished_at

    def get(
        self,
        timeout: float | None = None,
        propagate: bool = True,
        interval: float = 0.5,
        disable_sync_subtasks: bool = True,
        **ignored: Any,
    ) -> Any:
        """Wait until the job is final and return its result; with ``propagate``, raise its
        exception (FAILURE) or TaskRevokedError (REVOKED). TimeoutError after ``timeout``
        seconds (None: no limit)."""
        if disable_sync_subtasks and running_job() is not None:
            raise RuntimeError(
                "Never call result.get() within a task: it holds a worker slot while it waits; "
                "use a chain or a chord"
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        job_id = self.job_id
        while job_id is None:  # a task_id not deferred yet: Celery waits for it too
            _sleep_until(deadline, self)
            job_id = self.job_id
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            job = self._cronbase.jobs.wait(job_id, timeout=left)
        except builtins.TimeoutError:
            raise TimeoutError(f"job {self.id} is not ready after {timeout}s") from None
        if job.task in self.app.tasks and self.app.tasks[job.task].ignore_result:
            warn(
                f"task {job.task!r} has ignore_result=True: Celery's result would stay PENDING "
                "and get() would wait for ever; cronbase returns None once the job succeeded",
                stacklevel=2,
            )
        root = self._failed_parent(job)
        value = _outcome(job if root is None else root)
        if propagate and (root is not None or job.status is not JobStatus.SUCCEEDED):
            raise value
        return value

    wait = get

    def revoke(self, terminate: bool = False, signal: object = None, **ignored: Any) -> None:
        """Cancel the job (REVOKED). A running job's handler is not stopped: a sync one sees
        ``current_job().is_cancelled()``; what it writes after is fenced out."""
        if terminate:
            warn(
                "revoke(terminate=True): cronbase cancels the job; an async handler is "
                "cancelled, a sync one is not killed (current_job().is_cancelled() turns true)",
                stacklevel=2,
            )
        job_id = self.job_id
        if job_id is not None:
            self._cronbase.jobs.cancel(job_id)

    def forget(self) -> None:
        """Nothing is deleted: the result lives with its job until retention prunes it."""
        warn(
            "forget(): cronbase keeps the result with its job until retention prunes it",
            stacklevel=2,
        )


class GroupResult:
    """A group's results, in the group's order: ``.get()`` returns the list of their values."""

    def __init__(self, id: str, results: Sequence[AsyncResult]) -> None:
        self.id = id
        self.results = list(results)

    def __repr__(self) -> str:
        return f"<GroupResult: {self.id} [{', '.join(r.id for r in self.results)}]>"

    def __iter__(self) -> Iterator[AsyncResult]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, index: int) -> AsyncResult:
        return self.results[index]

    def ready(self) -> bool:
        return all(r.ready() for r in self.results)

    def successful(self) -> bool:
        return all(r.successful() for r in self.results)

    def failed(self) -> bool:
        return any(r.failed() for r in self.results)

    def waiting(self) -> bool:
        return not self.ready()

    def completed_count(self) -> int:
        return sum(r.successful() for r in self.results)

    def get(
        self, timeout: float | None = None, propagate: bool = True, **options: Any
    ) -> list[Any]:
        """Each member's ``get()``, within ``timeout`` seconds for them all."""
        deadline = None if timeout is None else time.monotonic() + timeout
        values = []
        for member in self.results:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            values.append(member.get(timeout=left, propagate=propagate, **options))
        return values

    join = get

    def revoke(self, terminate: bool = False, **ignored: Any) -> None:
        for member in self.results:
            member.revoke(terminate=terminate)


def _sleep_until(deadline: float | None, result: AsyncResult) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise TimeoutError(f"no job has task_id {result.id!r}")
    time.sleep(_LOOK_AGAIN)


def _outcome(job: Job) -> Any:
    """What Celery's ``result`` holds for a job in this status."""
    if job.status is JobStatus.SUCCEEDED:
        return job.result
    if job.status is JobStatus.CANCELLED:
        return TaskRevokedError(job.last_error or "revoked")
    if job.status in (JobStatus.DEAD, JobStatus.FAILED) and job.error_type:
        return rebuild(job.error_type, job.last_error)
    return None


_made: dict[str, type[Exception]] = {}


def rebuild(error_type: str, error: str | None) -> BaseException:
    """The exception a job's attempt raised, from its recorded type and message: the class
    itself when its module is loaded here (never imported for it), else a stand-in class of
    that name, as Celery's result backends do."""
    module, _, name = error_type.rpartition(".")
    text = error or ""
    if text.startswith(f"{name}: "):
        text = text[len(name) + 2 :]
    elif text == name:
        text = ""
    found = getattr(sys.modules.get(module or "builtins"), name, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        try:
            return found(text) if text else found()
        except Exception:  # an exception class with a constructor of its own
            pass
    if error_type not in _made:
        _made[error_type] = type(
            name or "Error", (Exception,), {"__module__": module or "builtins"}
        )
    return _made[error_type](text)
