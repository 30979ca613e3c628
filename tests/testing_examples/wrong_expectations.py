"""Deliberately wrong expectations about examples/shop.py: tests/integration/
test_testing_examples.py runs this file in a pytest subprocess and checks what each failure says.
Not collected by the suite (the name does not start with test_)."""

from __future__ import annotations

import cronbase
from cronbase.testing import drain, enqueued, inline
from examples import shop


def test_expects_a_receipt_for_another_order(cronbase_app: cronbase.App) -> None:
    shop.place_order.defer(order_id=7, email="ada@example.com", cents=1250)
    drain(cronbase_app)
    enqueued(cronbase_app, task=shop.send_receipt, order_id=8).assert_one()


def test_expects_every_charge_to_succeed(cronbase_app: cronbase.App) -> None:
    shop.charge.defer(order_id=8, cents=0)
    drain(cronbase_app).assert_all_succeeded()


def test_expects_a_free_order_to_go_through_inline() -> None:
    with inline(shop.app) as run:
        shop.place_order.defer(order_id=9, email="bob@example.com", cents=0)
    assert run.jobs[0].status == "succeeded"
