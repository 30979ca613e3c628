"""examples/hooks.py: per-job context for every handler, outcome counts, and log lines that
say which job wrote them.

Run ``python -m examples.hooks`` from the repository root (the embedded PostgreSQL without
configuration): it defers two imports, one of which fails, runs a burst worker, and prints the
outcomes the on_job_end hook counted.
"""

from __future__ import annotations

import contextvars
import logging
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import cronbase

app = cronbase.App()
log = logging.getLogger("shop.imports")
current_tenant: contextvars.ContextVar[str | None] = contextvars.ContextVar("tenant", default=None)
outcomes: Counter[str] = Counter()


@app.middleware  # around every handler; a sync handler's middleware runs in its thread
def tenancy(job: cronbase.JobContext) -> Iterator[None]:
    token = current_tenant.set(str(job.payload.get("tenant", "")))
    try:
        yield
    finally:
        current_tenant.reset(token)


@app.on_job_end  # (job, outcome, error, duration), as each attempt ends
def count(
    job: cronbase.JobContext, outcome: str, error: BaseException | None, duration: timedelta
) -> None:
    outcomes[f"{job.task} {outcome}"] += 1
    # With Sentry: if error is not None: sentry_sdk.capture_exception(error)


@app.task(max_attempts=1)
def import_orders(tenant: str, day: str) -> None:
    log.info("importing orders of %s for %s", day, current_tenant.get())
    if day == "2026-02-30":
        raise ValueError(f"no such day: {day}")


if __name__ == "__main__":
    # Records logged while a job runs carry job_id, task and attempt (--log-format json adds them
    # as fields); here a format string shows two of them.
    handler = logging.StreamHandler()
    fmt = "%(name)s [job %(job_id)s attempt %(attempt)s]: %(message)s"
    handler.setFormatter(logging.Formatter(fmt, defaults={"job_id": "-", "attempt": "-"}))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    log.setLevel(logging.INFO)

    app.migrate()
    import_orders.defer(tenant="acme", day="2026-02-27")
    import_orders.defer(tenant="globex", day="2026-02-30")
    app.run_worker(burst=True)
    print(dict(sorted(outcomes.items())))
    # {'import_orders dead': 1, 'import_orders succeeded': 1}
