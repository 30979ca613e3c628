"""What the admin does to jobs: the library's own actions (``app.jobs.retry``, ``cancel``,
``retry_many``, ``cancel_many``, ``requeue_dead``), with the Django user as the actor. The
library writes the audit row in the action's transaction, so it is the one the dashboard and the
command line write for the same action (tests/browser/test_django_admin.py compares them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

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
    """Retry or cancel one job (its page's button); a refusal writes no audit row."""
    jobs = get_app().jobs
    act = jobs.retry if action == "retry" else jobs.cancel
    try:
        act(job_id, actor=django_actor(request))
    except CronbaseError as exc:
        return Done(f"job {job_id} was not {_DONE_WORD[action]}", refused={str(job_id): str(exc)})
    return Done(f"job {job_id} {_DONE_WORD[action]}", ids=[job_id])


def bulk(request: Any, action: JobAction, ids: list[int]) -> Done:
    """Retry or cancel each selected job (the changelist's action): one audit row with the ids
    done and why each other one was refused."""
    wanted = sorted(set(ids))
    if len(wanted) > BULK_MAX:
        return Done(
            f"at most {BULK_MAX} jobs at once, {len(wanted)} were selected: nothing was done"
        )
    jobs = get_app().jobs
    many = jobs.retry_many if action == "retry" else jobs.cancel_many
    result = many(wanted, actor=django_actor(request))
    noun = "job" if len(result.done) == 1 else "jobs"
    summary = f"{len(result.done)} {noun} {_DONE_WORD[action]}"
    return Done(summary, ids=result.done, refused=result.refused)


def requeue_dead(request: Any, task: str) -> Done:
    """Run every dead job of ``task`` again now."""
    ids = get_app().jobs.requeue_dead(task=task, actor=django_actor(request))
    noun = "job" if len(ids) == 1 else "jobs"
    return Done(f"{len(ids)} dead {noun} of {task} requeued", ids=ids)
