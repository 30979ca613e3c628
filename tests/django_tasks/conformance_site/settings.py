"""Settings of the conformance suite: cronbase as the default task backend, as Django's own tests
configure theirs (tests/tasks in Django's repository), on DATABASE_URL's server."""

import os
from datetime import timedelta

import django
from psycopg.conninfo import conninfo_to_dict

from cronbase import Backoff

_database = conninfo_to_dict(os.environ["DATABASE_URL"])

SECRET_KEY = "tests-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _database["dbname"],
        "USER": _database.get("user", ""),
        "PASSWORD": _database.get("password", ""),
        "HOST": _database.get("host", ""),
        "PORT": _database.get("port", ""),
    }
}
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "cronbase.contrib.django",
    "conformance",
]
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")  # the backport, as its README asks

TASKS = {
    "default": {
        "BACKEND": "cronbase.contrib.django.tasks.CronbaseBackend",
        "QUEUES": ["default", "queue_1"],
        "OPTIONS": {
            # Retries come back at once, so a drain runs them (no backoff to wait out).
            "retry": Backoff(base=timedelta(milliseconds=1), jitter=0),
            "max_attempts": 1,
            "tasks": {
                "conformance.tasks.flaky": {"max_attempts": 3},
                "conformance.tasks.failing_task_value_error": {"max_attempts": 2},
            },
        },
    },
}
CRONBASE = {"DATABASE": "default"}
