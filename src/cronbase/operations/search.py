"""The views operators search (the dashboard's, the CLI's): jobs by status, queue, task, id,
key or text in the payload or error; the dead and failed jobs grouped by error; scheduled jobs;
long-running ones. ``app.jobs`` offers them (``search``, ``search_count``, ``search_ids``,
``error_groups``, ``scheduled``, ``long_running``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from ..job import Job, JobStatus

if TYPE_CHECKING:
    from ..db.database import Database


class JobPage(TypedDict, total=False):
    """A page of a job view, typed once for the views and ``app.jobs``; defaults:
    :func:`page_params` (no filter, 50 jobs, from the first)."""

    queue: str | None  # only this queue
    task: str | None  # only this task
    limit: int
    offset: int


class JobSearch(JobPage, total=False):
    """A page of :func:`search_jobs`: a :class:`JobPage` and what else it filters by."""

    status: JobStatus | str | None  # only jobs in this status
    search: str | None  # a job id, a key (or its start), or other text in the payload or error


# A search's text match reads the payloads and errors of at most this many of the newest jobs
# the other filters keep: an id or key match has its index, a text match has none.
TEXT_SCAN = 10_000
# The dead or failed jobs grouped by error: over at most this many of the newest.
GROUP_SCAN = 5_000
GROUPS_SHOWN = 100


@dataclass(frozen=True)
class ErrorGroup:
    """Jobs of one status alike in what went wrong: one task, one error class ("" when none
    was recorded), one first line of the last error (at most 200 characters)."""

    task: str
    error_type: str
    message: str
    count: int
    newest: datetime | None


@dataclass(frozen=True)
class ErrorGroups:
    """The groups (the biggest first) and how many jobs they cover: ``scanned`` equals
    ``scan`` when the bound was hit (older jobs of the status are not counted)."""

    groups: list[ErrorGroup]
    scanned: int
    scan: int

    @property
    def bounded(self) -> bool:
        return self.scanned >= self.scan

    def per_task(self) -> dict[str, int] | None:
        """How many of the scanned jobs each task has, summed over its groups; None when the
        groups returned (the biggest :data:`GROUPS_SHOWN`) leave some scanned jobs out, and so
        cannot give every task's count exactly (:func:`count_error_scan_by_task` can)."""
        if sum(g.count for g in self.groups) < self.scanned:
            return None
        counts: dict[str, int] = {}
        for group in self.groups:
            counts[group.task] = counts.get(group.task, 0) + group.count
        return counts


def _like_escaped(term: str) -> str:
    """LIKE's own wildcards (and its escape character) in ``term``, matched literally."""
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def page_params(
    *, queue: str | None = None, task: str | None = None, limit: int = 50, offset: int = 0
) -> dict[str, Any]:
    return {"queue": queue, "task": task, "limit": limit, "offset": offset}


def search_params(
    *, status: JobStatus | str | None = None, search: str | None = None, **page: Unpack[JobPage]
) -> dict[str, Any]:
    params = page_params(**page)
    term = (search or "").strip() or None
    params.update(
        status=JobStatus(status).value if status else None,
        queue=params["queue"] or None,
        task=params["task"] or None,
        search=term,
        # LIKE's own wildcards in a key or a text are matched literally.
        prefix=None if term is None else _like_escaped(term) + "%",
        # A whole number is a job id, matched exactly (as before text matching came): "42"
        # inside payloads and errors would bury job 42 under every job that mentions it.
        contains=None
        if term is None or (term.isascii() and term.isdigit())
        else "%" + _like_escaped(term) + "%",
        scan=TEXT_SCAN,
    )
    return params


def search_jobs(db: Database, **filters: Unpack[JobSearch]) -> list[Job]:
    """Newest first: filtered, and matching ``search`` as a job id or a key (or key prefix)."""
    params = search_params(**filters)
    return [Job.from_row(r) for r in db.fetch_all(db.queries.search_jobs, params)]


async def search_jobs_async(db: Database, **filters: Unpack[JobSearch]) -> list[Job]:
    params = search_params(**filters)
    return [Job.from_row(r) for r in await db.fetch_all_async(db.queries.search_jobs, params)]


def count_search_jobs(db: Database, **filters: Unpack[JobSearch]) -> int:
    """How many jobs :func:`search_jobs`' filters match, counting at most ``limit`` (the
    offset is ignored): a bounded count, no ids."""
    row = db.fetch_one(db.queries.count_search_jobs, search_params(**filters))
    return int(row["count"]) if row is not None else 0


async def count_search_jobs_async(db: Database, **filters: Unpack[JobSearch]) -> int:
    row = await db.fetch_one_async(db.queries.count_search_jobs, search_params(**filters))
    return int(row["count"]) if row is not None else 0


def search_job_ids(db: Database, **filters: Unpack[JobSearch]) -> list[int]:
    """The ids of :func:`search_jobs`' matches, newest first, at most ``limit`` (no offset)."""
    params = search_params(**filters)
    return [r["id"] for r in db.fetch_all(db.queries.search_job_ids, params)]


async def search_job_ids_async(db: Database, **filters: Unpack[JobSearch]) -> list[int]:
    params = search_params(**filters)
    return [r["id"] for r in await db.fetch_all_async(db.queries.search_job_ids, params)]


def _group_params(status: JobStatus | str, scan: int) -> dict[str, Any]:
    return {"status": JobStatus(status).value, "scan": scan, "limit": GROUPS_SHOWN}


def _groups(rows: list[dict[str, Any]], scan: int) -> ErrorGroups:
    groups = [
        ErrorGroup(r["task"], r["error_type"], r["message"], int(r["count"]), r["newest"])
        for r in rows
    ]
    return ErrorGroups(groups, int(rows[0]["scanned"]) if rows else 0, scan)


def error_groups(db: Database, status: JobStatus | str, scan: int = GROUP_SCAN) -> ErrorGroups:
    """The newest ``scan`` jobs of ``status`` grouped by task, error class and the first line
    of the last error, the biggest groups first (at most 100)."""
    rows = db.fetch_all(db.queries.error_groups, _group_params(status, scan))
    return _groups(rows, scan)


async def error_groups_async(
    db: Database, status: JobStatus | str, scan: int = GROUP_SCAN
) -> ErrorGroups:
    rows = await db.fetch_all_async(db.queries.error_groups, _group_params(status, scan))
    return _groups(rows, scan)


def count_error_scan_by_task(
    db: Database, status: JobStatus | str, scan: int = GROUP_SCAN
) -> dict[str, int]:
    """How many of :func:`error_groups`' scan (the newest ``scan`` jobs of ``status``) each
    task has, without the groups' limit."""
    params = _group_params(status, scan)
    return {
        r["task"]: int(r["count"])
        for r in db.fetch_all(db.queries.count_error_scan_by_task, params)
    }


async def count_error_scan_by_task_async(
    db: Database, status: JobStatus | str, scan: int = GROUP_SCAN
) -> dict[str, int]:
    rows = await db.fetch_all_async(
        db.queries.count_error_scan_by_task, _group_params(status, scan)
    )
    return {r["task"]: int(r["count"]) for r in rows}


def _group_ids_params(
    status: JobStatus | str, task: str, error_type: str, message: str, scan: int
) -> dict[str, Any]:
    params = _group_params(status, scan)
    params.update(task=task, error_type=error_type, message=message)
    return params


def error_group_ids(
    db: Database,
    status: JobStatus | str,
    task: str,
    error_type: str,
    message: str,
    scan: int = GROUP_SCAN,
) -> list[int]:
    """The ids of one group of :func:`error_groups` (the same scan), newest first."""
    params = _group_ids_params(status, task, error_type, message, scan)
    return [r["id"] for r in db.fetch_all(db.queries.error_group_ids, params)]


async def error_group_ids_async(
    db: Database,
    status: JobStatus | str,
    task: str,
    error_type: str,
    message: str,
    scan: int = GROUP_SCAN,
) -> list[int]:
    params = _group_ids_params(status, task, error_type, message, scan)
    return [r["id"] for r in await db.fetch_all_async(db.queries.error_group_ids, params)]


def scheduled_jobs(db: Database, **page: Unpack[JobPage]) -> list[Job]:
    """Queued jobs whose run_at is still ahead, soonest first (the Scheduled view)."""
    params = page_params(**page)
    return [Job.from_row(r) for r in db.fetch_all(db.queries.list_scheduled_jobs, params)]


async def scheduled_jobs_async(db: Database, **page: Unpack[JobPage]) -> list[Job]:
    rows = await db.fetch_all_async(db.queries.list_scheduled_jobs, page_params(**page))
    return [Job.from_row(r) for r in rows]


def long_running(
    db: Database, older_than: timedelta = timedelta(minutes=10), leases: int = 10, limit: int = 100
) -> list[Job]:
    """Running jobs started more than ``older_than`` ago or ``leases`` of their own leases ago
    (their lease renewed that many times), oldest first."""
    params = {"older_than": older_than, "leases": leases, "limit": limit}
    return [Job.from_row(r) for r in db.fetch_all(db.queries.list_long_running, params)]


async def long_running_async(
    db: Database, older_than: timedelta = timedelta(minutes=10), leases: int = 10, limit: int = 100
) -> list[Job]:
    params = {"older_than": older_than, "leases": leases, "limit": limit}
    rows = await db.fetch_all_async(db.queries.list_long_running, params)
    return [Job.from_row(r) for r in rows]
