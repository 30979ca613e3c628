"""examples/steering.py: handlers that snooze, cancel or give up on their own job; results, and
waiting for them.

Run ``python -m examples.steering`` from the repository root (the embedded PostgreSQL without
configuration): it starts a worker in a thread, defers a report export (which snoozes twice
while the report is "being built"), a charge for a refunded order (which cancels itself) and a
lookup that fails with a ValueError (not retried), then waits for each and prints how it ended.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import cronbase

app = cronbase.App()
checks: dict[int, int] = {}


# Snooze: run again later without counting an attempt (max_snoozes caps how often).
@app.task(max_snoozes=10)
def fetch_export(report_id: int) -> dict[str, object]:
    checks[report_id] = checks.get(report_id, 0) + 1
    if checks[report_id] < 3:  # not built yet: look again in 100 ms
        raise cronbase.Snooze(timedelta(milliseconds=100))
    return {"report_id": report_id, "rows": 1204}  # stored as the job's result


# Cancel: the job ends cancelled with the reason; it is not retried.
@app.task
def charge(order_id: int, refunded: bool) -> None:
    if refunded:
        raise cronbase.Cancel(f"order {order_id} was refunded")


# retry_on / dont_retry_on: only some exceptions are worth a retry.
@app.task(retry_on=(ConnectionError, TimeoutError), dont_retry_on=(ValueError,))
def lookup_customer(email: str) -> None:
    raise ValueError(f"not an email address: {email!r}")


def main() -> None:
    app.migrate()
    worker = app.worker(install_signal_handlers=False)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(worker.run(),))
    thread.start()

    export = fetch_export.defer(report_id=7)
    job = app.jobs.wait(export, timeout=30)  # woken by NOTIFY when the job is final
    print(
        f"export: {job.status.value}, result {job.result}, attempts {job.attempts}, "
        f"snoozes {job.snoozes}"
    )

    job = app.jobs.wait(charge.defer(order_id=812, refunded=True), timeout=30)
    print(f"charge: {job.status.value}, {job.last_error}")

    job = app.jobs.wait(lookup_customer.defer(email="nobody"), timeout=30)
    print(f"lookup: {job.status.value} after {job.attempts} attempt, {job.last_error}")
    loop.call_soon_threadsafe(worker.stop)
    thread.join()


if __name__ == "__main__":
    main()
