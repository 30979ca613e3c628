"""What encrypting a task costs (issue 38; payload/sealing.py): defer and drain, paired.

```sh
PYTHONPATH=src bench/.venv/bin/python -m bench.encryption            # ~1 minute
PYTHONPATH=src bench/.venv/bin/python -m bench.encryption --jobs 5000 --repeats 5
```

On the benchmark's own PostgreSQL (cluster.py), ``--repeats`` rounds, each in turn for a plain
task and the same task with ``encrypt=True`` (the order alternating between rounds, so neither
always runs on a warmer server):

- defer: ``--jobs`` jobs deferred one by one from one thread (a small payload of three
  arguments, as a web request would defer one), jobs/s;
- drain: a burst worker with the default concurrency runs them, each handler returning a small
  result (so the result is sealed too), jobs/s.

Reported: the median of each, and the encrypted/plain ratio of each round's pair.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import psycopg

import cronbase
from cronbase.db import migrate
from cronbase.payload.sealing import new_key

from .cluster import running_cluster

SCHEMA = "cronbase"


def one_round(url: str, jobs: int, encrypt: bool, keys: str) -> tuple[float, float]:
    app = cronbase.App(database_url=url, schema=SCHEMA, encryption_keys=keys)
    try:

        @app.task(encrypt=encrypt)
        def notify(user_id: int, email: str, token: str) -> dict[str, Any]:
            return {"sent_to": email}

        start = time.perf_counter()
        for n in range(jobs):
            notify.defer(user_id=n, email=f"user{n}@example.com", token="t" * 32)
        deferred = jobs / (time.perf_counter() - start)
        worker = app.worker(burst=True, install_signal_handlers=False, schedule=False)
        start = time.perf_counter()
        asyncio.run(worker.run())
        drained = jobs / (time.perf_counter() - start)
    finally:
        app.close()
    with psycopg.connect(url, autocommit=True) as conn:
        done = conn.execute(
            "SELECT count(*) FROM cronbase.jobs_history WHERE status = 'succeeded'"
        ).fetchone()
        assert done == (jobs,), f"the drain left jobs: {done}"
        conn.execute("TRUNCATE cronbase.jobs_history, cronbase.jobs, cronbase.job_attempts")
        conn.execute("VACUUM ANALYZE cronbase.jobs")
    return deferred, drained


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    keys = f"bench={new_key()}"
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    with running_cluster() as cluster:
        url = cluster.create_database("encryption")
        with psycopg.connect(url, autocommit=True) as conn:
            migrate.apply_migrations(conn, SCHEMA)
        for number in range(args.repeats):
            for encrypt in (False, True) if number % 2 == 0 else (True, False):
                runs[encrypt].append(one_round(url, args.jobs, encrypt, keys))
        version = cluster.version
    print(f"PostgreSQL {version}: {args.jobs:,} jobs a round, {args.repeats} rounds each")
    print("| | plain jobs/s | encrypted jobs/s | encrypted / plain (median of pairs) |")
    print("|---|---:|---:|---:|")
    for index, name in ((0, "defer, one by one"), (1, "drain, burst worker")):
        plain = [r[index] for r in runs[False]]
        sealed = [r[index] for r in runs[True]]
        ratio = statistics.median(s / p for s, p in zip(sealed, plain, strict=True))
        print(
            f"| {name} | {statistics.median(plain):,.0f} | {statistics.median(sealed):,.0f} "
            f"| {ratio:.2f} |"
        )


if __name__ == "__main__":
    main()
