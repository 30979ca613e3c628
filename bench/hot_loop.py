"""Where a drain at concurrency 10 loses to the raw ceiling: the same claim loop built up a layer
at a time, from psycopg's sync API to the cronbase worker (bench/HISTORY.md, "The worker's hot
loop").

```sh
PYTHONPATH=src bench/.venv/bin/python -m bench.hot_loop               # ~3 minutes
PYTHONPATH=src bench/.venv/bin/python -m bench.hot_loop --jobs 5000 --repeats 1   # a smoke run
```

Every loop runs cronbase's own claim statement (``claim_jobs``, 10 jobs a claim, each claim
carrying the previous batch's successes, one durable commit per claim) on N pre-loaded no-op
jobs in its own PostgreSQL (``cluster.py``), until none is due. The layers:

- ``sync``: psycopg's sync connection (bench's "cronbase SQL, no library");
- ``async``: an AsyncConnection, one coroutine, nothing else;
- ``async + pool``: each claim on a connection taken from a psycopg_pool and given back;
- ``async + task per job``: an asyncio task per claimed job, awaited before the next claim;
- ``async + pool + task per job``: both;
- ``worker``: ``app.run_worker(burst=True, concurrency=10)``.

The figures interleave (each repeat runs every loop once), and the table gives each loop's
median and its ratio to ``sync``: what the async driver, the pool, the tasks and then the
worker's own Python (context, hooks, outcomes, metrics, leases) each cost.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
import psycopg_pool

import cronbase
from cronbase.worker.claim import claim_jobs, claim_jobs_sync, claim_params

from .cluster import running_cluster
from .subjects import cronbase_subject

BATCH = 10


def _params(done: list[Any]) -> dict[str, Any]:
    return claim_params(done=done, limit=BATCH, worker="hot-loop")


def sync_loop(url: str, q: Any) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        jobs: list[Any] = []
        while True:
            jobs = claim_jobs_sync(conn, q, _params(jobs)).jobs
            if not jobs:
                return


async def _noop(job: Any) -> None:
    return None


async def async_loop(url: str, q: Any, *, pool: bool, tasks: bool) -> None:
    source: Any = (
        psycopg_pool.AsyncConnectionPool(url, kwargs={"autocommit": True}, min_size=2, open=False)
        if pool
        else await psycopg.AsyncConnection.connect(url, autocommit=True)
    )
    async with source:
        jobs: list[Any] = []
        while True:
            if pool:
                async with source.connection() as conn:
                    result = await claim_jobs(conn, q, _params(jobs))
            else:
                result = await claim_jobs(source, q, _params(jobs))
            jobs = result.jobs
            if not jobs:
                return
            if tasks:
                await asyncio.wait([asyncio.create_task(_noop(job)) for job in jobs])


def worker_loop(url: str, q: Any) -> None:
    cronbase_subject.drain_child(lambda: None, url, BATCH)


def loops(url: str, q: Any) -> dict[str, Callable[[], None]]:
    def run_async(**kwargs: bool) -> Callable[[], None]:
        return lambda: asyncio.run(async_loop(url, q, **kwargs))

    return {
        "sync": lambda: sync_loop(url, q),
        "async": run_async(pool=False, tasks=False),
        "async + pool": run_async(pool=True, tasks=False),
        "async + task per job": run_async(pool=False, tasks=True),
        "async + pool + task per job": run_async(pool=True, tasks=True),
        "worker": lambda: worker_loop(url, q),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {}
    with running_cluster() as cluster:
        url = cluster.create_database("cronbase_subject")
        cronbase_subject.setup(url)
        q = cronbase.App(database_url=url).queries
        for _ in range(args.repeats):
            for name, run in loops(url, q).items():
                cronbase_subject.reset(url)
                cronbase_subject.preload(url, args.jobs)
                start = time.perf_counter()
                run()
                elapsed = time.perf_counter() - start
                done = cronbase_subject.count_done(url)
                if done != args.jobs:
                    raise SystemExit(f"{name}: {done} of {args.jobs} jobs succeeded")
                rates.setdefault(name, []).append(done / elapsed)
                print(f"{name}: {done / elapsed:,.0f} jobs/s", flush=True)
    medians = {name: statistics.median(values) for name, values in rates.items()}
    print(f"\n| loop ({args.jobs:,} jobs, batch {BATCH}) | jobs/s | ÷ sync |\n|---|---:|---:|")
    for name, rate in medians.items():
        print(f"| {name} | {rate:,.0f} | {rate / medians['sync']:.2f}x |")


if __name__ == "__main__":
    main()
