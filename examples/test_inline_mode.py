"""examples/test_inline_mode.py: examples/shop.py's tasks tested in inline mode, with no
database: every defer runs its handler at once. ``pytest examples/test_inline_mode.py``."""

from __future__ import annotations

import pytest

import cronbase.testing
from examples import shop


@pytest.fixture(autouse=True)
def empty_outbox() -> None:
    shop.outbox.clear()


def test_an_order_is_charged_and_gets_its_receipt() -> None:
    with cronbase.testing.inline(shop.app) as run:
        shop.place_order.defer(order_id=7, email="ada@example.com", cents=1250)

    assert [(job.task, job.status) for job in run.jobs] == [
        ("place_order", "succeeded"),
        ("charge", "succeeded"),  # deferred by place_order: run then and there
        ("send_receipt", "succeeded"),  # its delay is not waited for
    ]
    [charged] = run.jobs_of(shop.charge)
    assert charged.result == "charged 1250 cents for order 7"
    assert charged.progress == 100
    assert shop.outbox == ["receipt for order 7 to ada@example.com"]


def test_a_declined_payment_is_raised_from_defer() -> None:
    with cronbase.testing.inline(shop.app) as run, pytest.raises(shop.PaymentDeclined):
        shop.charge.defer(order_id=8, cents=0)
    assert run.jobs[0].status == "failed"  # a worker would retry it


def test_retries_run_at_once_when_asked_for() -> None:
    with cronbase.testing.inline(shop.app, retries=True) as run:
        shop.charge.defer(order_id=9, cents=0)  # fails every attempt: not raised
    [job] = run.jobs
    assert (job.status, job.attempts) == ("dead", 3)
