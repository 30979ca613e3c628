"""Runs one scenario inside the example Django project (examples/django_project) and prints what
it saw as JSON: ``python tests/integration/django_driver.py SCENARIO``.

test_django.py runs it in a subprocess, as Django's settings are global to a process; the
database is the project's DATABASE_URL. Every count is read on a connection of its own, so it
sees only what was committed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

PROJECT = Path(__file__).resolve().parents[2] / "examples" / "django_project"
sys.path.insert(0, str(PROJECT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")

import django  # noqa: E402  # after the settings module is known

django.setup()

from django.db import connection, connections, transaction  # noqa: E402
from shop.models import Order  # noqa: E402

from cronbase.contrib.django import get_app  # noqa: E402

SCHEMA = get_app().schema
# By name: shop.tasks' own (autodiscovered), or a user App's (settings.CRONBASE["APP"]).
confirm_order = get_app().get_task("confirm_order")


def committed_jobs() -> list[int]:
    """Order ids of the confirm_order jobs another connection sees (committed ones only)."""
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT (payload->>'order_id')::int FROM {SCHEMA}.jobs "
            "WHERE task = 'confirm_order' ORDER BY id"
        ).fetchall()
    return [row[0] for row in rows]


class Boom(Exception):
    pass


def commit() -> dict[str, Any]:
    with transaction.atomic():
        order = Order.objects.create(sku="commit", quantity=1)
        confirm_order.defer(order_id=order.id)
        many = confirm_order.defer_many([{"order_id": order.id + 1000}])
        # Options that reach the statement as parameters (interval, key), adapted by Django's
        # connection with Django's own adapters; the second finds the first by its key.
        later = confirm_order.configure(delay=timedelta(minutes=5), idempotency_key="o-1")
        keyed = [later.defer(order_id=order.id + 2000), later.defer(order_id=order.id + 2000)]
        inside = committed_jobs()
    return {
        "order": order.id,
        "many": many,
        "keyed": keyed,
        "inside": inside,
        "after": committed_jobs(),
    }


def rollback() -> dict[str, Any]:
    try:
        with transaction.atomic():
            order = Order.objects.create(sku="rollback", quantity=1)
            confirm_order.defer(order_id=order.id)
            raise Boom
    except Boom:
        pass
    return {"orders": Order.objects.filter(sku="rollback").count(), "after": committed_jobs()}


def savepoint() -> dict[str, Any]:
    with transaction.atomic():
        confirm_order.defer(order_id=1)
        try:
            with transaction.atomic():  # a savepoint: rolled back alone
                confirm_order.defer(order_id=2)
                raise Boom
        except Boom:
            pass
        with transaction.atomic():  # a savepoint that is released: kept
            confirm_order.defer(order_id=3)
        inside = committed_jobs()
    return {"inside": inside, "after": committed_jobs()}


def outside() -> dict[str, Any]:
    confirm_order.defer(order_id=7)
    # cronbase's own pool wrote it, committed at once: Django never connected.
    return {"after": committed_jobs(), "django_connected": connection.connection is not None}


def other_thread() -> dict[str, Any]:
    seen: list[list[int]] = []

    def defer_elsewhere() -> None:
        # Another thread is not in this thread's atomic block: its job commits at once.
        confirm_order.defer(order_id=9)
        seen.append(committed_jobs())

    with transaction.atomic():
        confirm_order.defer(order_id=8)
        thread = threading.Thread(target=defer_elsewhere)
        thread.start()
        thread.join()
        inside = committed_jobs()
    return {"thread": seen[0], "inside": inside, "after": committed_jobs()}


def view() -> dict[str, Any]:
    from django.test import Client

    response = Client().post("/orders", {"sku": "book", "quantity": "2"})
    return {"status": response.status_code, "body": response.json(), "after": committed_jobs()}


def migrate_in_atomic() -> dict[str, Any]:
    from django.core.management import call_command

    with transaction.atomic():
        call_command("migrate", verbosity=0)
        Order.objects.create(sku="after-migrate", quantity=1)
    return {"orders": Order.objects.filter(sku="after-migrate").count()}


def call_cronbase() -> dict[str, Any]:
    from django.core.management import CommandError, call_command

    call_command("cronbase", "enqueue", "confirm_order", "--payload", '{"order_id": 4}')
    failed: list[Any] = []
    try:
        call_command("cronbase", "enqueue", "no_such_task")
    except CommandError as exc:
        failed = [str(exc), exc.returncode]
    return {"after": committed_jobs(), "failed": failed}


def fresh_connections() -> dict[str, Any]:
    from cronbase.context import JobContext

    app = get_app()
    context = JobContext(
        id=1, task="confirm_order", queue="orders", attempt=1, max_attempts=3, payload={}
    )
    seen: dict[str, Any] = {}

    def handler() -> None:
        seen["at_start"] = connection.connection is not None
        seen["orders"] = Order.objects.count()  # the ORM connects again, as a view would
        seen["during"] = connection.connection is not None

    def worker_thread() -> None:
        connection.ensure_connection()  # as a previous job in this thread would have left it
        seen["before"] = connection.connection is not None
        app.hooks.call(context, handler, {})
        seen["after"] = connection.connection is not None

    thread = threading.Thread(target=worker_thread)
    thread.start()
    thread.join()

    async def async_handler() -> None:
        seen["async_ran"] = True

    # An async handler passes through the middleware untouched: nothing is logged.
    logged: list[str] = []
    handler_to_list = logging.Handler()
    handler_to_list.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("cronbase").addHandler(handler_to_list)
    connection.ensure_connection()
    asyncio.run(app.hooks.call_async(context, async_handler, {}))
    seen["async_logged"] = logged
    return seen


def follow() -> dict[str, Any]:
    """Django's connection moves to another database (OTHER_DATABASE), as the test runner moves it
    to test_<name>: the App follows at the next connect, and closes the pools it had."""
    app = get_app()
    old = app.db
    confirm_order.defer(order_id=1)  # the project's database, on cronbase's sync pool
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)  # never keeps a failure up
    thread.start()
    async_pool = asyncio.run_coroutine_threadsafe(app.async_pool(), loop).result(timeout=30)

    other = os.environ["OTHER_DATABASE"]
    # A copy of the alias's settings (as the test runner's connection to "postgres"): not followed.
    wrapper = connections["default"]
    copy = type(wrapper)({**wrapper.settings_dict, "NAME": other}, wrapper.alias)
    copy.ensure_connection()
    copy.close()
    followed_copy = app.db is not old

    connection.settings_dict["NAME"] = other
    connection.ensure_connection()
    confirm_order.defer(order_id=2)

    async def settled() -> None:
        # The old async pool's close, scheduled on its loop, and the pool's own tasks: all end.
        await asyncio.gather(*(asyncio.all_tasks() - {asyncio.current_task()}))

    asyncio.run_coroutine_threadsafe(settled(), loop).result(timeout=30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()
    with psycopg.connect(app.database_url, autocommit=True) as conn:
        there = [r[0] for r in conn.execute(f"SELECT payload->'order_id' FROM {SCHEMA}.jobs")]
    return {
        "followed_copy": followed_copy,
        "database": psycopg.conninfo.conninfo_to_dict(app.database_url)["dbname"] == other,
        "tasks_moved": confirm_order.db is app.db and app.jobs.db is app.db,
        "old_pool_closed": old._pool is None,
        "old_async_pool_closed": async_pool.closed,
        "after": committed_jobs(),
        "there": there,
    }


SCENARIOS: dict[str, Callable[[], dict[str, Any]]] = {
    f.__name__: f
    for f in (
        commit,
        rollback,
        savepoint,
        outside,
        other_thread,
        view,
        migrate_in_atomic,
        call_cronbase,
        fresh_connections,
        follow,
    )
}

if __name__ == "__main__":
    print(json.dumps(SCENARIOS[sys.argv[1]]()))
