"""The rule the CLI and the dashboard share: no operator action on a queue nothing uses, unless
forced (cronbase.operations.queues.Queues.check_used), on real PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.operations.queues import KNOWN_SHOWN, check_queue_used


def test_a_queue_nothing_uses_is_refused_unless_forced(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    with pytest.raises(cronbase.InvalidNameError) as refused:
        app.queues.check_used("emials", task_queues=["emails"])
    assert str(refused.value) == (
        "no task, job or worker uses queue 'emials' (known queues: emails)"
    )
    app.queues.check_used("emials", task_queues=["emails"], force=True)
    # A bad name is refused as such, forced or not.
    with pytest.raises(cronbase.InvalidNameError, match="invalid queue name"):
        app.queues.check_used("a b", force=True)

    # In use: a task's queue (given), a job's, a worker's, an earlier pause's.
    app.queues.check_used("emails", task_queues=["emails"])
    db.execute("INSERT INTO cronbase.jobs (task, queue, payload) VALUES ('t', 'jobs_q', '{}')")
    db.execute(
        "INSERT INTO cronbase.workers (id, hostname, pid, queues, concurrency, last_seen_at)"
        " VALUES ('w1', 'web-1', 1, ARRAY['worker_q'], 1, now() - interval '1 day')"
    )
    app.queues.pause("paused_q")
    for name in ("jobs_q", "worker_q", "paused_q"):
        app.queues.check_used(name)

    async def the_async_twin() -> None:
        try:
            for name in ("jobs_q", "worker_q", "paused_q"):
                await app.queues.check_used_async(name)
            with pytest.raises(
                cronbase.InvalidNameError, match=r"'nosuch' \(known queues: jobs_q, "
            ):
                await app.queues.check_used_async("nosuch")
        finally:
            await app.aclose()

    asyncio.run(the_async_twin())


def test_a_refusal_lists_a_bounded_number_of_queues() -> None:
    many = [f"q{n:03d}" for n in range(KNOWN_SHOWN + 5)]
    with pytest.raises(cronbase.InvalidNameError) as refused:
        check_queue_used("nosuch", many)
    message = str(refused.value)
    assert message.endswith(f"q{KNOWN_SHOWN - 1:03d} and 5 more)")
    assert "\n" not in message
    assert check_queue_used("q001", many) == "q001"
