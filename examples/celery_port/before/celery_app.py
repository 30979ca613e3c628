"""The shop's Celery app: where tasks run, and what runs on a timetable."""

from datetime import timedelta

from celery import Celery
from celery.schedules import crontab

app = Celery("shop", broker="redis://localhost:6379/0", backend="redis://localhost:6379/1")

app.conf.update(
    timezone="Europe/Berlin",
    task_default_queue="default",
    # Payments and mail talk to slow outside services: their own queues, their own workers.
    task_routes={
        "shop.charge_card": {"queue": "payments"},
        "shop.notify_customer": {"queue": "emails"},
    },
    beat_schedule={
        "nightly-sales-report": {
            "task": "shop.sales_report",
            "schedule": crontab(hour=6, minute=30, day_of_week="mon-fri"),
        },
        "sweep-abandoned-carts": {
            "task": "shop.sweep_carts",
            "schedule": timedelta(minutes=15),
        },
    },
)

app.autodiscover_tasks([__package__])  # imports this package's tasks.py
