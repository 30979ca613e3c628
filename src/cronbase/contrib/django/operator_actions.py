"""What the admin does to jobs: the library's own calls (``app.jobs.retry`` / ``cancel``,
``cronbase.admin.requeue_dead``), then the audit row the dashboard writes for the same action
(dashboard/actions.py: action, target and detail alike), with the Django user as the actor.

The dashboard builds its rows in its own module; until the library writes them (see the report of
issue 25), this module repeats them, and tests/browser/test_django_admin.py checks that the two
agree row for row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ... import admin as library_admin
from ...errors import CronbaseError
from . import get_app

JobAction = Literal["retry", "cancel"]
BULK_MAX = 500  # the dashboard's bound on one bulk action
_DONE_WORD = {"retry": "retried", "cancel": "cancelled"}


@dataclass(frozen=True)
class Done:
    """What an action did: the jobs it changed, why each other one was refused, in words."""

    summary: str
    ids: list[int] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


def django_actor(request: Any) -> str:
    """Who acts, for the audit log: ``django:<username>`` (the dashboard writes its basic-auth
    user, ``token@<ip>`` or ``dashboard@<ip>``; the command line ``cli:<user>@<host>``)."""
    return f"django:{request.user.get_username()}"


def one(request: Any, action: JobAction, job_id: int) -> Done:
    """Retry or cancel one job (its page's button): the dashboard's ``job.retry`` /
    ``job.cancel`` row, written only when the library did it (a refusal writes none)."""
    app = get_app()
    try:
        job = app.jobs.retry(job_id) if action == "retry" else app.jobs.cancel(job_id)
    except CronbaseError as exc:
        return Done(f"job {job_id} was not {_DONE_WORD[action]}", refused={str(job_id): str(exc)})
    detail = {"task": job.task, "queue": job.queue, "attempts": job.attempts}
    app.audit.record(django_actor(request), f"job.{action}", f"job:{job_id}", detail)
    return Done(f"job {job_id} {_DONE_WORD[action]}", ids=[job_id])


def bulk(request: Any, action: JobAction, ids: list[int]) -> Done:
    """Retry or cancel each selected job (the changelist's action): the dashboard's
    ``jobs.bulk_retry`` / ``jobs.bulk_cancel`` row, with the ids done and why each other one was
    refused."""
    app = get_app()
    wanted = sorted(set(ids))
    if len(wanted) > BULK_MAX:
        return Done(
            f"at most {BULK_MAX} jobs at once, {len(wanted)} were selected: nothing was done"
        )
    done: list[int] = []
    refused: dict[str, str] = {}
    for job_id in wanted:
        try:
            if action == "retry":
                app.jobs.retry(job_id)
            else:
                app.jobs.cancel(job_id)
        except CronbaseError as exc:  # its state, or gone
            refused[str(job_id)] = str(exc)
        else:
            done.append(job_id)
    detail = {"job_ids": done, "refused": refused}
    app.audit.record(django_actor(request), f"jobs.bulk_{action}", f"jobs:{len(wanted)}", detail)
    noun = "job" if len(done) == 1 else "jobs"
    return Done(f"{len(done)} {noun} {_DONE_WORD[action]}", ids=done, refused=refused)


def requeue_dead(request: Any, task: str) -> Done:
    """Run every dead job of ``task`` again now: the dashboard's ``dead.requeue`` row."""
    app = get_app()
    ids = library_admin.requeue_dead(app.db, task=task)
    detail = {"count": len(ids), "job_ids": ids[:100]}
    app.audit.record(django_actor(request), "dead.requeue", f"task:{task}", detail)
    noun = "job" if len(ids) == 1 else "jobs"
    return Done(f"{len(ids)} dead {noun} of {task} requeued", ids=ids)
