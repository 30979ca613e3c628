"""Hosts whose clocks are wrong: one 90 s ahead, one 90 s behind (libfaketime, LD_PRELOAD), and
one right. The database's clock is the truth: no job may run before its time in database time,
no lease may be taken from a live worker, a durable sleep may not last the skew longer, and a
schedule every second must fire each slot once, none early, whichever host ticks.
"""

from __future__ import annotations

import glob
import signal
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.e2e.harness import WorkerProcess
from tests.hosts import figures
from tests.hosts.hosts_app import LEASE, SCHEDULE_KEY
from tests.hosts.world import World

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SKEW = timedelta(seconds=90)
CLOCKS = {"ahead": "+90s", "behind": "-90s", "true": None}
NAP = 2.0
DUE = figures.scaled(24, least=8)  # jobs deferred with a delay, from the skewed hosts too
LONG = figures.scaled(6, least=3)  # jobs held past twice their lease
LONG_HOLD = 2.2 * LEASE.total_seconds()
SLOTS = figures.scaled(10, least=5)  # schedule slots (one a second) the window spans at least


def libfaketime() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        raise RuntimeError(
            "libfaketime is missing: `make test` installs it (scripts/prerequisites.sh), or run: "
            "sudo apt-get install -y faketime"
        )
    return found[0]


def clock_env(offset: str | None, *, schedule: bool = False) -> dict[str, str]:
    """The environment of a worker whose wall clock is ``offset`` off (None: the true one). Its
    monotonic clock is left alone, as NTP leaves it."""
    env = {"HOSTS_SCHEDULE": "1"} if schedule else {}
    if offset is not None:
        env.update(LD_PRELOAD=libfaketime(), FAKETIME=offset, FAKETIME_DONT_FAKE_MONOTONIC="1")
    return env


def skew_of(world: World, host: str) -> timedelta:
    """How far the host's clock is from the database's, as its handlers saw it."""
    skew: timedelta = world.value(
        "SELECT avg(host_time - at) FROM hosts_runs WHERE host = %s", [host]
    )
    return skew


def test_skewed_clocks_change_nothing(world: World) -> None:
    hosts = {name: world.network.add(name) for name in CLOCKS}
    started: list[WorkerProcess] = []

    def start(name: str, *, schedule: bool = False, suffix: str = "") -> WorkerProcess:
        """A worker on host ``name``, with its clock; it serves the queue ``default`` and one
        named after its host, so each host surely gets its share."""
        process = world.start_worker(
            hosts[name],
            *("--queue", "default", "--queue", name),
            env=clock_env(CLOCKS[name], schedule=schedule),
            name=name + suffix,
        )
        started.append(process)
        return process

    def stop(process: WorkerProcess) -> None:
        process.send(signal.SIGTERM)
        assert process.wait_exit(timeout=60) == 0

    # -- a durable sleep begun 90 s ahead, ended 90 s behind -------------------------------------
    ahead = start("ahead")
    world.wait_registered([ahead])
    nap = world.app.get_task("nap").defer(n=0, seconds=NAP)

    def suspended() -> bool:
        return bool(
            world.rows(
                "SELECT 1 FROM cronbase.jobs_all j WHERE id = %s AND status = 'queued' AND EXISTS "
                "(SELECT FROM hosts_runs r WHERE r.job_id = j.id AND r.phase = 'started')",
                [nap],
            )
        )

    wait_for(suspended, timeout=30, what="the nap to begin on the host ahead and suspend")
    stop(ahead)
    behind = start("behind")
    world.wait_registered([behind])

    def nap_over() -> bool:
        return world.statuses([nap]).get("succeeded") == 1

    try:
        wait_for(nap_over, timeout=NAP + 30, what="the nap to end")
    except pytest.fail.Exception:
        pytest.fail(
            f"a {NAP:.0f} s durable sleep begun on a host 90 s ahead has not ended on a host "
            f"90 s behind after {NAP + 30:.0f} s: its wake-up time came from the first host's "
            f"clock; job: {world.rows('SELECT status, run_at, now() FROM cronbase.jobs_all')}"
        )
    began, woke = world.rows(
        "SELECT min(at) FILTER (WHERE phase = 'started'), min(at) FILTER (WHERE phase = 'woke') "
        "FROM hosts_runs WHERE job_id = %s",
        [nap],
    )[0]
    slept = woke - began
    assert timedelta(seconds=NAP) <= slept < timedelta(seconds=NAP) + SKEW / 9, slept
    stop(behind)

    # -- all three, with schedules, delayed jobs and long ones -----------------------------------
    workers = {name: start(name, schedule=True, suffix="-2") for name in CLOCKS}
    world.wait_registered(workers.values())
    first_slot = world.first_slot()
    # Round robin over the hosts' own queues: each clock defers due jobs and holds long ones.
    spawn, work, names = world.app.get_task("spawn"), world.app.get_task("work"), list(CLOCKS)
    spawn_ids = [
        spawn.configure(queue=names[n % len(names)]).defer(n=n, delay=1 + 0.25 * n)
        for n in range(DUE)
    ]
    long_ids = [
        work.configure(queue=names[n % len(names)]).defer(n=n, hold=LONG_HOLD) for n in range(LONG)
    ]

    def due_ids() -> list[int]:
        return [i for (i,) in world.rows("SELECT id FROM cronbase.jobs_all WHERE task = 'due'")]

    wait_for(lambda: len(due_ids()) == DUE, timeout=60, what=f"{DUE} due jobs to be deferred")
    world.wait_drained(spawn_ids + long_ids + due_ids(), timeout=120)
    window_end = first_slot + timedelta(seconds=SLOTS)
    wait_for(
        lambda: world.value(
            "SELECT last_fired_at >= %s FROM cronbase.schedules WHERE key = %s",
            [window_end, SCHEDULE_KEY],
        ),
        timeout=SLOTS + 30,
        what=f"{SLOTS} schedule slots to fire",
    )
    slot_ids = [
        i
        for (i,) in world.rows(
            "SELECT id FROM cronbase.jobs_all WHERE task = 'slot' "
            "AND (payload->>'scheduled_at')::timestamptz BETWEEN %s AND %s",
            [first_slot, window_end],
        )
    ]
    world.wait_drained(slot_ids, timeout=60)
    for name, process in workers.items():
        assert process.popen.poll() is None, f"worker {name} exited"
    for process in workers.values():
        stop(process)

    # -- the clocks were off, as meant -----------------------------------------------------------
    skews = {name: skew_of(world, name) for name in CLOCKS}
    for name, offset in CLOCKS.items():
        expected = {"+90s": SKEW, "-90s": -SKEW, None: timedelta(0)}[offset]
        assert abs(skews[name] - expected) < timedelta(seconds=5), (name, skews[name])

    # -- no job ran before its time in database time ---------------------------------------------
    # (The due jobs ran once each: no attempt but the last is recorded, see below; their run_at
    # is the one given at defer time.)
    early = world.rows(
        "SELECT j.id, j.run_at, r.at, r.host FROM cronbase.jobs_all j "
        "JOIN hosts_runs r ON r.job_id = j.id "
        "WHERE j.task = 'due' AND r.phase = 'started' AND r.at < j.run_at"
    )
    assert early == [], f"jobs started before their run_at: {early}"
    due_hosts = dict(
        world.rows("SELECT host, count(*) FROM hosts_runs WHERE task = 'due' GROUP BY host")
    )
    # A delay given on a skewed host is counted from the database's now().
    delays = world.rows(
        "SELECT (j.payload->>'n')::int, extract(epoch FROM d.run_at - d.created_at), r.host "
        "FROM cronbase.jobs_all d JOIN cronbase.jobs_all j ON j.task = 'spawn' "
        "AND j.payload->'n' = d.payload->'n' "
        "JOIN hosts_runs r ON r.job_id = j.id AND r.phase = 'started' WHERE d.task = 'due'"
    )
    spawned_on = {host for _, _, host in delays}
    assert spawned_on == set(CLOCKS), f"due jobs were deferred only on {spawned_on}"
    off = [(n, secs, host) for n, secs, host in delays if abs(float(secs) - (1 + 0.25 * n)) > 0.5]
    assert off == [], f"delays not counted from the database's clock: {off}"

    # -- no lease taken from a live worker -------------------------------------------------------
    # Every attempt of every job succeeded (a suspended one is not an attempt that ended).
    lost = world.rows(
        "SELECT job_id, attempt, worker, outcome FROM cronbase.job_attempts_all "
        "WHERE outcome <> 'suspended'"
    )
    assert lost == [], f"attempts that did not end in success: {lost}"
    long_jobs = world.rows(
        "SELECT id, attempts, locked_by, finished_at - started_at FROM cronbase.jobs_all "
        "WHERE id = ANY(%s)",
        [long_ids],
    )
    assert {attempts for _, attempts, _, _ in long_jobs} == {1}, long_jobs
    assert all(ran > 2 * LEASE for *_, ran in long_jobs), long_jobs
    long_hosts = {by for _, _, by, _ in long_jobs}
    assert {by.removesuffix("-2") for by in long_hosts} == set(CLOCKS), long_hosts

    # -- each slot once, none early --------------------------------------------------------------
    slots: list[tuple[Any, ...]] = world.rows(
        "SELECT (payload->>'scheduled_at')::timestamptz, created_at, status FROM cronbase.jobs_all "
        "WHERE task = 'slot' AND (payload->>'scheduled_at')::timestamptz BETWEEN %s AND %s",
        [first_slot, window_end],
    )
    fired = [slot for slot, _, _ in slots]
    expected_slots = int((window_end - first_slot).total_seconds()) + 1
    every_second = {first_slot + timedelta(seconds=k) for k in range(expected_slots)}
    assert len(fired) == len(set(fired)), "a slot fired twice"
    assert set(fired) == every_second, f"slots missing: {sorted(every_second - set(fired))}"
    fired_early = [(slot, created) for slot, created, _ in slots if created < slot]
    assert fired_early == [], f"slots fired before their time: {fired_early}"
    slot_duplicates = {k: n for k, n in world.duplicate_effects().items() if k.startswith("slot:")}
    assert slot_duplicates == {}

    figures.save(
        "clock-skew",
        {
            "skew_s": {name: round(s.total_seconds(), 1) for name, s in skews.items()},
            "nap_s": NAP,
            "nap_slept_s": round(slept.total_seconds(), 2),
            "due_jobs": DUE,
            "due_spawned_on": sorted(spawned_on),
            "due_run_on": due_hosts,
            "started_early": len(early),
            "long_jobs": LONG,
            "long_jobs_on": sorted(long_hosts),
            "attempts_lost": len(lost),
            "slots": expected_slots,
            "slots_missing": 0,
            "slots_twice": 0,
        },
    )
