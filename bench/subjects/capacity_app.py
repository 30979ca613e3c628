"""bench.capacity's app for ``cronbase --app bench.subjects.capacity_app:app worker ...``: the
bench's no-op task, and ``sleepy``, which awaits 5-50 ms (uniform), so that jobs end at
different moments and each claim asks only for the slots freed since the last one, as a real
workload's do. Log level WARNING, as in ``cronbase_cli``."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import cronbase

from .cronbase_subject import make_app

logging.getLogger("cronbase").setLevel(logging.WARNING)


def make(url: str | None) -> cronbase.App:
    app = make_app(url)[0]

    @app.task(name="sleepy")
    async def sleepy(n: int) -> None:
        await asyncio.sleep(random.uniform(0.005, 0.05))

    return app


def preload(url: str, task: str, n: int) -> None:
    with make(url) as app:
        chosen: cronbase.Task[..., Any] = app.tasks[task]
        for first in range(0, n, 5000):
            chosen.defer_many([{"n": i} for i in range(first, min(n, first + 5000))])


app = make(None)
