"""Runs cronbase's Django admin in the example project (examples/django_project, with the admin
added by test_django_admin.py's settings) on a job whose payload and result other SQL wrote
10,000 levels deep, and on a succeeded job with an earlier attempt's error; prints what each page
and action answered as JSON. ``python tests/integration/django_admin_driver.py``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[2] / "examples" / "django_project"
sys.path.insert(0, str(PROJECT))

import django  # noqa: E402  # after the settings module is known

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402

DEEP = "('{\"x\": ' || repeat('[', 10000) || repeat(']', 10000) || '}')::jsonb"
SECRET_PAYLOAD = '{"card": "4111-1111"}'
MARKED = "undecodable JSON, nested deeper than 100 levels (at character 105)"


def insert(sql: str) -> int:
    with connection.cursor() as cur:
        cur.execute(sql)
        return int(cur.fetchone()[0])


def main() -> dict[str, Any]:
    call_command("migrate", verbosity=0)
    poison = insert(
        f"INSERT INTO cronbase.jobs (task, queue, payload, result) "
        f"VALUES ('confirm_order', 'orders', {DEEP}, {DEEP}) RETURNING id"
    )
    succeeded = insert(
        "INSERT INTO cronbase.jobs (task, payload, status, attempts, started_at, finished_at, "
        "last_error, error_type) VALUES ('confirm_order', '{\"order_id\": 1}', 'succeeded', 2, "
        "now(), now(), 'RuntimeError: first attempt failed', 'RuntimeError') RETURNING id"
    )
    # An encrypted task's job (its key in CRONBASE_ENCRYPTION_KEYS): payload and error sealed.
    from cronbase.contrib.django import get_app

    keys = get_app().db.keys
    assert keys is not None, "CRONBASE_ENCRYPTION_KEYS is not set"
    sealed = insert(
        "INSERT INTO cronbase.jobs (task, payload, status, attempts, last_error, error_type) "
        f"VALUES ('charge', '{keys.seal_json(SECRET_PAYLOAD, 'payload', 'charge')}', 'failed', 1, "
        f"'{keys.seal_text('ValueError: card 4111-1111 declined')}', 'ValueError') RETURNING id"
    )
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "x" * 20))
    listed = client.get("/admin/cronbase/job/")
    page = client.get(f"/admin/cronbase/job/{poison}/change/")
    done = client.get(f"/admin/cronbase/job/{succeeded}/change/")
    secret = client.get(f"/admin/cronbase/job/{sealed}/change/")
    retried = client.post(f"/admin/cronbase/job/{poison}/retry/")
    cancelled = client.post(f"/admin/cronbase/job/{poison}/cancel/")
    retried_again = client.post(f"/admin/cronbase/job/{poison}/retry/")
    bulk = client.post(
        "/admin/cronbase/job/", {"action": "cancel_jobs", "_selected_action": [str(poison)]}
    )
    with connection.cursor() as cur:
        cur.execute("SELECT status FROM cronbase.jobs_all WHERE id = %s", [poison])
        status = cur.fetchone()[0]
        cur.execute("SELECT action FROM cronbase.audit_log ORDER BY id")
        audited = [row[0] for row in cur.fetchall()]
    return {
        "list": [listed.status_code, MARKED in listed.text],
        "page": [page.status_code, page.text.count(MARKED), "[" * 5000 in page.text],
        "succeeded_page": [done.status_code, "first attempt failed" in done.text],
        "sealed_page": [
            secret.status_code,
            "encrypted with key &#x27;adm&#x27;" in secret.text,
            "4111-1111" in secret.text,
            "$sealed" in secret.text,
        ],
        "actions": [r.status_code for r in (retried, cancelled, retried_again, bulk)],
        "status": status,
        "audited": audited,
    }


if __name__ == "__main__":
    print(json.dumps(main()))
