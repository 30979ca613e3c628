"""The shop's Celery app: where tasks run, and what runs on a timetable."""

from datetime import timedelta

from cronbase.contrib.celery import Celery, crontab

# cronbase: no broker or result backend to name: jobs and results live in PostgreSQL
app = Celery("shop")  # cronbase: CRONBASE_DATABASE_URL (else DATABASE_URL) says which

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
