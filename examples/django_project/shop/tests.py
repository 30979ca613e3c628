"""The shop's tests, for Django's test runner: ``python manage.py test shop``. cronbase's App follows
Django to its test database, so the jobs these tests defer and run never touch the shop's own."""

# Django's test runner is unittest's: its assertEqual says what differed, a bare assert does not.
# ruff: noqa: PT009

from django.test import TestCase, TransactionTestCase

import cronbase.testing
from cronbase.contrib.django import app

from .models import Order
from .tasks import confirm_order


class PlaceOrderTests(TestCase):
    # Each test runs in a transaction rolled back after it: a job deferred in it (a defer in
    # atomic(), which the test is) is written in that transaction, and goes with it. Reads in the
    # test (cronbase.testing.enqueued, app.jobs) see it: they go through that transaction too.

    def test_placing_an_order_enqueues_its_confirmation(self) -> None:
        response = self.client.post("/orders", {"sku": "book", "quantity": "2"})
        self.assertEqual(response.status_code, 201)
        order_id = response.json()["order"]
        cronbase.testing.enqueued(app, task=confirm_order, order_id=order_id).assert_one()

    def test_inline_mode_confirms_the_order_at_once(self) -> None:
        with cronbase.testing.inline(app) as run:
            self.client.post("/orders", {"sku": "book", "quantity": "2"})
        self.assertEqual([job.status for job in run.jobs], ["succeeded"])
        self.assertEqual(Order.objects.get().status, "confirmed")


class ConfirmOrderTests(TransactionTestCase):
    # Each test commits for real: a worker in this process runs what it defers.

    def test_the_worker_confirms_an_order(self) -> None:
        order = Order.objects.create(sku="pen", quantity=1)
        confirm_order.defer(order_id=order.id)  # no atomic(): committed at once

        drained = cronbase.testing.drain(app)  # a burst worker, here in the test's process

        drained.assert_all_succeeded()
        self.assertEqual([job.task for job in drained], ["confirm_order"])
        order.refresh_from_db()
        self.assertEqual(order.status, "confirmed")
        cronbase.testing.enqueued(
            app, task=confirm_order, status="succeeded", order_id=order.id
        ).assert_one()
