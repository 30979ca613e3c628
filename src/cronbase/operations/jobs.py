"""``app.jobs``: what an operator (and code) does with jobs: look one up, list, wait for its
result, its attempts and workflow graph; retry, cancel, delete and requeue them (audited:
``audited.py``)."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Unpack

import psycopg

from ..errors import CronbaseError, InvalidValueError, JobNotFoundError, JobStateError
from ..job import GraphJob, Job, JobAttempt, JobGraph, JobStatus
from . import search as views
from .audited import Action, perform, perform_async
from .retention import count_prunable, prune
from .waiting import wait_job, wait_job_async

if TYPE_CHECKING:
    from ..db.database import Database, Row


def _graph(job_id: int, rows: builtins.list[dict[str, Any]]) -> JobGraph:
    if not rows:
        raise JobNotFoundError(job_id)
    mine = next((r for r in rows if r["id"] == job_id), rows[0])
    return JobGraph(
        workflow_id=mine["workflow_id"],
        jobs=[GraphJob.from_row(r) for r in rows],
        total=int(rows[0]["total"]),
    )


def _one_job(row: dict[str, Any] | None, job_id: int) -> Job:
    if row is None:
        raise JobNotFoundError(job_id)
    return Job.from_row(row)


def _state_error(action: str, job: Job) -> JobStateError:
    allowed = {
        "retry": "any state but running or pending",
        "cancel": "pending, queued, failed or running",
    }[action]
    return JobStateError(
        f"cannot {action} job {job.id}: it is {job.status.value} ({action} needs {allowed})"
    )


def _dedupe_held(job: Job) -> JobStateError:
    return JobStateError(
        f"cannot retry job {job.id}: another waiting or running job holds its dedupe_key "
        f"{job.dedupe_key!r}; cancel that job or wait for it to finish"
    )


JobList = list[Job]
AttemptList = list[JobAttempt]
RowList = list[dict[str, Any]]


@dataclass(frozen=True)
class Bulk:
    """What an action on many jobs did: the ids done, and why each other one was refused."""

    done: list[int]
    refused: dict[str, str]


def _first(rows: builtins.list[Row]) -> Row | None:
    return rows[0] if rows else None


def _done(job: Job) -> tuple[Job, dict[str, Any]]:
    """An action on one job, done: the job, and what its audit row keeps."""
    return job, {"task": job.task, "queue": job.queue, "attempts": job.attempts}


def _many(ids: Sequence[int]) -> str:
    return f"jobs:{len(ids)}"


def _scope(task: str | None, queue: str | None) -> str:
    """The target of an action on many jobs of a task, a queue, or all."""
    parts = [f"task:{task}" if task else "", f"queue:{queue}" if queue else ""]
    return ",".join(p for p in parts if p) or "jobs:all"


def _each(ids: Sequence[int], one: Callable[[int], Action[Job]]) -> Action[Bulk]:
    """``one`` action per job, each in its own savepoint: a refused job is stepped over."""
    done: builtins.list[int] = []
    refused: dict[str, str] = {}
    for job_id in ids:
        try:
            yield from one(job_id)
        except CronbaseError as exc:  # its state, or gone
            refused[str(job_id)] = str(exc)
        else:
            done.append(job_id)
    return Bulk(done, refused), {"job_ids": done, "refused": refused}


class Jobs:
    """Admin calls on jobs: ``app.jobs.get(id)``, ``.list()``, ``.retry(id)``, ``.cancel(id)``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def _list_params(
        self, status: JobStatus | str | None, queue: str | None, task: str | None, limit: int
    ) -> dict[str, Any]:
        if status is not None:
            try:
                status = JobStatus(status)
            except ValueError:
                known = ", ".join(s.value for s in JobStatus)
                raise InvalidValueError(f"unknown status {status!r}; one of: {known}") from None
        if limit < 1:
            raise InvalidValueError(f"limit must be at least 1, got {limit}")
        return {
            "status": status.value if status else None,
            "queue": queue,
            "task": task,
            "limit": limit,
        }

    def get(self, job_id: int) -> Job:
        rows = self.db.fetch_all(self.db.queries.get_job, {"id": job_id})
        return _one_job(rows[0] if rows else None, job_id)

    async def get_async(self, job_id: int) -> Job:
        rows = await self.db.fetch_all_async(self.db.queries.get_job, {"id": job_id})
        return _one_job(rows[0] if rows else None, job_id)

    def wait(self, job_id: int, timeout: float | timedelta | None = None) -> Job:
        """Block until the job is final (succeeded, dead or cancelled) and return it, with its
        ``result``; TimeoutError after ``timeout`` (seconds or a timedelta; None: no limit).
        Woken by NOTIFY, polling as a fallback (waiting.py)."""
        return wait_job(self.db, job_id, timeout)

    async def wait_async(
        self,
        job_id: int,
        timeout: float | timedelta | None = None,  # noqa: ASYNC109  # as wait()'s: the contract
    ) -> Job:
        """Async twin of :meth:`wait`."""
        return await wait_job_async(self.db, job_id, timeout)

    def list(
        self,
        status: JobStatus | str | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 100,
    ) -> JobList:
        """Newest first."""
        params = self._list_params(status, queue, task, limit)
        return [Job.from_row(r) for r in self.db.fetch_all(self.db.queries.list_jobs, params)]

    async def list_async(
        self,
        status: JobStatus | str | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 100,
    ) -> JobList:
        params = self._list_params(status, queue, task, limit)
        rows = await self.db.fetch_all_async(self.db.queries.list_jobs, params)
        return [Job.from_row(r) for r in rows]

    def attempts(self, job_id: int) -> AttemptList:
        """Every recorded attempt of a job, oldest first; JobNotFoundError, as every look-up by
        id, when there is no such job (a job not yet run has none: [])."""
        rows = self.db.fetch_all(self.db.queries.list_job_attempts, {"id": job_id})
        if not rows:
            self.get(job_id)  # no attempt, or no job: only the second is an error
        return [JobAttempt.from_row(r) for r in rows]

    async def attempts_async(self, job_id: int) -> AttemptList:
        rows = await self.db.fetch_all_async(self.db.queries.list_job_attempts, {"id": job_id})
        if not rows:
            await self.get_async(job_id)
        return [JobAttempt.from_row(r) for r in rows]

    def retry(self, job_id: int, *, actor: str | None = None) -> Job:
        """Run the job again now (any state but running or pending); returns it queued. A dead
        or cancelled job's dependents that its failure cancelled wait for it again. Audited as
        ``job.retry`` by ``actor`` (default ``api``), as every action here."""
        return perform(self.db, actor, "job.retry", f"job:{job_id}", self._retry(job_id))

    async def retry_async(self, job_id: int, *, actor: str | None = None) -> Job:
        return await perform_async(
            self.db, actor, "job.retry", f"job:{job_id}", self._retry(job_id)
        )

    def cancel(self, job_id: int, *, actor: str | None = None) -> Job:
        """Cancel a waiting or running job; a running attempt's result is then ignored."""
        return perform(self.db, actor, "job.cancel", f"job:{job_id}", self._cancel(job_id))

    async def cancel_async(self, job_id: int, *, actor: str | None = None) -> Job:
        return await perform_async(
            self.db, actor, "job.cancel", f"job:{job_id}", self._cancel(job_id)
        )

    def retry_many(self, ids: Sequence[int], *, actor: str | None = None) -> Bulk:
        """Retry each job; what was done and why each other one was refused (one audit row,
        ``jobs.bulk_retry``)."""
        return perform(self.db, actor, "jobs.bulk_retry", _many(ids), _each(ids, self._retry))

    async def retry_many_async(self, ids: Sequence[int], *, actor: str | None = None) -> Bulk:
        action = _each(ids, self._retry)
        return await perform_async(self.db, actor, "jobs.bulk_retry", _many(ids), action)

    def cancel_many(self, ids: Sequence[int], *, actor: str | None = None) -> Bulk:
        return perform(self.db, actor, "jobs.bulk_cancel", _many(ids), _each(ids, self._cancel))

    async def cancel_many_async(self, ids: Sequence[int], *, actor: str | None = None) -> Bulk:
        action = _each(ids, self._cancel)
        return await perform_async(self.db, actor, "jobs.bulk_cancel", _many(ids), action)

    def delete_many(self, ids: Sequence[int], *, actor: str | None = None) -> Bulk:
        """Delete finished jobs (succeeded, dead, cancelled) and their attempts; a waiting or
        running one is refused (cancel it first)."""
        return perform(self.db, actor, "jobs.bulk_delete", _many(ids), self._delete(ids))

    async def delete_many_async(self, ids: Sequence[int], *, actor: str | None = None) -> Bulk:
        action = self._delete(ids)
        return await perform_async(self.db, actor, "jobs.bulk_delete", _many(ids), action)

    def requeue_dead(
        self, *, task: str | None = None, queue: str | None = None, actor: str | None = None
    ) -> builtins.list[int]:
        """Run dead jobs (of a task, of a queue, or all) again now; returns their ids."""
        steps = self._requeue_dead(task, queue)
        return perform(self.db, actor, "dead.requeue", _scope(task, queue), steps)

    async def requeue_dead_async(
        self, *, task: str | None = None, queue: str | None = None, actor: str | None = None
    ) -> builtins.list[int]:
        steps = self._requeue_dead(task, queue)
        return await perform_async(self.db, actor, "dead.requeue", _scope(task, queue), steps)

    def prune(
        self, older_than: timedelta, statuses: Sequence[str], *, actor: str | None = None
    ) -> int:
        """Delete finished jobs of ``statuses`` (succeeded, cancelled, dead) that ended more than
        ``older_than`` ago, and their attempts; how many. Audited as ``jobs.prune``."""
        return prune(self.db, older_than, list(statuses), actor=actor)

    def count_prunable(self, older_than: timedelta, statuses: Sequence[str]) -> dict[str, int]:
        """What :meth:`prune` would delete, by status (nothing is deleted)."""
        return count_prunable(self.db, older_than, list(statuses))

    def search(self, **filters: Unpack[views.JobSearch]) -> JobList:
        """Newest first: filtered, and matching ``search`` as a job id or a key (or prefix), or
        as text in the payload or last error of the newest 10,000 jobs of the other filters
        (``filters``: :class:`~cronbase.operations.search.JobSearch`)."""
        return views.search_jobs(self.db, **filters)

    async def search_async(self, **filters: Unpack[views.JobSearch]) -> JobList:
        return await views.search_jobs_async(self.db, **filters)

    def search_count(self, **filters: Unpack[views.JobSearch]) -> int:
        """How many jobs :meth:`search`'s filters match, counting at most ``limit`` (``offset``
        is ignored): a list's "N jobs match" without reading their ids."""
        return views.count_search_jobs(self.db, **filters)

    async def search_count_async(self, **filters: Unpack[views.JobSearch]) -> int:
        """Async twin of :meth:`search_count`."""
        return await views.count_search_jobs_async(self.db, **filters)

    def search_ids(self, **filters: Unpack[views.JobSearch]) -> builtins.list[int]:
        """The ids of :meth:`search`'s matches, newest first, at most ``limit`` (``offset`` is
        ignored): what "every job this filter matches" acts on."""
        return views.search_job_ids(self.db, **filters)

    async def search_ids_async(self, **filters: Unpack[views.JobSearch]) -> builtins.list[int]:
        """Async twin of :meth:`search_ids`."""
        return await views.search_job_ids_async(self.db, **filters)

    def error_groups(
        self, status: JobStatus | str = JobStatus.DEAD, scan: int = views.GROUP_SCAN
    ) -> views.ErrorGroups:
        """The newest ``scan`` jobs of ``status`` (dead, or failed and waiting to retry) grouped
        by task, error class and the first line of the last error, the biggest groups first."""
        return views.error_groups(self.db, status, scan)

    async def error_groups_async(
        self, status: JobStatus | str = JobStatus.DEAD, scan: int = views.GROUP_SCAN
    ) -> views.ErrorGroups:
        """Async twin of :meth:`error_groups`."""
        return await views.error_groups_async(self.db, status, scan)

    def error_counts_by_task(
        self, status: JobStatus | str = JobStatus.DEAD, scan: int = views.GROUP_SCAN
    ) -> dict[str, int]:
        """How many of :meth:`error_groups`' jobs (the same scan) each task has, however many
        groups there are (:meth:`~cronbase.operations.search.ErrorGroups.per_task` gives it when
        all the groups came back)."""
        return views.count_error_scan_by_task(self.db, status, scan)

    async def error_counts_by_task_async(
        self, status: JobStatus | str = JobStatus.DEAD, scan: int = views.GROUP_SCAN
    ) -> dict[str, int]:
        """Async twin of :meth:`error_counts_by_task`."""
        return await views.count_error_scan_by_task_async(self.db, status, scan)

    def error_group_ids(
        self, status: JobStatus | str, task: str, error_type: str, message: str
    ) -> builtins.list[int]:
        """The ids of one group of :meth:`error_groups` (its ``task``, ``error_type`` and
        ``message``, over the same scan), newest first: to retry or delete them together."""
        return views.error_group_ids(self.db, status, task, error_type, message)

    async def error_group_ids_async(
        self, status: JobStatus | str, task: str, error_type: str, message: str
    ) -> builtins.list[int]:
        """Async twin of :meth:`error_group_ids`."""
        return await views.error_group_ids_async(self.db, status, task, error_type, message)

    def scheduled(self, **page: Unpack[views.JobPage]) -> JobList:
        """Queued jobs whose run_at is still ahead, soonest first."""
        return views.scheduled_jobs(self.db, **page)

    async def scheduled_async(self, **page: Unpack[views.JobPage]) -> JobList:
        return await views.scheduled_jobs_async(self.db, **page)

    def long_running(
        self, older_than: timedelta = timedelta(minutes=10), leases: int = 10, limit: int = 100
    ) -> JobList:
        """Running jobs started more than ``older_than`` ago or ``leases`` of their own leases
        ago, oldest first."""
        return views.long_running(self.db, older_than, leases, limit)

    async def long_running_async(
        self, older_than: timedelta = timedelta(minutes=10), leases: int = 10, limit: int = 100
    ) -> JobList:
        return await views.long_running_async(self.db, older_than, leases, limit)

    # -- the actions (audited.py runs them) ----------------------------------------------------

    def _retry(self, job_id: int) -> Action[Job]:
        q = self.db.queries
        try:
            rows = yield q.retry_job, {"id": job_id, "channel": self.db.channel}
        except psycopg.errors.UniqueViolation:
            # Only the dedupe index can clash: the key was taken while this job was finished.
            job = _one_job(_first((yield q.get_job, {"id": job_id})), job_id)
            if job.dedupe_key is None:
                raise
            raise _dedupe_held(job) from None
        if not rows:
            raise _state_error("retry", _one_job(_first((yield q.get_job, {"id": job_id})), job_id))
        return _done(Job.from_row(rows[0]))

    def _cancel(self, job_id: int) -> Action[Job]:
        q = self.db.queries
        rows = yield q.cancel_job, {"id": job_id, "channel": self.db.channel}
        if not rows:
            raise _state_error(
                "cancel", _one_job(_first((yield q.get_job, {"id": job_id})), job_id)
            )
        return _done(Job.from_row(rows[0]))

    def _delete(self, ids: Sequence[int]) -> Action[Bulk]:
        rows = yield self.db.queries.delete_finished_jobs, {"ids": list(ids)}
        gone = sorted(r["id"] for r in rows)
        why = "not found, or not finished (succeeded, dead or cancelled): cancel it first"
        refused = {str(i): why for i in ids if i not in set(gone)}
        return Bulk(gone, refused), {"job_ids": gone, "refused": refused}

    def _requeue_dead(self, task: str | None, queue: str | None) -> Action[builtins.list[int]]:
        params = {"task": task, "queue": queue, "channel": self.db.channel}
        ids = [r["id"] for r in (yield self.db.queries.requeue_dead_jobs, params)]
        return ids, {"count": len(ids), "job_ids": ids[:100]}

    def graph(self, job_id: int, limit: int = 1000) -> JobGraph:
        """The workflow ``job_id`` belongs to (a job outside one: it, its parents and children),
        at most ``limit`` jobs."""
        rows = self.db.fetch_all(self.db.queries.job_graph, {"id": job_id, "limit": limit})
        return _graph(job_id, rows)

    async def graph_async(self, job_id: int, limit: int = 1000) -> JobGraph:
        rows = await self.db.fetch_all_async(
            self.db.queries.job_graph, {"id": job_id, "limit": limit}
        )
        return _graph(job_id, rows)

    def counts(self) -> builtins.list[tuple[str, JobStatus, int]]:
        """(queue, status, count) for every queue and status present."""
        rows = self.db.fetch_all(self.db.queries.count_jobs_by_status, {})
        return [(r["queue"], JobStatus(r["status"]), int(r["count"])) for r in rows]
