"""``celery.schedules`` on cronbase: ``from cronbase.contrib.celery.schedules import crontab``
ports ``from celery.schedules import crontab`` by its prefix alone."""

from __future__ import annotations

from .beat import crontab

__all__ = ["crontab"]
