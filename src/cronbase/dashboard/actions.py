"""What an operator can do from the dashboard (POST only, CSRF-checked, each one audited).

Every action runs the same steps (:meth:`Actions._run`): check the CSRF token, check the form's
values (a bad one is a 400 naming it), do the change through the library as the signed-in actor
(the library writes the audit row, in the change's own transaction, as for the CLI), then send
the browser to the page that shows the result (or, when the library refuses, say why: 404 for a
job or schedule that is not there, 409 for one whose state forbids it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..app import App
from ..checks import MAX_KEY_LENGTH, check_key, check_name
from ..durations import parse_span
from ..errors import CronbaseError, JobNotFoundError, ScheduleError
from ..job import JobStatus
from ..operations.queues import aging_params, limit_params, rate_params
from .auth import actor
from .csrf import CsrfTokens
from .inputs import BIGINT_MAX, field, form, search_term, shown, whole_number
from .pages import GROUPED, SELECT_ALL_MAX, job_id_of, status_of
from .render import Renderer, is_htmx, query, route_path


@dataclass(frozen=True)
class Done:
    """What an action did: where the browser goes next, and what it is told there."""

    route: str
    params: dict[str, Any]
    notice: str
    count: int | None = None
    refused: int | None = None
    filters: dict[str, str] | None = None  # the list's query to go back to


def _optional_number(what: str, value: str) -> int | None:
    """A number from a form field; empty or "none": None."""
    if value.lower() in ("", "none"):
        return None
    if not (value.isascii() and value.isdigit() and len(value) <= 18):
        raise HTTPException(400, f"{what} {shown(value)} is not a whole number (or none)")
    return int(value)


def _valid(what: Callable[[], Any]) -> Any:
    """What ``what`` returns; the library's refusal of a value (a bad name, limit or rate) as
    a 400 with its message."""
    try:
        return what()
    except CronbaseError as exc:
        raise HTTPException(400, str(exc)) from None


T_contra = TypeVar("T_contra", contravariant=True)


class Act(Protocol[T_contra]):
    """A library call on one job, queue or schedule, audited as ``actor``."""

    def __call__(self, target: T_contra, /, *, actor: str | None = None) -> Awaitable[object]: ...


BULK_ACTIONS = ("retry", "cancel", "delete")
BULK_MAX = 500  # ticked boxes: a page holds 50; a crafted form gets a bound
GROUP_MESSAGE_MAX = 200  # an error group's headline (error_scan in operations.sql)

# What a bulk action acts on: the list it goes back to, that list's filters, the job ids.
Chosen = tuple[str, dict[str, Any], list[int]]


def _text(found: FormData, name: str) -> str:
    """A form field's text, surrounding spaces dropped; "" when absent."""
    value = found.get(name)
    return value.strip() if isinstance(value, str) else ""


RATE_MAX_LENGTH = 40  # "10000/366 days" is 14


class Actions:
    def __init__(self, app: App, renderer: Renderer, tokens: CsrfTokens) -> None:
        self.app = app
        self.renderer = renderer
        self.tokens = tokens

    async def _run(self, request: Request, change: Callable[[str], Awaitable[Done]]) -> Response:
        await self.tokens.check(request)
        who = actor(request)
        try:
            done = await change(who)
        except JobNotFoundError as exc:
            return self.renderer.error(request, 404, str(exc))
        except CronbaseError as exc:  # refused: a job's state, ...
            return self.renderer.error(request, 409, str(exc))
        shown = {"done": done.notice, "count": done.count, "refused": done.refused}
        url = route_path(request, done.route, **done.params) + query(
            **(done.filters or {}), **shown
        )
        if is_htmx(request):
            # A whole new page (htmx would follow a 303 inside its request and keep the URL).
            return Response(status_code=204, headers={"HX-Redirect": url})
        return RedirectResponse(url, status_code=303)

    async def _queue(self, request: Request) -> str:
        """The form's queue, when something uses it: the rule of ``cronbase queues``, which
        only ``--force`` passes (the dashboard offers no force)."""
        name = await field(request, "queue")
        _valid(lambda: check_name("queue", name))
        task_queues = {task.defaults.queue for task in self.app.tasks.values()}
        try:
            await self.app.queues.check_used_async(name, task_queues=task_queues)
        except CronbaseError as exc:
            raise HTTPException(
                400,
                f"{exc}; the dashboard sets up no queue ahead (cronbase queues ... --force does)",
            ) from None
        return name

    async def _schedule_key(self, request: Request) -> str:
        """The form's schedule key, when a schedule has it (404 otherwise)."""
        key = await field(request, "key")
        _valid(lambda: check_key("schedule key", key))
        try:
            await self.app.schedules.get_async(key)
        except ScheduleError as exc:
            raise HTTPException(404, str(exc)) from None
        return key

    async def _on_job(self, request: Request, act: Act[int], notice: str) -> Response:
        """``act`` on the page's job; back to its page."""
        job_id = job_id_of(request)

        async def change(who: str) -> Done:
            await act(job_id, actor=who)
            return Done("job", {"job_id": job_id}, notice)

        return await self._run(request, change)

    async def _on_queue(self, request: Request, act: Act[str], notice: str) -> Response:
        """``act`` on the form's queue; back to the overview."""

        async def change(who: str) -> Done:
            await act(await self._queue(request), actor=who)
            return Done("overview", {}, notice)

        return await self._run(request, change)

    async def _on_schedule(self, request: Request, act: Act[str], notice: str) -> Response:
        """``act`` on the form's schedule; back to the schedules."""

        async def change(who: str) -> Done:
            await act(await self._schedule_key(request), actor=who)
            return Done("schedules", {}, notice)

        return await self._run(request, change)

    async def retry_job(self, request: Request) -> Response:
        return await self._on_job(request, self.app.jobs.retry_async, "retried")

    async def cancel_job(self, request: Request) -> Response:
        return await self._on_job(request, self.app.jobs.cancel_async, "cancelled")

    async def bulk_jobs(self, request: Request) -> Response:
        """Retry, cancel or delete many jobs: the ticked ones (``ids``), every job the list's
        filter matches (``scope=filter``: the server finds them again, at most 10,000), or one
        group of the dead or failed jobs alike in their error (``scope=group``)."""
        found = await form(request)
        action = found.get("action")
        if action not in BULK_ACTIONS:
            shown_action = shown(action) if isinstance(action, str) else "none"
            raise HTTPException(
                400, f"unknown bulk action {shown_action}; one of: retry, cancel, delete"
            )
        scope = found.get("scope") or "ids"
        chosen = {"ids": self._ticked, "filter": self._matching, "group": self._group}.get(
            str(scope)
        )
        if chosen is None:
            raise HTTPException(
                400, f"unknown scope {shown(str(scope))}; one of: ids, filter, group"
            )
        route, back, ids = await chosen(found)

        many = {
            "retry": self.app.jobs.retry_many_async,
            "cancel": self.app.jobs.cancel_many_async,
            "delete": self.app.jobs.delete_many_async,
        }[str(action)]

        async def change(who: str) -> Done:
            bulk = await many(ids, actor=who)
            notice = f"bulk-{action}"
            return Done(route, {}, notice, len(bulk.done), len(bulk.refused), back)

        return await self._run(request, change)

    async def _ticked(self, found: FormData) -> Chosen:
        raw = found.getlist("ids")
        if not raw:
            raise HTTPException(400, "select at least one job (the boxes in the first column)")
        if len(raw) > BULK_MAX:
            raise HTTPException(400, f"at most {BULK_MAX} jobs at once, got {len(raw)}")
        ids = sorted({whole_number("a job id", str(value), 1, BIGINT_MAX) for value in raw})
        return "jobs", {}, ids

    async def _matching(self, found: FormData) -> Chosen:
        """Every job of the posted filter, found again now (not the ids the page showed: the
        list moved on since), back to that list."""
        route = _text(found, "list") or "jobs"
        if route not in ("jobs", "dead"):
            raise HTTPException(400, f"unknown list {shown(route)}; one of: jobs, dead")
        status = JobStatus.DEAD if route == "dead" else status_of(_text(found, "status"))
        queue = _text(found, "queue") or None
        task = _text(found, "task") or None
        search = search_term(_text(found, "q"))
        for what, value in (("queue", queue), ("task", task)):
            if value is not None and len(value) > MAX_KEY_LENGTH:
                raise HTTPException(400, f"the {what} {shown(value)} is longer than any")
        ids = await self.app.jobs.search_ids_async(
            status=status, queue=queue, task=task, search=search, limit=SELECT_ALL_MAX + 1
        )
        if not ids:
            raise HTTPException(400, "no job matches this filter (any more)")
        if len(ids) > SELECT_ALL_MAX:
            raise HTTPException(
                400,
                f"this filter matches more than {SELECT_ALL_MAX:,} jobs; narrow it (status, "
                "queue, task or search) to act on them together",
            )
        back = {"queue": queue or "", "task": task or "", "q": search or ""}
        if route == "jobs":
            back["status"] = status.value if status else ""
        return route, back, sorted(ids)

    async def _group(self, found: FormData) -> Chosen:
        """The jobs of one group of the error table (the same scan as the page's), back to
        their list."""
        status = status_of(_text(found, "status"))
        if status is None or status not in GROUPED:
            raise HTTPException(400, "the error groups are of dead or failed jobs only")
        task = _text(found, "task")
        if not task or len(task) > MAX_KEY_LENGTH:
            raise HTTPException(400, "the form field 'task' is missing or too long")
        error_type = _text(found, "error_type")
        # The headline as the page showed it (at most 200 characters, spaces kept as they are).
        message = str(found.get("message") or "")
        if len(error_type) > MAX_KEY_LENGTH or len(message) > GROUP_MESSAGE_MAX:
            raise HTTPException(400, "the error of a group is at most 200 characters")
        ids = await self.app.jobs.error_group_ids_async(status, task, error_type, message)
        if not ids:
            raise HTTPException(400, "no job is in this group any more")
        if status is JobStatus.DEAD:
            return "dead", {}, ids
        return "jobs", {"status": status.value}, ids

    async def requeue_dead(self, request: Request) -> Response:
        # Any text a dead job's task holds (rows written by other code may break today's rules).
        task = await field(request, "task", max_length=MAX_KEY_LENGTH)

        async def change(who: str) -> Done:
            ids = await self.app.jobs.requeue_dead_async(task=task, actor=who)
            return Done("dead", {}, "requeued", len(ids))

        return await self._run(request, change)

    async def pause_queue(self, request: Request) -> Response:
        return await self._on_queue(request, self.app.queues.pause_async, "queue-paused")

    async def resume_queue(self, request: Request) -> Response:
        return await self._on_queue(request, self.app.queues.resume_async, "queue-resumed")

    async def limit_queue(self, request: Request) -> Response:
        async def change(who: str) -> Done:
            name = await self._queue(request)
            value = str((await form(request)).get("max_running") or "").strip()
            limit = _optional_number("limit", value)
            _valid(lambda: limit_params(name, limit))
            await self.app.queues.set_limit_async(name, limit, actor=who)
            return Done("overview", {}, "queue-limited")

        return await self._run(request, change)

    async def rate_queue(self, request: Request) -> Response:
        async def change(who: str) -> Done:
            name = await self._queue(request)
            value = str((await form(request)).get("rate") or "").strip()
            rate = None if value.lower() in ("", "none") else value
            if rate is not None and len(rate) > RATE_MAX_LENGTH:
                raise HTTPException(400, f"rate {shown(rate)} is not a rate such as 100/minute")
            try:
                _valid(lambda: rate_params(name, rate))
            except (ValueError, OverflowError):  # a period beyond what a timedelta holds
                raise HTTPException(400, f"rate {shown(value)} is out of range") from None
            await self.app.queues.set_rate_async(name, rate, actor=who)
            return Done("overview", {}, "queue-rated")

        return await self._run(request, change)

    async def age_queue(self, request: Request) -> Response:
        async def change(who: str) -> Done:
            name = await self._queue(request)
            value = str((await form(request)).get("aging") or "").strip()
            if len(value) > RATE_MAX_LENGTH:
                raise HTTPException(400, f"aging {shown(value)} is not a duration such as 5m")
            every = None if value.lower() in ("", "none") else _valid(lambda: parse_span(value))
            _valid(lambda: aging_params(name, every))
            # The step stays the queue's (set from the API or the command line), else 10.
            await self.app.queues.set_aging_async(name, every, actor=who)
            return Done("overview", {}, "queue-aged")

        return await self._run(request, change)

    async def pause_schedule(self, request: Request) -> Response:
        return await self._on_schedule(request, self.app.schedules.pause_async, "schedule-paused")

    async def run_schedule(self, request: Request) -> Response:
        async def change(who: str) -> Done:
            key = await self._schedule_key(request)
            job_id = await self.app.schedules.run_now_async(key, actor=who)
            return Done("job", {"job_id": job_id}, "schedule-run")

        return await self._run(request, change)

    async def resume_schedule(self, request: Request) -> Response:
        return await self._on_schedule(request, self.app.schedules.resume_async, "schedule-resumed")
