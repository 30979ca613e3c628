"""The shop's tasks: an order's pipeline, the end of the day, and the timetable's chores."""

from cronbase.contrib.celery import shared_task

from . import services
from .celery_app import app


@app.task(name="shop.reserve_stock")
def reserve_stock(order_id: int, cents: int) -> dict:
    return {"order_id": order_id, "cents": cents}


@app.task(
    name="shop.charge_card",
    autoretry_for=(services.GatewayTimeout,),
    retry_backoff=True,  # waits of up to 1 s, 2 s, 4 s... (full jitter) between tries
    retry_backoff_max=300,
    max_retries=5,
)
def charge_card(reservation: dict) -> dict:
    charge_id = services.charge(reservation["order_id"], reservation["cents"])
    return {**reservation, "charge": charge_id}


@app.task(name="shop.ship_order")
def ship_order(payment: dict) -> dict:
    return {**payment, "tracking": f"TRK{payment['order_id']:06d}"}


@app.task(name="shop.notify_customer", bind=True, max_retries=3)
def notify_customer(self, shipment: dict, email: str) -> str:
    subject = f"order {shipment['order_id']} shipped ({shipment['tracking']})"
    try:
        services.send_mail(email, subject)
    except services.MailServerBusy as exc:
        # Greylisting wants the same message again, later: 5 s, then 10 s (minutes for real).
        raise self.retry(exc=exc, countdown=5 * (self.request.retries + 1)) from exc
    return f"{subject}: mailed after {self.request.retries} retries"


@app.task(name="shop.ask_for_review", queue="emails")
def ask_for_review(order_id: int, email: str) -> str:
    return f"review of order {order_id} requested from {email}"


@app.task(name="shop.order_total")
def order_total(order_id: int) -> int:
    return services.order_cents(order_id)


@app.task(name="shop.daily_report")
def daily_report(totals: list[int], day: str) -> str:
    return f"{day}: {len(totals)} orders, {sum(totals)} cents"


@app.task(name="shop.sales_report", ignore_result=True)
def sales_report() -> None:
    print("sales report sent")


@shared_task(name="shop.sweep_carts")
def sweep_carts() -> int:
    return 0  # carts abandoned for a day, emptied
