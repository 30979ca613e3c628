"""Settings of the Django tasks example (Django 6): Django's standard tasks API, run by cronbase.

DATABASE_URL (a postgresql:// URL or a libpq "key=value" string) says which database; the default
is a local database named newsletter. cronbase keeps its jobs there too, in schema cronbase.
"""

import os
from datetime import timedelta

from psycopg.conninfo import conninfo_to_dict

from cronbase import Backoff

_database = conninfo_to_dict(os.environ.get("DATABASE_URL", "dbname=newsletter"))

SECRET_KEY = "example-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
USE_TZ = True
ROOT_URLCONF = "tasksite.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _database.get("dbname", "newsletter"),
        "USER": _database.get("user", ""),
        "PASSWORD": _database.get("password", ""),
        "HOST": _database.get("host", ""),
        "PORT": _database.get("port", ""),
    }
}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "cronbase.contrib.django",  # the worker (manage.py cronbase worker), migrations, the admin
    "newsletter",
]

# Django's tasks framework, with cronbase as its backend. Django defines the queue and the
# priority; OPTIONS carries what it does not (cronbase's @app.task options), for every task and
# per task (by module path).
TASKS = {
    "default": {
        "BACKEND": "cronbase.contrib.django.tasks.CronbaseBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            "max_attempts": 5,
            "retry": Backoff(base=timedelta(seconds=1)),
            "tasks": {
                "newsletter.tasks.sync_to_crm": {
                    "max_attempts": 3,
                    "retry": Backoff(base=timedelta(milliseconds=200), jitter=0),
                    "timeout": timedelta(minutes=1),
                },
                "newsletter.tasks.send_welcome": {
                    "unique_for": timedelta(hours=1),
                    "unique_key": "{subscriber_id}",
                },
                "newsletter.tasks.purge_unconfirmed": {"cron": "0 3 * * *", "tz": "Europe/Berlin"},
            },
        },
    }
}

# cronbase's own App, on the "default" database: the same credentials, no second URL.
CRONBASE = {"DATABASE": "default"}

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

STATIC_URL = "static/"
