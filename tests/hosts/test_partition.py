"""A worker host cut off from the database mid-drain, for longer than the lease: both ways (a
partition), or one way (it can send, not receive). Its jobs must be reaped and run on the other
hosts; once the link heals, what it still had in flight must be fenced (its outcomes refused, no
effect written by an attempt whose lease was gone, none twice); nothing is lost; the same worker
process must take jobs again, and say that it lost its leases and that it works again. And a
scheduler cut off in the middle of a tick must not keep the schedules it locked from firing.
"""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest

from tests.conftest import wait_for
from tests.hosts import figures
from tests.hosts.hosts_app import LEASE, SCHEDULE_KEY, effect_key, transaction_key
from tests.hosts.world import World, log_lines, seconds

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

JOBS = figures.scaled(120, least=40)
# Run by the victim alone once the link healed.
SECOND = figures.scaled(40, least=10)
# Each job's handler works this long before its effects, so a cut finds the victim's jobs in
# flight (most of a handler's time is this).
HOLD = 0.5
# The victim is cut once it holds this many running jobs (its concurrency is 4).
HELD_AT_CUT = 3
WORKERS = ("w1", "w2", "w3")
VICTIM = "w1"
# What a worker logs when its claim loop or its lease renewals fail (worker/health.py).
NOTICED = r"database unreachable: |(claiming jobs|renewing leases) failed"


@pytest.mark.parametrize(
    ("direction", "tcp"), [("both-ways", "quick"), ("one-way", "cronbase-defaults")]
)
def test_a_host_cut_off_past_its_lease_is_fenced_and_rejoins(
    world: World, direction: str, tcp: str
) -> None:
    """``quick``: the workers' URL asks TCP to give up on a silent peer within ~3 s
    (world.QUICK_TCP); ``cronbase-defaults``: no TCP settings in the URL, cronbase's own apply
    (~30 s), and the cut lasts until the victim said it lost the database."""
    hosts = {name: world.network.add(name) for name in WORKERS}
    workers = {
        name: world.start_worker(host, quick_tcp=tcp == "quick") for name, host in hosts.items()
    }
    world.wait_registered(workers.values())
    victim, process = hosts[VICTIM], workers[VICTIM]
    work = world.app.get_task("work")
    first = work.defer_many([{"n": n, "hold": HOLD} for n in range(JOBS)])

    # -- the cut, once the victim is busy --------------------------------------------------------
    wait_for(
        lambda: len(world.held(VICTIM)) >= HELD_AT_CUT,
        timeout=60,
        what=f"{VICTIM} to hold {HELD_AT_CUT} running jobs",
    )
    said_before = len(log_lines(process, NOTICED))
    world.network.cut(victim, inbound_only=direction == "one-way")
    cut_at = world.now()
    held_at_cut = world.held(VICTIM)

    # Statements of the victim the database began during the cut (a margin after it for what
    # was already on the wire): one way, what it sends still arrives; both ways, nothing does.
    # Sampled while waiting: the victim's sessions end when it gives up on them.
    arrived: set[tuple[int, object]] = set()

    def noticed() -> bool:
        arrived.update(
            world.rows(
                "SELECT pid, query_start FROM pg_stat_activity WHERE client_addr = %s "
                "AND query_start > %s::timestamptz + interval '100 milliseconds'",
                [victim.address, cut_at],
            )
        )
        return len(log_lines(process, NOTICED)) > said_before

    # The victim must notice, by itself, that it lost the database: its calls fail rather than
    # wait for the kernel's retransmissions to give up (15 minutes).
    wait_for(noticed, timeout=90, what=f"{VICTIM} to say that it cannot reach the database")
    noticed_after = world.now() - cut_at
    if direction == "one-way":
        assert arrived, f"nothing {VICTIM} sent reached the database: not a one-way cut"
    else:
        assert not arrived, f"statements of {VICTIM} reached the database through the cut"

    def all_settled() -> bool:
        # Nothing leased to the victim any more (one way, a claim it sent may still have landed
        # after the cut: that too must be reaped), and what it held succeeded.
        if world.held(VICTIM):
            return False
        return world.statuses([job_id for job_id, _ in held_at_cut]) == {
            "succeeded": len(held_at_cut)
        }

    wait_for(
        all_settled,
        timeout=60,
        what=f"the jobs {VICTIM} held to be reaped and run on the other hosts",
    )
    cut_for = world.now() - cut_at
    assert cut_for > LEASE, f"the cut lasted {cut_for}, not longer than the lease {LEASE}"
    lost_attempts = world.rows(
        "SELECT job_id, attempt, finished_at FROM cronbase.job_attempts_all "
        "WHERE worker = %s AND outcome = 'lost'",
        [VICTIM],
    )
    # Each job it held was reaped (that attempt lost) and succeeded on another host; or, one
    # way only, the victim's own success landed through the cut while its lease still held
    # (what it sends arrives: a success carried by its next claim, a COMMIT).
    finals = {
        job_id: (attempts, by, finished)
        for job_id, attempts, by, finished in world.rows(
            "SELECT id, attempts, locked_by, finished_at FROM cronbase.jobs_all WHERE id = ANY(%s)",
            [[job_id for job_id, _ in held_at_cut]],
        )
    }
    lost = {(j, a) for j, a, _ in lost_attempts}
    reaped = [(j, a) for j, a in held_at_cut if (j, a) in lost]
    landed = [(j, a) for j, a in held_at_cut if (j, a) not in lost]
    assert reaped, f"no job {VICTIM} held was reaped"
    for job_id, attempt in reaped:
        attempts, by, _ = finals[job_id]
        assert attempts > attempt, (job_id, finals[job_id])
        assert by != VICTIM, (job_id, finals[job_id])
    for job_id, attempt in landed:
        attempts, by, finished = finals[job_id]
        assert direction == "one-way", f"job {job_id} neither reaped nor run elsewhere"
        assert (attempts, by) == (attempt, VICTIM), (job_id, finals[job_id])
        assert finished < cut_at + 2 * LEASE, f"job {job_id}: success written past its lease"

    # -- the heal: the same process takes jobs again, alone ------------------------------------
    world.network.heal(victim)
    healed_at = world.now()
    # The others stop (gracefully: each must exit 0), so what is left, and a second batch, can
    # only run on the victim: the same process, never restarted.
    others = [w for name, w in workers.items() if name != VICTIM]
    for worker in others:
        worker.send(signal.SIGTERM)
    assert [w.wait_exit(timeout=60) for w in others] == [0] * len(others)
    second = work.defer_many([{"n": n, "hold": 0.05} for n in range(JOBS, JOBS + SECOND)])
    ids = first + second
    world.wait_drained(ids, timeout=120)
    assert world.value(
        "SELECT count(*) FROM cronbase.jobs_all WHERE id = ANY(%s) AND locked_by = %s",
        [second, VICTIM],
    ) == len(second)
    rejoined_after = world.value(
        "SELECT min(finished_at) - %s FROM cronbase.jobs_all WHERE locked_by = %s AND finished_at > %s",
        [healed_at, VICTIM, healed_at],
    )

    # -- nothing lost, nothing twice, nothing late -----------------------------------------------
    assert world.statuses(ids) == {"succeeded": len(ids)}
    assert world.value("SELECT count(*) FROM cronbase.jobs_all WHERE status = 'running'") == 0
    assert world.duplicate_effects() == {}, "an effect happened twice"
    expected = {effect_key(n) for n in range(JOBS + SECOND)} | {
        transaction_key(n) for n in range(JOBS + SECOND)
    }
    assert set(world.effects_per_key()) == expected, "a job succeeded without its effects"
    for job_id, attempt, lost_at in lost_attempts:
        # Fenced: the attempt's transaction() never committed, no once() effect was entered by
        # it after its lease was gone, and the job succeeded in a later attempt.
        late = world.rows(
            "SELECT key, at FROM hosts_effects WHERE job_id = %s AND attempt = %s "
            "AND key LIKE 'tx:%%'",
            [job_id, attempt],
        )
        assert late == [], f"job {job_id} attempt {attempt} (lost) committed its transaction"
        entered = world.rows(
            "SELECT key, started_at FROM cronbase.effects WHERE job_id = %s AND attempt = %s "
            "AND started_at > %s",
            [job_id, attempt, lost_at],
        )
        assert entered == [], f"job {job_id} attempt {attempt} entered once() after it was lost"
        final = world.value("SELECT attempts FROM cronbase.jobs_all WHERE id = %s", [job_id])
        assert final > attempt
    refused = world.rows(
        "SELECT job_id, attempt, at FROM hosts_runs WHERE host = %s AND phase = 'refused'",
        [VICTIM],
    )
    assert all(at > healed_at for _, _, at in refused)

    # -- what the victim said --------------------------------------------------------------------
    lease_lost = log_lines(process, r"lease lost|outcome \w+ ignored")
    works_again = log_lines(process, r"works again|database reachable again")
    assert lease_lost, f"{VICTIM} did not say it lost its leases:\n{process.log()[-3000:]}"
    assert works_again, f"{VICTIM} did not say it works again:\n{process.log()[-3000:]}"
    assert process.popen.poll() is None, f"{VICTIM} exited"

    figures.save(
        f"cut-{direction}",
        {
            "tcp": tcp,
            "jobs": len(ids),
            "lease_s": LEASE.total_seconds(),
            "held_at_cut": len(held_at_cut),
            "cut_to_victim_noticed_s": seconds(noticed_after),
            "statements_arrived_during_cut": len(arrived),
            "cut_s": seconds(cut_for),
            "lost_attempts": len(lost_attempts),
            "held_jobs_finished_through_the_one_way_cut": len(landed),
            "refused_after_heal": len(refused),
            "heal_to_victim_job_s": seconds(rejoined_after),
            "duplicate_effects": 0,
            "lost_jobs": 0,
        },
    )
    print("\n".join(lease_lost[:5] + works_again[:5]))
    process.send(signal.SIGTERM)
    assert process.wait_exit(timeout=60) == 0


HOLD_TICK = """
CREATE TABLE IF NOT EXISTS hosts_hold_tick (address inet PRIMARY KEY);
CREATE OR REPLACE FUNCTION hosts_hold_tick() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT FROM hosts_hold_tick WHERE address = inet_client_addr()) THEN
        DELETE FROM hosts_hold_tick WHERE address = inet_client_addr();
        PERFORM pg_sleep(2);
    END IF;
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER hosts_hold_tick BEFORE UPDATE ON cronbase.schedules
    FOR EACH ROW EXECUTE FUNCTION hosts_hold_tick();
"""
# Slots that must fire, by the other host, while the scheduler that was cut off mid-tick stays
# cut off.
SLOTS_DURING_CUT = 3


def test_a_scheduler_cut_off_mid_tick_holds_no_slot_back(world: World) -> None:
    """A worker's scheduler cut off between locking a due schedule (``FOR UPDATE``) and its
    COMMIT: the server would keep that lock until its TCP gives up on the vanished client (15
    minutes; hours if its last reply had been acknowledged), and every other scheduler skips a
    locked schedule. The slots must go on firing, once each, while the host stays cut off."""
    schedule = {"HOSTS_SCHEDULE": "1"}
    hosts = {name: world.network.add(name) for name in ("w1", "w2")}
    workers = {name: world.start_worker(host, env=schedule) for name, host in hosts.items()}
    world.wait_registered(workers.values())
    victim = hosts["w1"]
    first_slot = world.first_slot()
    world.conn.execute(HOLD_TICK)
    # The victim's next tick that advances the schedule is held on the server for 2 s, its
    # lock taken: the cut lands then, and the reply is lost.
    world.conn.execute("INSERT INTO hosts_hold_tick VALUES (%s)", [victim.address])
    wait_for(
        lambda: world.rows(
            "SELECT 1 FROM pg_stat_activity WHERE client_addr = %s AND wait_event = 'PgSleep'",
            [victim.address],
        ),
        timeout=60,
        what="the victim's scheduler to be held mid-tick",
    )
    world.network.cut(victim)
    cut_at = world.now()

    def fired_after_cut() -> int:
        return int(
            world.value(
                "SELECT count(*) FROM cronbase.jobs_all WHERE task = 'slot' AND created_at > %s",
                [cut_at],
            )
        )

    try:
        wait_for(
            lambda: fired_after_cut() >= SLOTS_DURING_CUT,
            timeout=60,
            what="slots to fire while the scheduler that locked them is cut off",
        )
    except pytest.fail.Exception:
        locks = world.rows(
            "SELECT client_addr, state, round(extract(epoch FROM now() - state_change)), "
            "left(query, 60) FROM pg_stat_activity WHERE client_addr = %s",
            [victim.address],
        )
        pytest.fail(
            f"no slot fired for 60 s after the cut: the cut-off scheduler's transaction still "
            f"holds the schedule (its sessions: {locks})"
        )
    resumed_after = world.value(
        "SELECT min(created_at) - %s FROM cronbase.jobs_all WHERE task = 'slot' AND created_at > %s",
        [cut_at, cut_at],
    )
    world.network.heal(victim)
    healed_at = world.now()
    window_end = world.value("SELECT date_trunc('second', %s::timestamptz)", [healed_at])
    wait_for(
        lambda: world.value(
            "SELECT last_fired_at >= %s + interval '2 seconds' FROM cronbase.schedules "
            "WHERE key = %s",
            [window_end, SCHEDULE_KEY],
        ),
        timeout=60,
        what="the schedule to fire after the heal",
    )
    slots = [
        slot
        for (slot,) in world.rows(
            "SELECT (payload->>'scheduled_at')::timestamptz FROM cronbase.jobs_all "
            "WHERE task = 'slot' AND (payload->>'scheduled_at')::timestamptz BETWEEN %s AND %s",
            [first_slot, window_end],
        )
    ]
    expected = int((window_end - first_slot).total_seconds()) + 1
    every_second = {first_slot + timedelta(seconds=k) for k in range(expected)}
    assert len(slots) == len(set(slots)), "a slot fired twice"
    assert set(slots) == every_second, f"slots missing: {sorted(every_second - set(slots))}"
    for name, worker in workers.items():
        assert worker.popen.poll() is None, f"worker {name} exited"
        worker.send(signal.SIGTERM)
    assert [w.wait_exit(timeout=60) for w in workers.values()] == [0, 0]
    figures.save(
        "scheduler-cut-mid-tick",
        {
            "slots": expected,
            "cut_to_slots_firing_again_s": seconds(resumed_after),
            "slots_missing": 0,
            "slots_twice": 0,
        },
    )
