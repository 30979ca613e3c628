"""The dashboard's pages (GET): overview, job lists, a job, dead and long-running jobs,
schedules, effects, the audit log, and the Prometheus metrics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..app import App
from ..effects import STATUSES as EFFECT_STATUSES
from ..errors import JobNotFoundError
from ..job import GRAPH_LIMIT, JobStatus
from ..operations.metrics import database_metrics_async
from ..operations.stats import WINDOWS
from . import filters
from .charts import throughput_svg
from .inputs import BIGINT_MAX, search_term, whole_number
from .render import Renderer

LIST_LIMIT = 200  # rows on the effects and audit pages
PAGE_MAX = 1_000_000
# "Select all jobs matching this filter" acts on at most this many (the page counts one more, to
# say "more than", and reads no ids: actions.py finds them when the operator acts): a retry is a
# statement per job, in one transaction.
SELECT_ALL_MAX = 10_000
# The statuses whose jobs the list groups by error (what an operator retries or clears).
GROUPED = (JobStatus.DEAD, JobStatus.FAILED)


# The busiest fair keys the overview shows (backlog and share; `cronbase queues fair` lists more).
FAIR_KEYS_SHOWN = 10


def _status(request: Request) -> JobStatus | None:
    return status_of(request.query_params.get("status"))


def status_of(value: str | None) -> JobStatus | None:
    """A job status from a query or form field; None when empty, a 400 when unknown."""
    if not value:
        return None
    try:
        return JobStatus(value)
    except ValueError:
        known = ", ".join(s.value for s in JobStatus)
        raise HTTPException(400, f"unknown status {value!r}; one of: {known}") from None


def job_id_of(request: Request) -> int:
    job_id: int = request.path_params["job_id"]
    if job_id > BIGINT_MAX:  # the database would refuse to compare it
        raise HTTPException(404, f"no job with id {job_id}")
    return job_id


def _page(request: Request) -> int:
    return whole_number("page", request.query_params.get("page") or "1", 1, PAGE_MAX)


class Pages:
    def __init__(
        self, app: App, renderer: Renderer, *, long_running_after: timedelta, page_size: int
    ) -> None:
        self.app = app
        self.renderer = renderer
        self.long_running_after = long_running_after
        self.page_size = page_size

    async def overview(self, request: Request) -> Response:
        stats = await self.app.stats_async()
        fair_keys = await self.app.queues.fair_keys_async(limit=FAIR_KEYS_SHOWN)
        minutes = stats.minutes
        hour_ok = sum(m.succeeded for m in minutes)
        hour_failed = sum(m.failed for m in minutes)
        context = {
            "section": "overview",
            "stats": stats,
            "totals": stats.totals(),
            "statuses": list(JobStatus),
            "chart": throughput_svg(minutes),
            "hour_ok": hour_ok,
            "hour_failed": hour_failed,
            "per_minute_ok": hour_ok / 60,
            "per_minute_failed": hour_failed / 60,
            "last_minute": minutes[-1] if minutes else None,
            "fair_keys": fair_keys,
            "fair_running": sum(k.running for k in fair_keys),
        }
        return self.renderer.page(request, "overview.html", context)

    async def _job_list(
        self, request: Request, *, section: str, status: JobStatus | None
    ) -> dict[str, Any]:
        params = request.query_params
        queue = params.get("queue") or None
        task = params.get("task") or None
        search = search_term(params.get("q"))
        page = _page(request)
        found = await self.app.jobs.search_async(
            status=status,
            queue=queue,
            task=task,
            search=search,
            limit=self.page_size + 1,  # one more, to know whether there is a next page
            offset=(page - 1) * self.page_size,
        )
        matching = await self.app.jobs.search_count_async(
            status=status, queue=queue, task=task, search=search, limit=SELECT_ALL_MAX + 1
        )
        groups = await self.app.jobs.error_groups_async(status) if status in GROUPED else None
        queues = await self.app.queues.list_async()
        return {
            "matching": matching,
            "select_all_max": SELECT_ALL_MAX,
            "groups": groups,
            "section": section,
            "jobs": found[: self.page_size],
            "has_next": len(found) > self.page_size,
            "page": page,
            "first_row": (page - 1) * self.page_size + 1,
            "filters": {
                "status": status.value if status else "",
                "queue": queue or "",
                "task": task or "",
                "q": search or "",
            },
            "statuses": list(JobStatus),
            "now": datetime.now(UTC),
            "queue_names": [q.name for q in queues],
            "task_names": sorted(self.app.tasks),
        }

    async def jobs(self, request: Request) -> Response:
        context = await self._job_list(request, section="jobs", status=_status(request))
        return self.renderer.page(request, "jobs.html", {**context, "list_route": "jobs"})

    async def dead(self, request: Request) -> Response:
        context = await self._job_list(request, section="dead", status=JobStatus.DEAD)
        groups = context["groups"]
        # The per-task counts come from the error groups the list read already (task, error
        # class, first line; the same newest 5,000 dead jobs): a task's count is the sum of its
        # groups, exact while every group came back. Only when the scan has more groups than
        # error_groups returns (100) does a count by task over the same scan run, since the
        # groups left out would be missing from some task's sum.
        per_task = groups.per_task()
        if per_task is None:
            per_task = await self.app.jobs.error_counts_by_task_async(JobStatus.DEAD, groups.scan)
        context.update(
            list_route="dead",
            dead_tasks=sorted(per_task.items()),
            dead_scan_full=groups.bounded,
            dead_scan_limit=groups.scan,
        )
        return self.renderer.page(request, "jobs.html", context)

    async def job(self, request: Request) -> Response:
        context = await self._job(request)
        return self.renderer.page(request, "job.html", context)

    async def job_live(self, request: Request) -> Response:
        """What changes on a job's page while it runs, without the payload (which does not):
        the page asks for this every 2 seconds until the job is finished."""
        context = await self._job(request)
        return self.renderer.page(request, "job_live.html", context)

    async def _job(self, request: Request) -> dict[str, Any]:
        job_id = job_id_of(request)
        try:
            job = await self.app.jobs.get_async(job_id)
        except JobNotFoundError as exc:
            raise HTTPException(404, str(exc)) from None
        attempts = await self.app.jobs.attempts_async(job_id)
        shown = []
        for attempt in reversed(attempts):  # newest first: the one an operator came for
            traceback, trimmed = filters.trim_traceback(attempt.traceback)
            took = (
                attempt.finished_at - attempt.started_at if attempt.started_at is not None else None
            )
            shown.append(
                {
                    "attempt": attempt,
                    "took": took,
                    "traceback": traceback,
                    "trimmed": trimmed,
                }
            )
        graph = await self.app.jobs.graph_async(job_id, limit=GRAPH_LIMIT)
        return {
            "section": "jobs",
            "job": job,
            "attempts": shown,
            "can_retry": job.status not in (JobStatus.RUNNING, JobStatus.PENDING),
            "can_cancel": job.status
            in (JobStatus.PENDING, JobStatus.QUEUED, JobStatus.FAILED, JobStatus.RUNNING),
            "now": datetime.now(UTC),
            "graph": graph if graph.total > 1 else None,
        }

    async def tasks(self, request: Request) -> Response:
        window = request.query_params.get("window") or "1h"
        if window not in WINDOWS:
            raise HTTPException(400, f"window must be one of {', '.join(WINDOWS)}, got {window!r}")
        found = await self.app.task_stats_async(WINDOWS[window])
        context = {
            "section": "tasks",
            "tasks": found,
            "window": window,
            "windows": list(WINDOWS),
        }
        return self.renderer.page(request, "tasks.html", context)

    async def scheduled(self, request: Request) -> Response:
        params = request.query_params
        queue = params.get("queue") or None
        task = params.get("task") or None
        page = _page(request)
        found = await self.app.jobs.scheduled_async(
            queue=queue,
            task=task,
            limit=self.page_size + 1,
            offset=(page - 1) * self.page_size,
        )
        context = {
            "section": "scheduled",
            "jobs": found[: self.page_size],
            "has_next": len(found) > self.page_size,
            "page": page,
            "filters": {"queue": queue or "", "task": task or ""},
            "now": datetime.now(UTC),
        }
        return self.renderer.page(request, "scheduled.html", context)

    async def workers(self, request: Request) -> Response:
        found = await self.app.workers_async()
        context = {
            "section": "workers",
            "workers": found,
            # Gone ones are folded away below the live ones, last seen first, so a fleet's killed
            # workers do not pile up in its table (they stay until pruned: Retention(workers=)).
            "live": [w for w in found if w.alive],
            "gone": sorted((w for w in found if not w.alive), key=lambda w: w.heartbeat_age),
            "alive": sum(1 for w in found if w.alive),
            "busy": sum(w.busy for w in found if w.alive),
            "slots": sum(w.concurrency for w in found if w.alive),
        }
        return self.renderer.page(request, "workers.html", context)

    async def storage(self, request: Request) -> Response:
        stored = await self.app.storage_async()
        context = {"section": "storage", "storage": stored, "oldest": stored.oldest}
        return self.renderer.page(request, "storage.html", context)

    async def long_running(self, request: Request) -> Response:
        raw = request.query_params.get("minutes")
        if raw:
            try:
                minutes = float(raw)
            except ValueError:
                minutes = -1.0
            if not 0 <= minutes < 1e6:
                raise HTTPException(400, f"minutes must be a number of 0 or more, got {raw!r}")
            threshold = timedelta(minutes=minutes)
        else:
            threshold = self.long_running_after
        found = await self.app.jobs.long_running_async(older_than=threshold)
        context = {
            "section": "long_running",
            "jobs": found,
            "threshold": threshold,
            "minutes": f"{threshold.total_seconds() / 60:g}",
            "now": datetime.now(UTC),
        }
        return self.renderer.page(request, "long_running.html", context)

    async def schedules(self, request: Request) -> Response:
        found = await self.app.schedules.list_async()
        now = datetime.now(UTC)
        rows = [
            {
                "schedule": s,
                "last": s.local_text(s.last_fired_at),
                "next": s.local_text(s.next_fire_at),
                "overdue": s.overdue(now),
            }
            for s in found
        ]
        return self.renderer.page(request, "schedules.html", {"section": "schedules", "rows": rows})

    async def effects(self, request: Request) -> Response:
        status = request.query_params.get("status") or None
        if status is not None and status not in EFFECT_STATUSES:
            known = ", ".join(EFFECT_STATUSES)
            raise HTTPException(400, f"unknown effect status {status!r}; one of: {known}")
        # status: narrowed to an EffectStatus by the check above.
        found = await self.app.effects.list_async(status, LIST_LIMIT)
        context = {
            "section": "effects",
            "effects": found,
            "status": status or "",
            "statuses": EFFECT_STATUSES,
            "limit": LIST_LIMIT,
        }
        return self.renderer.page(request, "effects.html", context)

    async def audit(self, request: Request) -> Response:
        entries = await self.app.audit.list_async(limit=LIST_LIMIT)
        context = {"section": "audit", "entries": entries, "limit": LIST_LIMIT}
        return self.renderer.page(request, "audit.html", context)

    async def metrics(self, request: Request) -> Response:
        body = await database_metrics_async(self.app.db)
        return Response(body, media_type=CONTENT_TYPE_LATEST)
