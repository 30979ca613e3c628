"""examples/workflows.py: a monthly billing run as a chain, an import fanned out to rows and
gathered, and a durable handler that charges once, sleeps and waits for a payment event.

Run ``python -m examples.workflows`` from the repository root (the embedded PostgreSQL without
configuration): it starts a worker in a thread, defers the three workflows, emits the payment
event once the invoice job waits for it, and prints how each ended.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import cronbase

app = cronbase.App()
charged: list[int] = []


# A chain: each job runs once the one before succeeded, and receives its result as `previous`.
@app.task
def charge_customers(month: str) -> int:
    return 42  # customers charged


@app.task
def email_receipts(previous: int, month: str) -> str:
    return f"{previous} receipts for {month}"


@app.task
def billing_report(previous: str) -> str:
    return f"report: {previous}"


# A group and its callback: the rows side by side, then one job with every result, in order.
@app.task
def import_row(row: int) -> int:
    return row * 10


@app.task
def summarise(previous: list[int]) -> dict[str, int]:
    return {"rows": len(previous), "total": sum(previous)}


# A durable handler: the charge runs once however often the job runs again; sleep() and
# wait_for() free the worker while the job waits, and it resumes on any worker.
def charge_card(invoice_id: int) -> str:
    charged.append(invoice_id)
    return f"ch_{invoice_id}"


@app.task
def settle_invoice(invoice_id: int) -> dict[str, object]:
    job = cronbase.current_job()
    charge = job.step("charge", charge_card, invoice_id)
    job.sleep(timedelta(milliseconds=300))  # a grace period, days in real life
    paid = job.wait_for(f"invoice_paid:{invoice_id}", timeout=timedelta(minutes=5))
    return {"charge": charge, "paid": paid["amount"]}


def main() -> None:
    app.migrate()
    worker = app.worker(install_signal_handlers=False, poll_interval=timedelta(seconds=0.2))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(worker.run(),))
    thread.start()

    month = "2026-10"
    billing = cronbase.chain(
        charge_customers.s(month=month), email_receipts.s(month=month), billing_report.s()
    ).defer()  # one statement for the whole chain; the id follows its last job
    print(app.jobs.wait(billing, timeout=30).result)

    imported = cronbase.group([import_row.s(row=n) for n in range(100)]).then(summarise.s())
    print(app.jobs.wait(imported.defer(), timeout=30).result)

    invoice = settle_invoice.defer(invoice_id=812)
    while app.jobs.get(invoice).waiting_for is None:  # charged, slept, now waiting
        time.sleep(0.05)
    app.events.emit("invoice_paid:812", {"amount": 120})
    job = app.jobs.wait(invoice, timeout=30)
    print(f"invoice: {job.result}, charged {len(charged)} time(s), attempts {job.attempts}")
    loop.call_soon_threadsafe(worker.stop)
    thread.join()


if __name__ == "__main__":
    main()
