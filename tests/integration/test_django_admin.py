"""cronbase's Django admin without a browser (Django's test client, in a subprocess: Django's
settings are global to a process), on rows the admin must not fail on: JSON other SQL wrote too
deep to read, and a succeeded job with an earlier attempt's error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_django import Site, drop_database, new_database

DRIVER = Path(__file__).with_name("django_admin_driver.py")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ADMIN_SETTINGS = """
INSTALLED_APPS = [
    *INSTALLED_APPS,
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
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
STATIC_URL = "/static/"
ROOT_URLCONF = "admin_urls"
"""
ADMIN_URLS = """
from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
"""


@pytest.fixture
def admin_site(server_url: str, tmp_path: Path) -> Iterator[Site]:
    """The example project with Django's admin, on a fresh database."""
    url = new_database(server_url)
    site = Site(url, tmp_path)
    site.settings(ADMIN_SETTINGS)
    site.extra_env["CRONBASE_ENCRYPTION_KEYS"] = "adm=" + "AQEB" * 10 + "AQE="
    (tmp_path / "admin_urls.py").write_text(ADMIN_URLS)
    yield site
    drop_database(server_url, url)


def test_the_admin_shows_and_acts_on_rows_it_cannot_decode(admin_site: Site) -> None:
    ran = admin_site.run(script=DRIVER)
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout.splitlines()[-1])
    assert seen["list"] == [200, True]
    # The payload and the result, each marked and cut to its start.
    assert seen["page"] == [200, 2, False]
    # A succeeded job's page shows no earlier attempt's error as its own.
    assert seen["succeeded_page"] == [200, False]
    # An encrypted task's job: opened with the key of the process, said to be sealed.
    assert seen["sealed_page"] == [200, True, True, False]
    # Retry, cancel, retry (redirects to the job's page), then the list's cancel action.
    assert seen["actions"] == [302, 302, 302, 302]
    assert seen["status"] == "cancelled"
    assert seen["audited"] == ["job.retry", "job.cancel", "job.retry", "jobs.bulk_cancel"]
