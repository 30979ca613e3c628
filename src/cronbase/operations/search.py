"""The views operators search (the dashboard's, the CLI's): jobs by status, queue, task, id or
key; scheduled jobs; long-running ones. ``app.jobs`` offers them (``search``, ``scheduled``,
``long_running``)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..job import Job, JobStatus

if TYPE_CHECKING:
    from ..db.database import Database


def _search_params(
    status: JobStatus | str | None,
    queue: str | None,
    task: str | None,
    search: str | None,
    limit: int,
    offset: int,
) -> dict[str, Any]:
    term = (search or "").strip() or None
    return {
        "status": JobStatus(status).value if status else None,
        "queue": queue or None,
        "task": task or None,
        "search": term,
        # LIKE's own wildcards in a key are matched literally.
        "prefix": None
        if term is None
        else term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",
        "limit": limit,
        "offset": offset,
    }


def search_jobs(
    db: Database,
    *,
    status: JobStatus | str | None = None,
    queue: str | None = None,
    task: str | None = None,
    search: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> list[Job]:
    """Newest first: filtered, and matching ``search`` as a job id or a key (or key prefix)."""
    params = _search_params(status, queue, task, search, limit, offset)
    return [Job.from_row(r) for r in db.fetch_all(db.queries.search_jobs, params)]


async def search_jobs_async(
    db: Database,
    *,
    status: JobStatus | str | None = None,
    queue: str | None = None,
    task: str | None = None,
    search: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> list[Job]:
    params = _search_params(status, queue, task, search, limit, offset)
    return [Job.from_row(r) for r in await db.fetch_all_async(db.queries.search_jobs, params)]


def _scheduled_params(
    queue: str | None, task: str | None, limit: int, offset: int
) -> dict[str, Any]:
    return {"queue": queue, "task": task, "limit": limit, "offset": offset}


def scheduled_jobs(
    db: Database,
    *,
    queue: str | None = None,
    task: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> list[Job]:
    """Queued jobs whose run_at is still ahead, soonest first (the Scheduled view)."""
    params = _scheduled_params(queue, task, limit, offset)
    return [Job.from_row(r) for r in db.fetch_all(db.queries.list_scheduled_jobs, params)]


async def scheduled_jobs_async(
    db: Database,
    *,
    queue: str | None = None,
    task: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> list[Job]:
    params = _scheduled_params(queue, task, limit, offset)
    rows = await db.fetch_all_async(db.queries.list_scheduled_jobs, params)
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
