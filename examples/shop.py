"""examples/shop.py: a tiny shop whose tasks examples/test_inline_mode.py and
examples/test_with_database.py test, without a database and on a test database."""

from __future__ import annotations

from datetime import timedelta

import cronbase

app = cronbase.App()
outbox: list[str] = []  # stands in for the mail server


class PaymentDeclined(Exception):
    pass


@app.task(max_attempts=3)
def charge(order_id: int, cents: int) -> str:
    if cents <= 0:
        raise PaymentDeclined(f"order {order_id}: cannot charge {cents} cents")
    cronbase.current_job().set_progress(100, stage="charged")
    return f"charged {cents} cents for order {order_id}"


@app.task(queue="emails")
def send_receipt(order_id: int, email: str) -> None:
    outbox.append(f"receipt for order {order_id} to {email}")


@app.task
def place_order(order_id: int, email: str, cents: int) -> None:
    charge.defer(order_id=order_id, cents=cents)
    # The receipt goes a minute later, once the charge has had time to settle.
    send_receipt.configure(delay=timedelta(minutes=1)).defer(order_id=order_id, email=email)
