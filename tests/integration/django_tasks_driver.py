"""Runs one scenario inside the Django tasks example (examples/django_tasks, Django 6) and prints
what it saw as JSON: ``python tests/integration/django_tasks_driver.py SCENARIO [ARGS...]``.

test_django_tasks.py runs it with the Django 6 interpreter; the database is DATABASE_URL. The
scenarios use only the example's own code and Django's tasks API.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[2] / "examples" / "django_tasks"
sys.path.insert(0, str(PROJECT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tasksite.settings")

import django  # noqa: E402  # after the settings module is known

django.setup()

from django.tasks import TaskResultStatus, default_task_backend  # noqa: E402
from django.tasks.exceptions import TaskResultDoesNotExist  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402
from newsletter import tasks  # noqa: E402
from newsletter.models import Subscriber  # noqa: E402


def when(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def signup() -> dict[str, Any]:
    """The view: one signup commits with its welcome task, one raises after the enqueue."""
    client = Client(raise_request_exception=False)
    kept = client.post("/subscribe", {"email": "ada@example.com"})
    refused = client.post("/subscribe", {"email": "bob@example.com", "fail": "1"})
    body = kept.json()
    subscriber = body["subscriber"]
    again = tasks.send_welcome.enqueue(subscriber)  # OPTIONS: one per subscriber and hour
    return {
        "kept": [kept.status_code, body],
        "refused": refused.status_code,
        "subscribers": sorted(Subscriber.objects.values_list("email", flat=True)),
        "again": again.id,
    }


def enqueue() -> dict[str, Any]:
    """The tasks whose runs the test checks: retried, failed for good, deferred, async."""
    subscriber = Subscriber.objects.get(email="ada@example.com").id
    run_after = timezone.now() + timedelta(seconds=3)
    digest = tasks.send_digest.using(run_after=run_after).enqueue(subscriber)
    return {
        "crm": tasks.sync_to_crm.enqueue(subscriber, failures=2).id,
        "crm_down": tasks.sync_to_crm.enqueue(subscriber, failures=9).id,
        "digest": digest.id,
        "digest_status": digest.status,
        "run_after": when(digest.task.run_after),
        "count": tasks.count_subscribers.enqueue().id,
    }


def results(*ids: str) -> dict[str, Any]:
    """Each id's TaskResult, read back by id alone."""
    out: dict[str, Any] = {}
    for result_id in ids:
        try:
            result = default_task_backend.get_result(result_id)
        except TaskResultDoesNotExist:
            out[result_id] = None
            continue
        out[result_id] = {
            "task": result.task.module_path,
            "status": result.status,
            "return_value": (
                result.return_value if result.status == TaskResultStatus.SUCCESSFUL else None
            ),
            "attempts": result.attempts,
            "worker_ids": result.worker_ids,
            "errors": [[e.exception_class_path, e.traceback] for e in result.errors],
            "args": result.args,
            "kwargs": result.kwargs,
            "enqueued_at": when(result.enqueued_at),
            "started_at": when(result.started_at),
            "last_attempted_at": when(result.last_attempted_at),
            "finished_at": when(result.finished_at),
        }
    return out


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    f.__name__: f for f in (signup, enqueue, results)
}

if __name__ == "__main__":
    print(json.dumps(SCENARIOS[sys.argv[1]](*sys.argv[2:])))
