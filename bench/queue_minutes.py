"""What the console's minute roll-up costs (issue 37; worker/rollup.py, db/sql/queue_minutes.sql).

```sh
PYTHONPATH=src bench/.venv/bin/python -m bench.queue_minutes            # ~1 minute
PYTHONPATH=src bench/.venv/bin/python -m bench.queue_minutes --due 20000 --finished 20000
```

On the benchmark's own PostgreSQL (cluster.py): ``--due`` queued jobs due now and a tenth as
many running, over four queues, and ``--finished`` jobs finished in the last hour in the
history, vacuumed and analysed. Then, ``--repeats`` times each:

- the winner's roll-up of a minute (the marker row deleted before each, so each run wins):
  what one worker of the fleet pays once a minute;
- a try that finds the minute rolled up: what every other worker pays, at most four times a
  minute.

The drain's own figures are ``bench.hot_loop``'s: the roll-up runs in the reaper's round, not on
the claim or completion path.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import psycopg

import cronbase
from cronbase.db import migrate
from cronbase.worker.rollup import roll_up

from .cluster import running_cluster

SCHEMA = "cronbase"


def load(url: str, due: int, finished: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        migrate.apply_migrations(conn, SCHEMA)
        conn.execute(
            "INSERT INTO cronbase.jobs (task, queue, status, run_at)"
            " SELECT 't', 'q' || (g %% 4), 'queued', now() - interval '5 minutes'"
            " FROM generate_series(1, %s) g",
            [due],
        )
        conn.execute(
            "INSERT INTO cronbase.jobs (task, queue, status, run_at, started_at, locked_by,"
            " locked_until, lease_token, attempts)"
            " SELECT 't', 'q' || (g %% 4), 'running', now() - interval '2 minutes',"
            " now() - (g %% 120) * interval '1 second', 'w', now() + interval '1 hour',"
            " gen_random_uuid(), 1 FROM generate_series(1, %s) g",
            [due // 10],
        )
        # The history's day partitions come with the migrations (a week ahead); an hour of
        # successes, one every so often, each picked up a second after it was due.
        conn.execute(
            "INSERT INTO cronbase.jobs_history (id, task, queue, status, run_at, created_at,"
            " started_at, finished_at)"
            " SELECT 100000000 + g, 't', 'q' || (g %% 4), 'succeeded',"
            " now() - (g %% 3600) * interval '1 second' - interval '1 second',"
            " now() - (g %% 3600) * interval '1 second' - interval '2 seconds',"
            " now() - (g %% 3600) * interval '1 second',"
            " now() - (g %% 3600) * interval '1 second' + interval '100 milliseconds'"
            " FROM generate_series(1, %s) g",
            [finished],
        )
        conn.execute("VACUUM ANALYZE")


async def timed(app: cronbase.App, url: str, *, win: bool) -> float:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        if win:
            await conn.execute("DELETE FROM cronbase.queue_minutes")
        start = time.perf_counter()
        minute = await roll_up(app.db, conn)
        took = time.perf_counter() - start
    assert (minute is not None) == win, "a roll-up won or lost against the setup"
    return took * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--due", type=int, default=200_000)
    parser.add_argument("--finished", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with running_cluster() as cluster:
        url = cluster.create_database("rollup")
        load(url, args.due, args.finished)
        app = cronbase.App(database_url=url, schema=SCHEMA)
        try:
            won = [asyncio.run(timed(app, url, win=True)) for _ in range(args.repeats)]
            lost = [asyncio.run(timed(app, url, win=False)) for _ in range(args.repeats)]
        finally:
            app.close()
        print(
            f"PostgreSQL {cluster.version}: {args.due:,} due and {args.due // 10:,} running jobs, "
            f"{args.finished:,} finished in the last hour"
        )
    print("| try | median ms | min | max |")
    print("|---|---:|---:|---:|")
    for name, times in (("the winner's roll-up", won), ("a try that finds it done", lost)):
        print(f"| {name} | {statistics.median(times):.1f} | {min(times):.1f} | {max(times):.1f} |")


if __name__ == "__main__":
    main()
