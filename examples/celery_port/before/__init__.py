"""The shop's Celery project (Celery's own layout: importing the package loads the app)."""

from .celery_app import app as celery_app

__all__ = ["celery_app"]
