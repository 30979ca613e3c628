"""Seeds the Django tasks example (examples/django_tasks, Django 6) for the admin's browser test:
its users, and jobs in each state the admin shows. Prints their ids as JSON. Run in the example's
folder with the Django 6 interpreter; DATABASE_URL names the database."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta

sys.path.insert(0, os.getcwd())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tasksite.settings")

import django

django.setup()

from django.contrib.auth.models import Permission, User  # noqa: E402
from django.utils import timezone  # noqa: E402
from newsletter import tasks  # noqa: E402
from newsletter.models import Subscriber  # noqa: E402

import cronbase.testing  # noqa: E402
from cronbase.contrib.django import get_app  # noqa: E402

PASSWORD = "a-long-test-password"


def users() -> None:
    User.objects.filter(username__in=["ops", "viewer"]).delete()
    User.objects.create_superuser("ops", "ops@example.com", PASSWORD)
    viewer = User.objects.create_user("viewer", "viewer@example.com", PASSWORD, is_staff=True)
    viewer.user_permissions.set(
        Permission.objects.filter(content_type__app_label="cronbase", codename__startswith="view_")
    )


def main() -> dict[str, int]:
    users()
    app = get_app()
    Subscriber.objects.all().delete()
    subscriber = Subscriber.objects.create(email="ada@example.com").id
    dead = [tasks.sync_to_crm.enqueue(subscriber, failures=9) for _ in range(2)]
    done = tasks.count_subscribers.enqueue()
    # Runs them (a worker in this process) until both sync_to_crm jobs are dead: three attempts,
    # 200 ms apart (OPTIONS).
    deadline = time.monotonic() + 60
    while not all(app.jobs.get(int(r.id)).status == "dead" for r in dead):
        assert time.monotonic() < deadline, "the sync_to_crm jobs did not go dead in 60 s"
        cronbase.testing.drain(app)
        time.sleep(0.05)
    later = tasks.send_digest.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1)
    keyed = app.get_task(tasks.send_digest.module_path).configure(idempotency_key="digest:ada")
    return {
        "dead": int(dead[0].id),
        "dead_too": int(dead[1].id),
        "succeeded": int(done.id),
        "scheduled": int(later.id),
        "keyed": keyed.defer(subscriber_id=subscriber),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
