"""The views operators search (the dashboard's, the CLI's): jobs by status, queue, task, id or
key; scheduled jobs; long-running ones. ``app.jobs`` offers them (``search``, ``scheduled``,
``long_running``)."""

from __future__ import annotations

from datetime import timedelta
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
    search: str | None  # a job id, or a key (or the start of one)


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
        # LIKE's own wildcards in a key are matched literally.
        prefix=None
        if term is None
        else term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",
    )
    return params


def search_jobs(db: Database, **filters: Unpack[JobSearch]) -> list[Job]:
    """Newest first: filtered, and matching ``search`` as a job id or a key (or key prefix)."""
    params = search_params(**filters)
    return [Job.from_row(r) for r in db.fetch_all(db.queries.search_jobs, params)]


async def search_jobs_async(db: Database, **filters: Unpack[JobSearch]) -> list[Job]:
    params = search_params(**filters)
    return [Job.from_row(r) for r in await db.fetch_all_async(db.queries.search_jobs, params)]


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
