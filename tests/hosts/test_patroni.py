"""cronbase on a real high-availability cluster: three PostgreSQL 15 nodes under Patroni, one
etcd (``patroni.py``), reached with the documented multi-host URL
(``target_session_attrs=read-write``). Worker processes of ``tests/e2e/failover_app.py`` drain
jobs whose effect is a line in a file (through ``effects.once``, reconciled against the file)
and a row written in the job's ``transaction()``, while a producer thread defers more.

- synchronous_mode on, the leader SIGKILLed twice (its Patroni and its PostgreSQL) and brought
  back as a replica each time: every acknowledged defer ends succeeded, no effect runs twice, no
  transactional write twice, the workers never exit, the producer fails only during a switch,
  and LISTEN follows the new leader;
- a planned ``patronictl switchover`` under load: the same;
- synchronous_mode off: what asynchronous replication loses, measured: once at a kill under
  full load, once with the replicas held behind (their WAL senders stopped) for a known set of
  acknowledged defers. The loss is always the newest of what the leader acknowledged.

Each prints its figures (kill -> new leader, -> first job finished, -> first acknowledged defer;
the longest pause of completions and of acknowledged defers), gathered by ``make test``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

import cronbase
from tests.conftest import wait_for
from tests.e2e import failover_app
from tests.e2e.harness import WorkerProcesses
from tests.e2e.producer import Call, Producer
from tests.hosts import figures
from tests.hosts.patroni import PatroniCluster, PatroniNode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]

FIRST = figures.scaled(300, least=120)
# Jobs succeeded between one blow and the next: each blow lands mid-drain.
BETWEEN = figures.scaled(100, least=40)
# Acknowledged defers after the last blow before the producer stops.
DEFERS_AFTER = 40
# Acknowledged defers while the replicas are held behind (asynchronous replication).
BEHIND = 30
WORKERS = ("A", "B", "C")
DRAIN_TIMEOUT = 180.0


@dataclass
class Blow:
    """One failover or switchover, timed with time.monotonic() (``*_wall``: datetime)."""

    kind: str
    old: str
    started: float
    started_wall: datetime
    done: float  # kill() or patronictl returned: the old leader takes no more commits
    done_wall: datetime
    new: str = ""
    leader_at: float = 0.0  # the new leader accepts writes
    rejoined_s: float | None = None  # kill: the old node back as a streaming replica


@pytest.fixture
def cluster_factory() -> Any:
    made: list[PatroniCluster] = []

    def make(*, synchronous: bool) -> PatroniCluster:
        cluster = PatroniCluster(synchronous=synchronous)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()


class Drain:
    """The application on the cluster: database ``app`` (migrated), three worker processes and a
    producer thread, all on the multi-host URL; a first batch of FIRST jobs."""

    def __init__(self, cluster: PatroniCluster, folder: Path, workers: WorkerProcesses) -> None:
        self.cluster = cluster
        self.folder = folder
        self.url = cluster.create_database("app")
        migrator = cronbase.App(self.url)
        migrator.migrate()
        migrator.close()
        with self.connect() as conn:
            conn.execute(failover_app.TABLES)
        self.workers = workers
        self.processes = [workers.start(name, "--concurrency", "4") for name in WORKERS]
        wait_for(
            lambda: self.value("SELECT count(*) FROM cronbase.workers") == len(WORKERS),
            timeout=60,
            what="the workers to register",
        )
        self.app = failover_app.make_app(self.url)
        deliver = self.app.get_task("deliver")
        self.first_ids = deliver.defer_many([{"n": n} for n in range(FIRST)])
        self.producer = Producer(deliver, FIRST)
        self.producer.start()
        self.blows: list[Blow] = []

    def connect(self) -> psycopg.Connection[Any]:
        """A connection to whichever node is the leader now (the multi-host URL)."""
        return psycopg.connect(self.url, autocommit=True, connect_timeout=3)

    def value(self, query: Any, params: Any = None) -> Any:
        """The first column of the first row, read on the leader; None while there is none."""
        try:
            with self.connect() as conn:
                row = conn.execute(query, params).fetchone()
        except psycopg.OperationalError:
            return None
        return None if row is None else row[0]

    def succeeded(self) -> int:
        return int(
            self.value("SELECT count(*) FROM cronbase.jobs_all WHERE status = 'succeeded'") or 0
        )

    def wait_progress(self, jobs: int) -> None:
        """Until ``jobs`` more jobs have succeeded (mid-drain), from now."""
        target = self.succeeded() + jobs
        wait_for(
            lambda: self.succeeded() >= target, timeout=120, what=f"{jobs} more jobs to succeed"
        )

    # -- blows -----------------------------------------------------------------------------------

    def kill_leader(self, *, check_promoted: PatroniNode | None = None) -> Blow:
        """SIGKILL the leader's Patroni and PostgreSQL; wait for the new leader; start the old
        node again and wait until it streams as a replica."""
        old = self.cluster.wait_leader()
        blow = Blow("kill", old.name, time.monotonic(), datetime.now(UTC), 0.0, datetime.now(UTC))
        old.kill()
        blow.done, blow.done_wall = time.monotonic(), datetime.now(UTC)
        new = self.cluster.wait_leader(other_than=old, timeout=90)
        blow.new, blow.leader_at = new.name, time.monotonic()
        if check_promoted is not None:
            assert new is check_promoted, f"{new.name} promoted, not {check_promoted.name}"
        old.start()
        self.cluster.wait_healthy(timeout=120)
        blow.rejoined_s = round(time.monotonic() - blow.done, 2)
        roles = {m["name"]: m.get("role") for m in self.cluster.members()}
        assert roles[old.name] in ("replica", "sync_standby"), roles
        self.blows.append(blow)
        return blow

    def switchover(self) -> Blow:
        old = self.cluster.wait_leader()
        candidate = self.cluster.sync_standby()
        blow = Blow(
            "switchover", old.name, time.monotonic(), datetime.now(UTC), 0.0, datetime.now(UTC)
        )
        self.cluster.switchover(candidate)
        blow.done, blow.done_wall = time.monotonic(), datetime.now(UTC)
        new = self.cluster.wait_leader(other_than=old, timeout=60)
        blow.new, blow.leader_at = new.name, time.monotonic()
        assert new is candidate
        self.cluster.wait_healthy(timeout=120)
        self.blows.append(blow)
        return blow

    def acknowledged_after(self, moment: float) -> int:
        return sum(1 for c in self.producer.calls if c.ids is not None and c.started > moment)

    def wait_acknowledged_after(self, moment: float, count: int) -> None:
        wait_for(
            lambda: self.acknowledged_after(moment) >= count,
            timeout=90,
            what=f"{count} acknowledged defers",
        )

    # -- the end ---------------------------------------------------------------------------------

    def stop_producer(self) -> list[Call]:
        self.producer.stop()
        return list(self.producer.calls)

    def acknowledged(self, calls: list[Call]) -> set[int]:
        return set(self.first_ids) | {i for c in calls if c.ids is not None for i in c.ids}

    def wait_all_succeeded(self) -> None:
        def done() -> bool:
            counts = self.value(
                "SELECT count(*) FILTER (WHERE status <> 'succeeded') FROM cronbase.jobs_all"
            )
            return counts == 0

        wait_for(done, timeout=DRAIN_TIMEOUT, what="every job to succeed")

    def timing(self, calls: list[Call]) -> dict[str, Any]:
        """Per blow, from its start: to the new leader accepting writes, to the first job
        finished after it, to the first acknowledged defer; and the longest pause between
        completions, and between acknowledged defers, from its start to those firsts."""
        with self.connect() as conn:
            finished = [
                row[0]
                for row in conn.execute(
                    "SELECT finished_at FROM cronbase.jobs_all WHERE finished_at IS NOT NULL "
                    "ORDER BY finished_at"
                ).fetchall()
            ]
        acks = sorted(c.ended for c in calls if c.ids is not None)
        out: dict[str, Any] = {}
        for k, blow in enumerate(self.blows, 1):
            # A backend may commit while kill() signals the others: a job finished once kill()
            # returned was finished by the new leader (test_failover.py does the same).
            first_job = next(f for f in finished if f > blow.done_wall)
            first_ack = next(a for a in acks if a > blow.done)
            jobs = [blow.started_wall, *(f for f in finished if blow.started_wall < f <= first_job)]
            acked = [blow.started, *(a for a in acks if blow.started < a <= first_ack)]
            job_pause = max((b - a).total_seconds() for a, b in itertools.pairwise(jobs))
            ack_pause = max(b - a for a, b in itertools.pairwise(acked))
            out[f"{k}_{blow.kind}"] = (
                f"{blow.old} -> {blow.new}: new leader {blow.leader_at - blow.started:.2f}s, "
                f"first job finished {(first_job - blow.started_wall).total_seconds():.2f}s, "
                f"first acknowledged defer {first_ack - blow.started:.2f}s; longest pause of "
                f"completions {job_pause:.2f}s, of acknowledged defers {ack_pause:.2f}s"
                + (
                    f"; old leader back as a replica {blow.rejoined_s:.1f}s"
                    if blow.rejoined_s
                    else ""
                )
            )
        return out

    def failed_outside_blows(self, calls: list[Call]) -> list[Call]:
        """Failed defers that no blow explains: each must overlap a blow, from its start to the
        first acknowledged defer after it."""
        firsts = [
            min((c.ended for c in calls if c.ids is not None and c.started > b.done), default=1e18)
            for b in self.blows
        ]
        return [
            c
            for c in calls
            if c.ids is None
            and not any(
                c.ended >= b.started and c.started <= first
                for b, first in zip(self.blows, firsts, strict=True)
            )
        ]

    def delivered_twice(self) -> dict[str, int]:
        counts = failover_app.delivery_counts(self.folder / failover_app.DELIVERIES)
        return {key: n for key, n in counts.items() if n > 1}

    def check_workers_alive(self) -> None:
        for process in self.processes:
            assert process.popen.poll() is None, f"worker {process.name} exited"

    def stop_workers(self) -> None:
        for process in self.processes:
            process.send(signal.SIGTERM)
        assert [p.wait_exit(timeout=60) for p in self.processes] == [0] * len(self.processes)

    def close(self) -> None:
        if self.producer.is_alive():
            self.producer.stop()
        self.app.close()


@pytest.fixture
def open_drain(tmp_path: Path) -> Any:
    """``open_drain(cluster)``: the application on a cluster; its producer stopped and its
    workers killed after the test (before the clusters go: this fixture is set up after
    ``cluster_factory``)."""
    with contextlib.ExitStack() as stack:

        def open_(cluster: PatroniCluster) -> Drain:
            workers = stack.enter_context(
                WorkerProcesses(
                    cluster.url("app"),
                    tmp_path,
                    module="tests.e2e.failover_app",
                    env={"FAILOVER_TEST_DIR": str(tmp_path)},
                )
            )
            drain = Drain(cluster, tmp_path, workers)
            stack.callback(drain.close)
            return drain

        yield open_


def check_exactly_once(drain: Drain, calls: list[Call]) -> dict[str, Any]:
    """No acknowledged job lost, every job succeeded, no effect twice, no transactional write
    twice; the figures of it."""
    acknowledged = drain.acknowledged(calls)
    with drain.connect() as conn:
        present = {i for (i,) in conn.execute("SELECT id FROM cronbase.jobs_all").fetchall()}
        lost = acknowledged - present
        assert lost == set(), f"{len(lost)} acknowledged jobs lost: {sorted(lost)[:20]}"
        drain.wait_all_succeeded()
        ns = [n for (n,) in conn.execute("SELECT (payload->>'n')::int FROM cronbase.jobs_all")]
        assert len(ns) == len(set(ns)), "a payload was enqueued twice"
        keys = {failover_app.effect_key(n) for n in ns}
        statuses = dict(conn.execute("SELECT key, status FROM cronbase.effects").fetchall())
        assert set(statuses) == keys
        assert set(statuses.values()) == {"done"}
        commits = dict(
            conn.execute("SELECT job_id, count(*) FROM failover_commits GROUP BY job_id").fetchall()
        )
        assert {j: c for j, c in commits.items() if c != 1} == {}, "a transaction committed twice"
        assert len(commits) == len(present), "a succeeded job has no transactional write"
        reruns = conn.execute(
            "SELECT count(*) FROM (SELECT job_id FROM failover_runs GROUP BY job_id "
            "HAVING count(*) > 1) r"
        ).fetchone()
        listeners = conn.execute(
            "SELECT application_name FROM pg_stat_activity "
            "WHERE application_name LIKE 'cronbase-listener %%' AND query LIKE 'LISTEN %%'"
        ).fetchall()
    delivered = failover_app.delivery_counts(drain.folder / failover_app.DELIVERIES)
    assert drain.delivered_twice() == {}, f"effects delivered twice: {drain.delivered_twice()}"
    assert set(delivered) == keys, "an effect marked done was never delivered"
    # LISTEN followed the leader: every worker listens on the node that leads now.
    assert sorted(name for (name,) in listeners) == [f"cronbase-listener {w}" for w in WORKERS]
    for process in drain.processes:
        assert "listen connection re-established" in process.log(), process.name
    failed = [c for c in calls if c.ids is None]
    slowest = max(c.ended - c.started for c in calls)
    return {
        "jobs": len(present),
        "acknowledged": len(acknowledged),
        "lost": 0,
        "effects_twice": 0,
        "jobs_run_again": reruns[0] if reruns else 0,
        "failed_defers": f"{len(failed)} ({sorted({(c.error or '')[:60] for c in failed})[:3]})",
        "slowest_defer_s": round(slowest, 2),
    }


def test_leader_killed_twice_with_synchronous_mode_loses_nothing(
    cluster_factory: Callable[..., PatroniCluster], open_drain: Callable[..., Drain]
) -> None:
    cluster = cluster_factory(synchronous=True)
    drain = open_drain(cluster)
    for _ in range(2):
        drain.wait_progress(BETWEEN)
        # Patroni's synchronous_mode promotes only the synchronous standby: it has every
        # acknowledged commit.
        drain.kill_leader(check_promoted=cluster.sync_standby())
        drain.check_workers_alive()
    drain.wait_acknowledged_after(drain.blows[-1].done, DEFERS_AFTER)
    calls = drain.stop_producer()
    result = check_exactly_once(drain, calls)
    assert drain.failed_outside_blows(calls) == [], "a defer failed outside a failover"
    drain.check_workers_alive()
    timing = drain.timing(calls)
    drain.stop_workers()
    figures.save("patroni-kill-leader-twice-sync", {**result, **timing})


def test_switchover_under_load_loses_nothing(
    cluster_factory: Callable[..., PatroniCluster], open_drain: Callable[..., Drain]
) -> None:
    cluster = cluster_factory(synchronous=True)
    drain = open_drain(cluster)
    drain.wait_progress(BETWEEN)
    drain.switchover()
    drain.check_workers_alive()
    drain.wait_acknowledged_after(drain.blows[-1].done, DEFERS_AFTER)
    calls = drain.stop_producer()
    result = check_exactly_once(drain, calls)
    assert drain.failed_outside_blows(calls) == [], "a defer failed outside the switchover"
    drain.check_workers_alive()
    timing = drain.timing(calls)
    drain.stop_workers()
    figures.save("patroni-switchover-sync", {**result, **timing})


def stall_replication(leader: PatroniNode) -> list[int]:
    """SIGSTOP the leader's WAL senders: from now on no replica receives anything (a replica
    that lags, a slow network between them). Their pids, to SIGKILL with the leader."""
    with psycopg.connect(leader.url(), autocommit=True) as conn:
        pids = [int(pid) for (pid,) in conn.execute("SELECT pid FROM pg_stat_replication")]
    assert pids, "no WAL sender"
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    return pids


def lost_defers(drain: Drain, calls: list[Call]) -> tuple[list[Call], int]:
    """The acknowledged calls whose jobs the leader now does not have (by payload: after an
    asynchronous failover the new leader hands out the lost jobs' ids again, to other jobs), and
    how many of their ids name another job now."""
    with drain.connect() as conn:
        present = dict(
            conn.execute("SELECT id, (payload->>'n')::int FROM cronbase.jobs_all").fetchall()
        )
    ns = set(present.values())
    lost = [c for c in calls if c.ids is not None and not set(c.ns) <= ns]
    reused = sum(
        1
        for c in lost
        for i, n in zip(c.ids or (), c.ns, strict=True)
        if present.get(i) not in (None, n)
    )
    return lost, reused


def test_asynchronous_replication_loses_the_newest_acknowledged_work(
    cluster_factory: Callable[..., PatroniCluster], open_drain: Callable[..., Drain]
) -> None:
    cluster = cluster_factory(synchronous=False)
    drain = open_drain(cluster)

    # A kill mid-drain, the replicas streaming as fast as they can.
    drain.wait_progress(BETWEEN)
    natural = drain.kill_leader()
    drain.wait_acknowledged_after(natural.done, 10)
    lost_natural, _ = lost_defers(drain, list(drain.producer.calls))

    # The replicas held behind, for BEHIND acknowledged defers, then a kill.
    drain.wait_progress(BETWEEN // 2)
    leader = cluster.wait_leader()
    stall_replication(leader)
    # Taken once the WAL senders are stopped: a defer that started before (CI: one call, between
    # a clock read taken first and the SIGSTOP) may have reached a replica and survive.
    stalled_at = time.monotonic()
    drain.wait_acknowledged_after(stalled_at, BEHIND)
    behind = drain.kill_leader()
    drain.wait_acknowledged_after(behind.done, DEFERS_AFTER)
    calls = drain.stop_producer()
    calls_before = [c for c in calls if c.ids is not None and c.ended < behind.started]
    lost_all, reused = lost_defers(drain, calls)
    lost_behind = [c for c in lost_all if c not in lost_natural]
    acked_while_behind = [c for c in calls_before if c.started > stalled_at]

    # What was lost is the newest of what the old leader acknowledged, nothing else: a replica
    # has a prefix of its leader's history.
    for blow, lost in ((natural, lost_natural), (behind, lost_behind)):
        acked_before = [c for c in calls if c.ids is not None and c.ended < blow.started]
        assert all(c.ended < blow.done for c in lost), "a defer acknowledged after the failover"
        if lost:
            oldest_lost = min(c.started for c in lost)
            kept_after = [c for c in acked_before if c.started > oldest_lost and c not in lost]
            assert kept_after == [], (
                f"the loss is not the newest acknowledged defers: {blow}, stalled at "
                f"{stalled_at}; lost {[(c.started, c.ids) for c in lost]}; kept "
                f"{[(c.started, c.ids) for c in kept_after]}"
            )
    assert set(map(id, acked_while_behind)) <= set(map(id, lost_behind)), (
        "a defer acknowledged while the replicas received nothing survived the failover"
    )
    drain.wait_all_succeeded()
    drain.check_workers_alive()
    twice = drain.delivered_twice()
    timing = drain.timing(calls)
    drain.stop_workers()
    figures.save(
        "patroni-async",
        {
            "acknowledged": len(drain.acknowledged(calls)),
            "lost_at_kill_under_load": f"{len(lost_natural)} defers "
            f"({sum(len(c.ns) for c in lost_natural)} jobs)",
            "acked_while_replicas_behind": len(acked_while_behind),
            "lost_with_replicas_behind": f"{len(lost_behind)} defers "
            f"({sum(len(c.ns) for c in lost_behind)} jobs)",
            "lost_ids_given_to_other_jobs": reused,
            "effects_delivered_twice": len(twice),
            "jobs_succeeded_in_the_end": drain.succeeded(),
            **timing,
        },
    )
