"""The shop's jobs; cronbase imports every installed app's tasks module when Django starts."""

from datetime import datetime

from django.utils import timezone

from cronbase.contrib.django import app

from .models import Order, Summary


@app.task(queue="orders")
def confirm_order(order_id: int) -> None:
    # Runs in a worker thread, with the ORM as in a view (a fresh connection per job).
    Order.objects.filter(id=order_id, status="placed").update(
        status="confirmed", confirmed_at=timezone.now()
    )


@app.periodic(cron="0 * * * *", key="hourly-order-summary")
@app.task
def summarize_orders(scheduled_at: datetime) -> None:
    confirmed = Order.objects.filter(status="confirmed").count()
    Summary.objects.create(taken_at=scheduled_at, confirmed_orders=confirmed)
