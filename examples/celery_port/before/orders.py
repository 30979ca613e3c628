"""Where the web app starts the shop's background work and looks at it (``main`` tries it
out while a worker runs: examples/celery_port/README.md)."""

from celery import chain, chord, group
from celery.result import AsyncResult

from .celery_app import app
from .tasks import (
    ask_for_review,
    charge_card,
    daily_report,
    notify_customer,
    order_total,
    reserve_stock,
    ship_order,
)


def place_order(order_id: int, email: str, cents: int) -> str:
    """Checkout: the order's pipeline runs in the background; the page polls the id returned."""
    pipeline = chain(
        reserve_stock.s(order_id, cents),
        charge_card.s(),  # each step receives the previous step's result first
        ship_order.s(),
        notify_customer.s(email),
    )
    result = pipeline.apply_async()
    ask_for_review.apply_async(args=[order_id, email], countdown=3 * 24 * 3600)
    return result.id


def charge_again(order_id: int, cents: int) -> str:
    """Support retries a failed payment by hand; if no worker gets to it within ten minutes,
    it is dropped (the customer has been told to try again by then)."""
    reservation = {"order_id": order_id, "cents": cents}
    return charge_card.apply_async(kwargs={"reservation": reservation}, expires=600).id


def close_day(day: str, order_ids: list[int]) -> str:
    """Totals each order in parallel, then one report over the list of totals."""
    header = group(order_total.s(order_id) for order_id in order_ids)
    return chord(header)(daily_report.s(day)).id


def order_status(task_id: str) -> dict:
    result = AsyncResult(task_id, app=app)
    return {"state": result.state, "ready": result.ready(), "ok": result.successful()}


def outcome(task_id: str, timeout: float = 30) -> object:
    """The task's return value, or the exception it failed with (not raised)."""
    return AsyncResult(task_id, app=app).get(timeout=timeout, propagate=False)


def main() -> None:
    shipped = place_order(7, "ada@example.com", cents=2750)
    declined = charge_again(8, cents=0)
    total = order_total.delay(7)
    day = close_day("2026-11-27", [7, 9, 11])
    for task_id in (shipped, declined, total.id, day):
        print(outcome(task_id), order_status(task_id))  # waits for the outcome first


if __name__ == "__main__":
    main()
