"""examples/test_with_database.py: examples/shop.py's tasks tested on a real test database.

Needs ``CRONBASE_TEST_DATABASE_URL`` (each test gets a throwaway schema there) and, in
pyproject.toml, ``cronbase_app = "examples.shop:app"`` under ``[tool.pytest.ini_options]``
(or ``pytest -o cronbase_app=examples.shop:app examples/test_with_database.py``).
"""

from __future__ import annotations

import cronbase
from cronbase.testing import drain, enqueued
from examples import shop


def test_an_order_is_charged_now_and_its_receipt_waits(cronbase_app: cronbase.App) -> None:
    shop.place_order.defer(order_id=7, email="ada@example.com", cents=1250)

    outcomes = drain(cronbase_app)  # runs what is due, here in this process

    assert [(o.task, o.outcome) for o in outcomes] == [
        ("place_order", "succeeded"),
        ("charge", "succeeded"),
    ]
    enqueued(cronbase_app, task=shop.charge).assert_none()  # nothing left to charge
    receipt = enqueued(cronbase_app, task=shop.send_receipt, order_id=7).assert_one()
    assert receipt.payload == {"order_id": 7, "email": "ada@example.com"}


def test_a_declined_payment_waits_for_its_retry(cronbase_app: cronbase.App) -> None:
    shop.charge.defer(order_id=8, cents=0)

    [outcome] = drain(cronbase_app)

    assert outcome.outcome == "failed"
    assert isinstance(outcome.error, shop.PaymentDeclined)
    enqueued(cronbase_app, task=shop.charge, status="failed", order_id=8).assert_one()
