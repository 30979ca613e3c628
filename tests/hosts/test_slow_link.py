"""A worker host on a slow, lossy link (netem's delay and loss where the kernel has netem; else
a narrow link that queues and drops, tbf): it is slow, not gone. It first takes long jobs
(longer than their lease: only its renewals, over that link, keep them), then the other hosts
join with their reapers and a batch of short jobs. It must keep every lease it holds (none of
its attempts lost, none of its jobs run elsewhere meanwhile), finish its share, and nothing may
be lost or done twice.
"""

from __future__ import annotations

import signal

import pytest

from tests.conftest import wait_for
from tests.hosts import figures
from tests.hosts.hosts_app import LEASE
from tests.hosts.network import has_netem
from tests.hosts.world import World

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

JOBS = figures.scaled(160, least=40)
HOLD = 0.2
# The long jobs: as many as the slow worker's concurrency, each held past twice its lease. It
# claims them alone, over its slow link; the short ones are mostly the others' (it is busy).
LONG = 4
LONG_HOLD = 2.2 * LEASE.total_seconds()
WORKERS = ("w1", "w2", "w3")
SLOW = "w1"


@pytest.mark.parametrize("shaper", ["netem", "tbf"])
def test_a_slow_lossy_link_keeps_its_leases(world: World, shaper: str) -> None:
    if shaper == "netem" and (reason := has_netem()) is not None:
        pytest.skip(f"tc netem refused by this kernel ({reason}); the tbf case runs instead")
    hosts = {name: world.network.add(name) for name in WORKERS}
    link = world.network.slow(hosts[SLOW], netem=shaper == "netem")
    # cronbase's own TCP settings: a slow link is not a dead one, nothing here should time out.
    slow = world.start_worker(hosts[SLOW], quick_tcp=False)
    world.wait_registered([slow])
    work = world.app.get_task("work")
    long_ids = work.defer_many([{"n": n, "hold": LONG_HOLD} for n in range(LONG)])
    wait_for(
        lambda: len(world.held(SLOW)) == LONG, timeout=60, what=f"{SLOW} to hold the long jobs"
    )
    workers = {SLOW: slow}
    workers.update(
        {name: world.start_worker(hosts[name], quick_tcp=False) for name in WORKERS if name != SLOW}
    )
    world.wait_registered(workers.values())
    ids = long_ids + work.defer_many([{"n": n, "hold": HOLD} for n in range(LONG, LONG + JOBS)])
    world.wait_drained(ids, timeout=180)

    per_worker = dict(
        world.rows(
            "SELECT locked_by, count(*) FROM cronbase.jobs_all WHERE id = ANY(%s) GROUP BY 1", [ids]
        )
    )
    lost = world.rows(
        "SELECT job_id, attempt, worker FROM cronbase.job_attempts_all WHERE outcome = 'lost'"
    )
    reruns = world.value(
        "SELECT count(*) - count(DISTINCT job_id) FROM hosts_runs WHERE phase = 'started'"
    )
    held_for = world.value(
        "SELECT min(finished_at - started_at) FROM cronbase.jobs_all WHERE id = ANY(%s)", [long_ids]
    )
    assert held_for > 2 * LEASE, f"the long jobs ran {held_for}: no renewal was needed"
    stats = world.network.link_stats(hosts[SLOW])
    long_jobs = world.rows(
        "SELECT id, attempts, locked_by FROM cronbase.jobs_all WHERE id = ANY(%s)", [long_ids]
    )
    assert {(attempts, by) for _, attempts, by in long_jobs} == {(1, SLOW)}, long_jobs
    assert lost == [], f"leases lost by live workers: {lost}"
    assert reruns == 0, "a job ran twice"
    assert world.duplicate_effects() == {}
    assert world.value("SELECT count(*) FROM hosts_effects") == 2 * len(ids)
    wait_for(lambda: stats["packets"] > 0, timeout=1, what="traffic through the shaped link")
    for name, worker in workers.items():
        assert worker.popen.poll() is None, f"worker {name} exited"
        worker.send(signal.SIGTERM)
    assert [w.wait_exit(timeout=60) for w in workers.values()] == [0, 0, 0]

    figures.save(
        f"slow-link-{shaper}",
        {
            "link": link,
            "jobs": len(ids),
            "lease_s": LEASE.total_seconds(),
            "jobs_per_worker": per_worker,
            "slow_link_packets": stats["packets"],
            "slow_link_dropped": stats["dropped"],
            "long_jobs_ran_s": round(held_for.total_seconds(), 2),
            "lost_attempts": len(lost),
            "reruns": reruns,
        },
    )
