"""PostgreSQL restarted or not there yet: workers wait and resume, producers recover, no attempt
is burnt and no job lost. Each test has a cluster of its own (tests/servers.py)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest

import cronbase
from tests.conftest import wait_for
from tests.e2e.harness import WorkerProcesses, is_registered, reset_test_tables
from tests.e2e.restart_app import make_app
from tests.servers import PostgresCluster
from tests.servers import make_cluster as make_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

MODULE = "tests.e2e.restart_app"
JOBS = 2000
# How soon after a restart a job enqueued then has run. Measured ~1.8 s on a quiet 2-core
# machine (the claim loop retries every second at most, the pool replaces dead connections,
# and without LISTEN yet the worker polls every second); 2 s would not be honest under CI load,
# where each of those steps can take a few times longer. Beyond 10 s, something waits that
# should not (a backoff without a cap, a pool that gave up).
PICKUP_AFTER_RESTART = 10.0


def migrated(cluster: PostgresCluster) -> str:
    url = cluster.create_database("app")
    cronbase.App(url).migrate()
    with psycopg.connect(url, autocommit=True) as conn:
        reset_test_tables(conn)
    return url


def scalar(url: str, query: str) -> Any:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def test_a_worker_started_before_the_database_waits_for_it(
    make_cluster: Callable[[], PostgresCluster], tmp_path: Path
) -> None:
    cluster = make_cluster()
    url = migrated(cluster)
    cluster.stop()
    with WorkerProcesses(url, tmp_path, module=MODULE) as workers:
        # A burst worker (cron) fails fast, naming the database.
        burst = workers.start("burst", "--burst")
        assert burst.wait_exit(timeout=60) != 0
        assert "cannot connect to database" in burst.log()
        # A long-running one waits, saying so once, and starts when the database does.
        waiting = workers.start("W")
        waiting.wait_for_log("database unreachable: connecting to the database failed", timeout=60)
        cluster.start()
        with psycopg.connect(url, autocommit=True) as conn:
            wait_for(partial(is_registered, conn, "W"), timeout=60, what="the worker to start")
        app = make_app(url)
        job_id = app.get_task("record_in_transaction").defer(n=1)
        wait_for(
            lambda: app.jobs.get(job_id).status == cronbase.JobStatus.SUCCEEDED,
            timeout=30,
            what="the job to run",
        )
        app.close()
        waiting.send(signal.SIGTERM)
        assert waiting.wait_exit(timeout=60) == 0
        # However long the server took to start, and whatever it answered meanwhile ("refused",
        # then "starting up" under load: two lines before), one line each way.
        assert waiting.log().count("database unreachable") == 1
        assert waiting.log().count("database reachable again") == 1


def test_an_outage_is_one_line_per_process_and_one_when_it_is_over(
    make_cluster: Callable[[], PostgresCluster], tmp_path: Path
) -> None:
    """issue 34: with the database stopped for 21 s, two worker processes wrote 114 warnings
    (each part of each worker, each kind of error, psycopg's pool at every reconnect)."""
    cluster = make_cluster()
    url = migrated(cluster)
    with WorkerProcesses(url, tmp_path, module=MODULE) as workers:
        both = [workers.start(name, "--poll-interval", "0.2") for name in ("A", "B")]
        with psycopg.connect(url, autocommit=True) as conn:
            for name in ("A", "B"):
                wait_for(partial(is_registered, conn, name), timeout=60, what=f"{name} to start")
        app = make_app(url)
        job_id = app.get_task("record_in_transaction").defer(n=1)  # every part works once
        wait_for(
            lambda: app.jobs.get(job_id).status == cronbase.JobStatus.SUCCEEDED,
            timeout=30,
            what="the job to run",
        )
        app.close()
        cluster.stop()
        for worker in both:
            worker.wait_for_log("database unreachable", timeout=60)
        # The outage lasts a while: every part fails and retries several times (claims every
        # 0.1-1 s, renewals, the listener, the pool's reconnects). Not a wait for anything, and
        # no count below depends on its length.
        time.sleep(5)
        cluster.start()
        for worker in both:
            worker.wait_for_log("database reachable again", timeout=60)
            worker.send(signal.SIGTERM)
            assert worker.wait_exit(timeout=60) == 0
        for worker in both:
            log = worker.log()
            warnings = [
                line.split(" WARNING ", 1)[1] for line in log.splitlines() if " WARNING " in line
            ]
            assert len(warnings) == 2, log
            assert warnings[0].startswith("database unreachable: "), log
            assert warnings[1].startswith("database reachable again after"), log
            assert "error connecting" not in log, log  # psycopg's pool, folded in


class Producer(threading.Thread):
    """Defers a job every few milliseconds; records which calls failed and when they began."""

    def __init__(self, app: cronbase.App) -> None:
        super().__init__(daemon=True)
        self.task = app.get_task("record_in_transaction")
        self.stop = threading.Event()
        self.acknowledged: list[int] = []
        # (when the call began, when it raised, the first line of what it raised)
        self.failures: list[tuple[float, float, str]] = []
        self.failed_ns: list[int] = []  # the payload n of each defer that raised

    def run(self) -> None:
        n = 1_000_000
        while not self.stop.is_set():
            began = time.monotonic()
            try:
                self.acknowledged.append(self.task.defer(n=n))
            except (cronbase.CronbaseError, psycopg.Error) as exc:
                self.failures.append((began, time.monotonic(), str(exc).splitlines()[0]))
                self.failed_ns.append(n)
            n += 1
            self.stop.wait(0.01)


def test_two_immediate_restarts_mid_drain_lose_nothing_and_burn_no_attempt(
    make_cluster: Callable[[], PostgresCluster], tmp_path: Path
) -> None:
    cluster = make_cluster()
    url = migrated(cluster)
    app = make_app(url)
    with WorkerProcesses(url, tmp_path, module=MODULE) as workers:
        names = ("A", "B")
        processes = [workers.start(name, "--concurrency", "8") for name in names]
        with psycopg.connect(url, autocommit=True) as conn:
            for name in names:
                wait_for(partial(is_registered, conn, name), timeout=60, what=f"worker {name}")
        ids = app.get_task("record_in_transaction").defer_many([{"n": n} for n in range(JOBS)])
        producer = Producer(app)
        producer.start()
        restarting: list[float] = []
        recovered: list[float] = []
        for round_ in (1, 2):
            done = scalar(url, "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'succeeded'")
            wait_for(
                lambda done=done: (
                    scalar(url, "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'succeeded'")
                    >= done + 300
                ),
                timeout=120,
                what=f"jobs to run before restart {round_}",
            )
            restarting.append(time.monotonic())
            cluster.restart("immediate")  # returns once the server accepts connections
            recovered.append(time.monotonic())
            # A job enqueued right after the restart: how long until it has run.
            first = app.get_task("record_in_transaction").defer(n=-round_)
            enqueued = time.monotonic()
            wait_for(
                lambda first=first: app.jobs.get(first).status == cronbase.JobStatus.SUCCEEDED,
                timeout=60,  # then fail with the wait's own message, not hang
                what="the job enqueued after the restart",
            )
            took = time.monotonic() - enqueued
            print(
                f"restart {round_}: a job enqueued after it ran {took:.2f}s later "
                f"(asserted: within {PICKUP_AFTER_RESTART:g}s)"
            )
            assert took < PICKUP_AFTER_RESTART, (
                f"restart {round_}: a job enqueued after the restart ran {took:.2f}s later, "
                f"not within {PICKUP_AFTER_RESTART:g}s"
            )
        producer.stop.set()
        producer.join(30)
        everything = [*ids, *producer.acknowledged]
        wait_for(
            lambda: (
                scalar(url, "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'succeeded'")
                >= len(everything) + 2
            ),
            timeout=120,
            what="every acknowledged job to succeed",
        )
        with psycopg.connect(url, autocommit=True) as conn:
            statuses = dict(
                conn.execute("SELECT status, count(*) FROM cronbase.jobs_all GROUP BY 1").fetchall()
            )
            executions = conn.execute("SELECT job_id FROM test_executions").fetchall()
            burnt = conn.execute(
                "SELECT count(*) FROM cronbase.jobs_all WHERE attempts <> 1"
            ).fetchone()
            released = conn.execute(
                "SELECT count(*) FROM cronbase.job_attempts_all WHERE outcome = 'released'"
            ).fetchone()
            # The producer's jobs beyond the acknowledged ones: a defer whose COMMIT reached the
            # server as it was killed raised (its reply was lost), yet its job exists.
            extra = conn.execute(
                "SELECT (payload->>'n')::bigint FROM cronbase.jobs_all "
                "WHERE (payload->>'n')::bigint >= 1000000 AND id <> ALL (%s)",
                [producer.acknowledged],
            ).fetchall()
        print(
            f"restarts: 2; acknowledged {len(everything) + 2}; producer failures "
            f"{len(producer.failures)} (after recovery: "
            f"{sum(1 for began, _, _ in producer.failures if began > recovered[0] + 0.5)}); "
            f"attempts handed back {released[0] if released else 0}; attempts burnt "
            f"{burnt[0] if burnt else '?'}"
        )
        t0 = restarting[0]
        print(
            "restarts (s from the first): "
            + ", ".join(
                f"{a - t0:.2f}-{b - t0:.2f}" for a, b in zip(restarting, recovered, strict=True)
            )
            + "; failed calls: "
            + ", ".join(f"{a - t0:.2f}-{b - t0:.2f} {f}" for a, b, f in producer.failures)
        )
        # Only defers that raised may have left such a job.
        assert {n for (n,) in extra} <= set(producer.failed_ns), (extra, producer.failures)
        # Nothing lost, nothing twice: each job's transaction() committed exactly once.
        succeeded = len(everything) + 2 + len(extra)
        assert statuses == {"succeeded": succeeded}, statuses
        assert len(executions) == succeeded
        assert len({job_id for (job_id,) in executions}) == len(executions)
        # No attempt burnt by the restarts: a job whose transaction() lost its connection was
        # handed back, not failed.
        assert burnt == (0,)
        # A producer call that began once the server was back (and the pools had a moment to
        # see it) and ended before the next restart began did not fail. (One that began just
        # before a restart may be descheduled on a busy machine and meet the restart in flight.)
        windows = list(zip(recovered, [*restarting[1:], float("inf")], strict=True))
        late = [
            f
            for began, ended, f in producer.failures
            for r, end in windows
            if r + 0.5 < began and ended < end
        ]
        assert late == [], late
        for process in processes:
            process.send(signal.SIGTERM)
        assert [p.wait_exit(timeout=60) for p in processes] == [0, 0]
    app.close()
