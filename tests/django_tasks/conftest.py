"""Not pytest's: a Django project whose test suite (Django's own runner, in a subprocess, under
Django 5.2 with the backport and Django 6) tests/integration/test_django_tasks.py runs."""

collect_ignore_glob = ["conformance/*", "conformance_site/*"]
