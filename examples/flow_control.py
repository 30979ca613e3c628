"""examples/flow_control.py: limits that hold across every worker, and a queue per worker slot.

Run ``python -m examples.flow_control`` from the repository root (the embedded PostgreSQL
without configuration): it defers syncs for three tenants and a batch of API calls, runs two
burst workers side by side, and prints what the limits allowed: at most one sync per tenant at
once, at most three exports at once, at most 10 API calls in any second.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from datetime import timedelta

import cronbase

app = cronbase.App()
running: defaultdict[str, int] = defaultdict(int)
most: defaultdict[str, int] = defaultdict(int)
calls: list[float] = []
lock = threading.Lock()


def track(group: str, seconds: float) -> None:
    with lock:
        running[group] += 1
        most[group] = max(most[group], running[group])
    time.sleep(seconds)
    with lock:
        running[group] -= 1


# At most one sync per tenant at once, across all workers; other tenants' syncs run meanwhile.
@app.task(concurrency_key="tenant:{tenant_id}", key_concurrency=1)
def sync_tenant(tenant_id: int, page: int) -> None:
    track(f"tenant {tenant_id}", 0.05)


# At most three exports at once, whatever the number of workers.
@app.task(global_concurrency=3)
def export_report(report_id: int) -> None:
    track("exports", 0.05)


# At most 10 calls in any one-second window (a sliding window: no burst of 20 at a window edge).
@app.task(rate_limit="10/second")
def call_partner_api(order_id: int) -> None:
    with lock:
        calls.append(time.monotonic())


# One digest per account per hour: a second defer in the hour returns the first job.
@app.task(queue="reports", unique_for=timedelta(hours=1), unique_key="{account_id}")
def hourly_digest(account_id: int) -> None:
    track("digests", 0.0)


if __name__ == "__main__":
    app.migrate()
    sync_tenant.defer_many([{"tenant_id": t, "page": p} for t in (1, 2, 3) for p in range(5)])
    export_report.defer_many([{"report_id": n} for n in range(12)])
    call_partner_api.defer_many([{"order_id": n} for n in range(25)])
    # A second defer in the same hour returns the first job's id.
    assert hourly_digest.defer(account_id=7) == hourly_digest.defer(account_id=7)

    # Two workers at once, as two hosts would; each gives the reports queue its own slot.
    workers = [
        threading.Thread(
            target=app.run_worker,
            kwargs={
                "queues": {"default": 8, "reports": 1},
                "burst": True,
                "install_signal_handlers": False,
            },
        )
        for _ in range(2)
    ]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for group in sorted(most):
        print(f"{group}: at most {most[group]} at once")
    # Handlers start a few ms after their claims (the limit counts claims): 0.95 s allows for it.
    busiest = max(sum(1 for c in calls if t <= c < t + 0.95) for t in calls)
    print(f"api calls: {len(calls)}, at most {busiest} in any second")
    # 25 calls at 10 per second: the third ten cannot start before 2 s have passed.
    print(f"took at least 2 s: {time.monotonic() - started >= 2.0}")
