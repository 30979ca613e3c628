"""cronbase in the Django admin: jobs (filters by status, task and queue; search by id and key),
their attempts, schedules, workers and the audit log, read-only; retry, cancel and requeue-dead
done through the library and audited as the dashboard audits them (operator_actions.py), with the
Django user as the actor. Acting needs the ``cronbase.operate_job`` permission; looking needs the
view permissions.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from ...job import JobStatus
from ...operations.stats import LIVE_WITHIN
from ...payload.sealing import (
    Kind,
    may_be_sealed,
    open_stored_json,
    open_stored_text,
    sealed_key,
)
from ...records import Encrypted, UndecodableJSON
from . import operator_actions
from .config import configured
from .models import AuditEntry, Job, JobAttempt, Schedule, Worker

# A colour per status, as the dashboard draws them.
STATUS_COLOURS = {
    JobStatus.PENDING: "#6b7280",
    JobStatus.QUEUED: "#2563eb",
    JobStatus.RUNNING: "#7c3aed",
    JobStatus.SUCCEEDED: "#15803d",
    JobStatus.FAILED: "#d97706",
    JobStatus.DEAD: "#b91c1c",
    JobStatus.CANCELLED: "#4b5563",
}
JSON_SHOWN = 4000  # characters of a payload or result on the job's page


def _opened(value: Any, kind: Kind) -> Any:
    """A stored payload or result, opened with the project's keys when sealed (encrypted
    tasks), or an Encrypted naming the key this process lacks."""
    if not may_be_sealed(value):
        return value
    return open_stored_json(configured()[1].db.keys, value, kind, json.loads)


def _opened_text(text: str | None) -> str | None:
    """A stored error or traceback, opened (or naming the key it needs) when sealed."""
    if text is None or not may_be_sealed(text):
        return text
    return open_stored_text(configured()[1].db.keys, text)


def _json_text(value: Any, **options: Any) -> str:
    """A stored JSON value as JSON text, or marked undecodable (its start: payload/stored.py)."""
    if isinstance(value, UndecodableJSON | Encrypted):
        return str(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str, **options)


def _pretty_json(value: Any, limit: int = JSON_SHOWN) -> str:
    text = _json_text(value, indent=2)
    if len(text) > limit:
        text = text[:limit] + "\n…"
    return format_html('<pre class="cronbase-json">{}</pre>', text)


def _ago(moment: datetime | None) -> str:
    """``moment`` in words relative to now, the time itself on hover."""
    if moment is None:
        return "-"
    seconds = (timezone.now() - moment).total_seconds()
    future = seconds < 0
    seconds = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            amount = f"{int(seconds // size)}{unit}"
            break
    else:
        amount = f"{int(seconds)}s"
    words = f"in {amount}" if future else f"{amount} ago"
    return format_html('<span title="{}">{}</span>', moment.isoformat(), words)


def _ago_column(field: str, description: str) -> Any:
    """A list column (an admin method) showing the time in ``field`` as :func:`_ago` does, sorted
    by that field."""

    @admin.display(description=description, ordering=field)
    def shown(model_admin: admin.ModelAdmin, row: Any) -> str:
        return _ago(getattr(row, field))

    return shown


class ReadOnly:
    """cronbase's rows are the library's to change: no add, change or delete here; read on
    settings.CRONBASE's database alias. For the admins and the inline alike."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        alias = configured()[0].alias
        return super().get_queryset(request).using(alias)  # type: ignore[misc]


class ReadOnlyAdmin(ReadOnly, admin.ModelAdmin):  # type: ignore[misc]  # django has no type hints
    """The base of cronbase's model admins."""


class AttemptInline(ReadOnly, admin.TabularInline):  # type: ignore[misc]
    model = JobAttempt
    extra = 0
    can_delete = False
    fields = ("attempt", "outcome", "worker", "started_at", "finished_at", "error_shown")
    readonly_fields = fields
    verbose_name_plural = (
        "attempts (failed, lost, released, cancelled, snoozed; a success is the job's own row)"
    )

    @admin.display(description="error")
    def error_shown(self, attempt: JobAttempt) -> str:
        if not attempt.error and not attempt.traceback:
            return "-"
        return format_html(
            '<details><summary>{}</summary><pre class="cronbase-traceback">{}</pre></details>',
            _opened_text(attempt.error) or attempt.error_type or "error",
            _opened_text(attempt.traceback) or "",
        )


class JobAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "task",
        "queue",
        "status_badge",
        "priority",
        "attempts_shown",
        "run_at_shown",
        "enqueued_shown",
        "finished_shown",
        "payload_preview",
    )
    list_filter = ("status", "task", "queue")
    search_fields = ("idempotency_key", "dedupe_key")
    search_help_text = "A job id, or an idempotency or dedupe key (or the start of one)."
    list_per_page = 50
    show_full_result_count = False  # a count of every job on each page: not on a large table
    actions = ("retry_jobs", "cancel_jobs", "requeue_dead_of_tasks")
    inlines = (AttemptInline,)
    fieldsets = (
        (None, {"fields": ("id", "task", "queue", "status_badge", "priority", "stage_shown")}),
        ("Arguments and result", {"fields": ("payload_shown", "result_shown")}),
        (
            "Attempts and times",
            {
                "fields": (
                    "attempts_shown",
                    "run_at",
                    "created_at",
                    "started_at",
                    "finished_at",
                    "locked_by",
                    "locked_until",
                    "lease",
                    "snoozes",
                )
            },
        ),
        ("Last error", {"fields": ("error_type_shown", "last_error_shown")}),
        ("Keys", {"fields": ("idempotency_key", "dedupe_key", "workflow_id")}),
    )
    # Every field the page shows, and none of them editable.
    readonly_fields = tuple(name for _, section in fieldsets for name in section["fields"])
    change_form_template = "admin/cronbase/job/change_form.html"

    def lookup_allowed(self, lookup: str, value: str, request: Any = None) -> bool:
        # A worker's "running jobs" link filters by the worker holding them.
        return lookup == "locked_by" or bool(super().lookup_allowed(lookup, value, request))

    # -- search: an id, or a key's start (both indexed) -------------------------------------------

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        found = Q(idempotency_key__startswith=term) | Q(dedupe_key__startswith=term)
        if term.isascii() and term.isdigit() and len(term) <= 18:
            found |= Q(id=int(term))
        return queryset.filter(found), False

    # -- columns ---------------------------------------------------------------------------------

    @admin.display(description="status", ordering="status")
    def status_badge(self, job: Job) -> str:
        status = JobStatus(job.status)
        return format_html(
            '<span class="cronbase-status" style="color:#fff;background:{};padding:1px 6px;'
            'border-radius:8px">{}</span>',
            STATUS_COLOURS[status],
            status.value,
        )

    @admin.display(description="attempts")
    def attempts_shown(self, job: Job) -> str:
        return f"{job.attempts}/{job.max_attempts}"

    run_at_shown = _ago_column("run_at", "run at")
    enqueued_shown = _ago_column("created_at", "enqueued")
    finished_shown = _ago_column("finished_at", "finished")

    @admin.display(description="payload")
    def payload_preview(self, job: Job) -> str:
        text = _json_text(_opened(job.payload, "payload"))
        return text if len(text) <= 80 else text[:79] + "…"

    @admin.display(description="payload")
    def payload_shown(self, job: Job) -> str:
        shown = _pretty_json(_opened(job.payload, "payload"))
        key_id = sealed_key(job.payload)
        if key_id is None:
            return shown
        return format_html("<p>encrypted with key {}</p>{}", repr(key_id), shown)

    @admin.display(description="result")
    def result_shown(self, job: Job) -> str:
        return "-" if job.result is None else _pretty_json(_opened(job.result, "result"))

    # A succeeded job's last_error and error_type are an earlier attempt's: not its error (the
    # attempts below show each attempt's).
    @admin.display(description="error type")
    def error_type_shown(self, job: Job) -> str | None:
        return None if job.status == JobStatus.SUCCEEDED else job.error_type

    @admin.display(description="last error")
    def last_error_shown(self, job: Job) -> str | None:
        return None if job.status == JobStatus.SUCCEEDED else _opened_text(job.last_error)

    @admin.display(description="progress")
    def stage_shown(self, job: Job) -> str:
        if job.progress is None:
            return "-"
        return f"{job.progress:.0f}%" + (f" ({job.stage})" if job.stage else "")

    # -- actions: through the library, audited as the dashboard's --------------------------------

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("cronbase.operate_job"))

    def _report(self, request: HttpRequest, done: operator_actions.Done) -> None:
        if done.ids:
            self.message_user(request, done.summary, messages.SUCCESS)
        for job_id, why in done.refused.items():
            self.message_user(request, f"job {job_id}: {why}", messages.WARNING)
        if not done.ids and not done.refused:
            self.message_user(request, done.summary, messages.INFO)

    @admin.action(description="Retry the selected jobs (run again now)", permissions=["operate"])
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        ids = list(queryset.values_list("id", flat=True))
        self._report(request, operator_actions.bulk(request, "retry", ids))

    @admin.action(description="Cancel the selected jobs", permissions=["operate"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        ids = list(queryset.values_list("id", flat=True))
        self._report(request, operator_actions.bulk(request, "cancel", ids))

    @admin.action(
        description="Requeue every dead job of the selected jobs' tasks", permissions=["operate"]
    )
    def requeue_dead_of_tasks(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        tasks = sorted(set(queryset.values_list("task", flat=True)))
        for task in tasks:
            self._report(request, operator_actions.requeue_dead(request, task))

    # -- the job page's buttons ------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "<int:job_id>/retry/",
                self.admin_site.admin_view(require_POST(self.retry_view)),
                name="cronbase_job_retry",
            ),
            path(
                "<int:job_id>/cancel/",
                self.admin_site.admin_view(require_POST(self.cancel_view)),
                name="cronbase_job_cancel",
            ),
        ]
        return own + list(super().get_urls())

    def _one(
        self, request: HttpRequest, job_id: int, action: operator_actions.JobAction
    ) -> HttpResponse:
        if not self.has_operate_permission(request):
            raise PermissionDenied
        get_object_or_404(self.get_queryset(request), id=job_id)
        done = operator_actions.one(request, action, job_id)
        self._report(request, done)
        return HttpResponseRedirect(reverse("admin:cronbase_job_change", args=[job_id]))

    def retry_view(self, request: HttpRequest, job_id: int) -> HttpResponse:
        return self._one(request, job_id, "retry")

    def cancel_view(self, request: HttpRequest, job_id: int) -> HttpResponse:
        return self._one(request, job_id, "cancel")

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> HttpResponse:
        obj = context.get("original")
        if obj is not None:
            status = JobStatus(obj.status)
            operate = self.has_operate_permission(request)
            context["cronbase_can_retry"] = operate and status not in (
                JobStatus.RUNNING,
                JobStatus.PENDING,
            )
            context["cronbase_can_cancel"] = operate and not status.is_final
        return super().render_change_form(request, context, *args, **kwargs)


class ScheduleAdmin(ReadOnlyAdmin):
    list_display = (
        "key",
        "task",
        "cron",
        "in_words",
        "tz",
        "is_paused",
        "next_shown",
        "last_shown",
        "source",
    )
    list_filter = ("is_paused", "source", "task")
    search_fields = ("key", "task")

    @admin.display(description="when")
    def in_words(self, schedule: Schedule) -> str:
        from ...schedule.cron import describe

        try:
            return describe(schedule.cron, schedule.tz)
        except Exception:  # a row written by other code may hold anything: show it as it is
            return "-"

    next_shown = _ago_column("next_fire_at", "next fire")
    last_shown = _ago_column("last_fired_at", "last fired")


class WorkerAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "alive",
        "hostname",
        "pid",
        "queues_shown",
        "concurrency",
        "heartbeat",
        "started_shown",
        "jobs_in_hand",
    )
    list_filter = ("hostname",)
    search_fields = ("id", "hostname")

    @admin.display(description="alive", boolean=True)
    def alive(self, worker: Worker) -> bool:
        return bool(timezone.now() - worker.last_seen_at <= LIVE_WITHIN)

    @admin.display(description="queues")
    def queues_shown(self, worker: Worker) -> str:
        return ", ".join(worker.queues or []) or "all"

    heartbeat = _ago_column("last_seen_at", "last heartbeat")
    started_shown = _ago_column("started_at", "started")

    @admin.display(description="jobs in hand")
    def jobs_in_hand(self, worker: Worker) -> str:
        url = reverse("admin:cronbase_job_changelist")
        return format_html(
            '<a href="{}?status__exact=running&amp;locked_by={}">running jobs</a>',
            url,
            worker.id,
        )


class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ("at", "actor", "action", "target", "detail_shown")
    list_filter = ("action", "actor")
    search_fields = ("target", "actor")
    date_hierarchy = "at"

    @admin.display(description="detail")
    def detail_shown(self, entry: AuditEntry) -> str:
        return _json_text(entry.detail)


if configured()[0].alias is not None:
    # The models are read on settings.CRONBASE's database alias; an App of settings APP with no
    # DATABASE has none that Django knows, and no admin.
    admin.site.register(Job, JobAdmin)
    admin.site.register(Schedule, ScheduleAdmin)
    admin.site.register(Worker, WorkerAdmin)
    admin.site.register(AuditEntry, AuditEntryAdmin)
