"""The six chaos scenarios (see ``tests/chaos/__init__.py``): one test each, each on a cluster of
its own, each ending with the same checks and one line of figures."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial

import pytest

from tests.chaos.chaos_app import SCHEDULE_KEY, TRANSACTION_EVERY
from tests.chaos.scenario import SCALE, Scenario, scaled
from tests.conftest import wait_for

# Generous: a stalled drain is given up after a minute without progress, well before this.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(240 + 900 * SCALE))]

JOBS = scaled(20_000, least=200)
WORKERS = "ABC"
KILLS = 6
OpenScenario = Callable[..., Scenario]


def test_worker_sigkills_mid_drain(open_scenario: OpenScenario) -> None:
    s = open_scenario("worker_sigkills")
    s.start_all(WORKERS)
    s.begin()
    ids = s.enqueue(JOBS)
    victims = itertools.cycle(WORKERS)

    def kill_next() -> None:
        s.kill(next(victims), when_busy=True)

    # One kill (and a new worker in its place) every seventh of the drain.
    s.drain(len(ids), [((k + 1) / (KILLS + 1), kill_next) for k in range(KILLS)])
    s.finish(ids)
    s.check()
    assert s.figures.kills == KILLS


def test_two_immediate_postgres_restarts_mid_drain(open_scenario: OpenScenario) -> None:
    s = open_scenario("postgres_restarts")
    s.start_all(WORKERS)
    s.begin()
    ids = s.enqueue(JOBS)
    s.drain(len(ids), [(0.25, s.restart_postgres), (0.6, s.restart_postgres)])
    s.finish(ids)
    s.check()  # worker_exits == 0: the same three processes lived through both restarts
    assert s.figures.restarts == 2


def test_sigstop_past_the_lease_is_fenced(open_scenario: OpenScenario) -> None:
    s = open_scenario("sigstop_past_lease")
    s.hold_success(JOBS // 2 // TRANSACTION_EVERY * TRANSACTION_EVERY)  # a work_in_transaction
    s.start_all(WORKERS)
    s.begin()
    ids = s.enqueue(JOBS)
    s.drain(
        len(ids),
        [
            (0.2, lambda: s.stop_past_lease("A")),
            # The worker of one job stopped between its transaction()'s write of the job's
            # success and its COMMIT: a worker frozen (a VM pause, a partition) at that point.
            (0.4, s.stop_holder),
        ],
    )
    late = s.check_fenced()
    s.finish(ids)
    s.check()
    # Lease expiry must free a stopped worker's jobs: each one is run elsewhere.
    assert s.unreaped == [], "\n".join(s.unreaped)
    assert s.figures.stops == 2
    assert s.figures.notes["held_when_stopped"] > 0, "the stopped workers held no job"
    assert late == 0, f"a stopped worker's result was written after its lease: {s.figures.line()}"


def test_schedulers_killed_in_a_loop_fire_each_slot_once(open_scenario: OpenScenario) -> None:
    s = open_scenario("scheduler_kills", schedule=True)
    s.start_all(WORKERS)
    # The schedule's first slot: the second after the first worker declared it.
    first = wait_for(
        lambda: s.db.rows(
            "SELECT date_trunc('second', created_at) + interval '1 second' "
            "FROM cronbase.schedules WHERE key = %s",
            [SCHEDULE_KEY],
        ),
        timeout=30,
        what="the schedule to be declared",
    )[0][0]

    def last_fired() -> object:
        return s.db.value(
            "SELECT last_fired_at FROM cronbase.schedules WHERE key = %s", [SCHEDULE_KEY]
        )

    def fired_since(before: object) -> bool:
        return last_fired() != before

    window = max(12.0, 60.0 * SCALE)
    began = time.monotonic()
    for round_ in itertools.count(1):
        if time.monotonic() - began >= window:
            break
        if round_ % 4 == 2:
            # Every scheduler down at once until two slots have passed unfired: catch_up="all"
            # must fire them when the next one starts.
            for slot in list(s.live):
                s.kill(slot, replace=False)
            wait_for(
                lambda: s.db.value(
                    "SELECT now() - next_fire_at >= interval '2 seconds' "
                    "FROM cronbase.schedules WHERE key = %s",
                    [SCHEDULE_KEY],
                ),
                timeout=30,
                what="two slots to pass with no scheduler",
            )
            s.figures.notes["all_down"] = s.figures.notes.get("all_down", 0) + 1
            s.start_all(WORKERS)
        else:
            before = last_fired()
            slot = WORKERS[round_ % len(WORKERS)]
            s.kill(slot)
            s.wait_registered([s.live[slot]])
            # The others kept ticking meanwhile.
            wait_for(partial(fired_since, before), timeout=30, what="the next slot to fire")
    window_end = s.db_now().replace(microsecond=0)
    expected = int((window_end - first).total_seconds()) + 1

    slot_jobs = """
        SELECT id, (payload->>'scheduled_at')::timestamptz AS slot, status FROM cronbase.jobs_all
        WHERE task = 'slot' AND (payload->>'scheduled_at')::timestamptz BETWEEN %s AND %s
    """

    def succeeded_slots() -> int:
        rows = s.db.rows(slot_jobs, [first, window_end])
        return len({slot for _, slot, status in rows if status == "succeeded"})

    s.figures.jobs = expected
    s.begin()
    s.drain(expected, done=succeeded_slots)
    rows = s.db.rows(slot_jobs, [first, window_end])
    slots = [slot for _, slot, _ in rows]
    every_second = {first + timedelta(seconds=k) for k in range(expected)}
    missing = sorted(every_second - set(slots))
    s.figures.notes.update(
        window_s=round(window, 1),
        slots=expected,
        missing_slots=len(missing),
        extra_jobs=len(slots) - len(set(slots)),
        off_second=len(set(slots) - every_second),
    )
    s.finish([job_id for job_id, _, _ in rows], missing=len(missing))
    s.check()
    assert missing == [], f"slots never fired: {missing[:10]}"
    assert len(slots) == len(set(slots)), "a slot fired more than one job"
    assert set(slots) <= every_second, "a job for a slot the schedule does not have"
    assert s.figures.notes.get("all_down", 0) >= 1


POISON = {
    # Deeper than MAX_JSON_DEPTH (Python's JSON decoder recurses per level): dead at its claim.
    "deep": ("work", "'{\"x\": ' || repeat('[', 10000) || repeat(']', 10000) || '}'"),
    # More than 4,300 digits Python refuses to turn into an int: ValueError.
    "digits": ("work", "'{\"n\": ' || repeat('9', 5001) || '}'"),
    # Decodes, but a payload is a JSON object of the handler's arguments.
    "array": ("work", "'[1, 2, 3]'"),
    # A task no worker registers: never claimed, so no attempt is burnt on it.
    "unregistered": ("not_registered_here", "'{}'"),
}
REASONS = {
    "deep": ["cannot be decoded", "nested deeper than 100 levels"],
    "digits": ["cannot be decoded", "ValueError"],
    "array": ["must be a JSON object"],
}


def test_poison_rows_inserted_by_sql_die_alone(open_scenario: OpenScenario) -> None:
    s = open_scenario("poison_rows")
    s.start_all(WORKERS)
    copies = scaled(10, least=3)
    chunks = 4
    s.begin()
    ids: list[int] = []
    poison: dict[str, list[int]] = {name: [] for name in POISON}
    # Healthy jobs and poison in turns, while the workers drain: poison shares their batches.
    for chunk in range(chunks):
        ids += s.enqueue(JOBS // chunks, first=chunk * (JOBS // chunks))
        for name, (task, payload) in POISON.items():
            rows = s.db.rows(
                "INSERT INTO cronbase.jobs (task, payload) "
                f"SELECT %s, ({payload})::jsonb FROM generate_series(1, %s) RETURNING id",
                [task, copies],
            )
            poison[name] += [job_id for (job_id,) in rows]
    s.drain(len(ids))

    dying = [job_id for name in REASONS for job_id in poison[name]]

    def settled() -> bool:
        return not s.db.value(
            "SELECT count(*) FROM cronbase.jobs_all WHERE id = ANY(%s) AND status <> 'dead'",
            [dying],
        )

    wait_for(settled, timeout=60, what="every poison row to end dead")
    wrong: list[str] = []
    for name, reasons in REASONS.items():
        for job_id, status, attempts, error in s.db.rows(
            "SELECT id, status, attempts, last_error FROM cronbase.jobs_all WHERE id = ANY(%s)",
            [poison[name]],
        ):
            if status != "dead" or attempts != 1 or not all(r in (error or "") for r in reasons):
                wrong.append(f"{name} job {job_id}: {status}, {attempts} attempts, {error!r}")
    unregistered = s.db.rows(
        "SELECT status, attempts FROM cronbase.jobs_all WHERE id = ANY(%s)",
        [poison["unregistered"]],
    )
    s.figures.notes.update(
        poison_rows=len(dying),
        poison_dead=len(dying) - len(wrong),
        unregistered_queued=sum(row == ("queued", 0) for row in unregistered),
    )
    s.finish(ids)
    s.check()
    assert wrong == [], "\n".join(wrong[:10])
    assert unregistered == [("queued", 0)] * copies * chunks


def test_through_pgbouncer_a_worker_sigkill_and_a_postgres_restart(
    open_scenario: OpenScenario,
) -> None:
    s = open_scenario("pooler", pooler=True)
    s.start_all(WORKERS)
    s.begin()
    ids = s.enqueue(JOBS)  # through the pooler too
    s.drain(len(ids), [(0.3, lambda: s.kill("A", when_busy=True)), (0.6, s.restart_postgres)])
    s.finish(ids)
    s.check()
    assert (s.figures.kills, s.figures.restarts) == (1, 1)
