"""The attempts' ledger (worker/attempts.py) hands out disjoint sets: what a lease renewal holds
no writer takes, what a writer takes no renewal holds, and a hand-back waits for the renewal in
flight and leaves no attempt to a later one. Two statements of one worker on the same rows, each
taking them in its own order, deadlocked before (three fixes in one day came from that joint)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from cronbase.worker.attempts import Attempts, State
from cronbase.worker.claim import ClaimedJob
from cronbase.worker.outcomes import Outcome


def job(n: int) -> ClaimedJob:
    return ClaimedJob(n, "t", "default", {}, 0, 1, 3, uuid.uuid4(), timedelta(seconds=30))


async def running(ledger: Attempts, jobs: list[ClaimedJob]) -> list[asyncio.Task[None]]:
    never = asyncio.Event()
    tasks = [asyncio.create_task(never.wait()) for _ in jobs]
    for j, t in zip(jobs, tasks, strict=True):
        ledger.started(j, t)  # type: ignore[arg-type]
    return tasks  # type: ignore[return-value]


def success(j: ClaimedJob) -> Outcome:
    return Outcome(job=j, outcome="succeeded")


def test_what_a_renewal_holds_no_writer_takes_until_it_ends() -> None:
    async def main() -> None:
        ledger = Attempts({}, asyncio.Event(), asyncio.get_running_loop())
        a, b, c = job(1), job(2), job(3)
        tasks = await running(ledger, [a, b, c])
        ledger.finish(a, success(a))  # finished before the renewal: its outcome waits
        with ledger.renewal() as renewed:
            assert renewed == [b, c, a]
            ledger.finish(b, success(b))  # finishes while the renewal updates its row
            assert ledger.take(successes=True, most=10) == []
            assert [o.job for o in ledger.finished] == [a, b]
        taken = ledger.take(successes=True, most=10)
        assert [t.job for t in taken] == [a, b]
        assert all(t.state is State.WRITING for t in taken)
        # Being written: no renewal takes them (the writer's statement holds their rows).
        with ledger.renewal() as renewed:
            assert renewed == [c]
        ledger.landed(taken)
        assert ledger.written.is_set() is True
        for t in tasks:
            t.cancel()

    asyncio.run(main())


def test_a_failed_write_puts_outcomes_back_first_in_line() -> None:
    async def main() -> None:
        ledger = Attempts({}, asyncio.Event(), asyncio.get_running_loop())
        a, b = job(1), job(2)
        ledger.add(success(a))
        taken = ledger.take(successes=False, most=10)
        ledger.add(success(b))
        ledger.put_back(taken)
        assert [o.job for o in ledger.finished] == [a, b]
        assert ledger.written.is_set() is False
        assert ledger.outcomes_waiting.is_set() is True

    asyncio.run(main())


def test_a_lost_attempt_is_neither_renewed_nor_written() -> None:
    async def main() -> None:
        freed = asyncio.Event()
        ledger = Attempts({}, freed, asyncio.get_running_loop())
        a, b = job(1), job(2)
        tasks = await running(ledger, [a, b])
        ledger.lease_lost(a)
        assert ledger.held() == [b]
        ledger.finish(a, success(a))  # its handler returned after all: nothing to write
        assert ledger.finished == []
        assert a not in ledger.running
        assert freed.is_set() is True  # its slot is free
        for t in tasks:
            t.cancel()

    asyncio.run(main())


def test_a_hand_back_waits_for_the_renewal_in_flight_and_leaves_none_to_the_next() -> None:
    async def main() -> None:
        ledger = Attempts({}, asyncio.Event(), asyncio.get_running_loop())
        a, b = job(1), job(2)
        tasks = await running(ledger, [a, b])
        order: list[str] = []

        async def renew() -> None:
            with ledger.renewal():
                order.append("renewal begins")
                await asyncio.sleep(0.05)
                order.append("renewal ends")

        renewal = asyncio.create_task(renew())
        await asyncio.sleep(0)
        await ledger.hand_back([a], wait=30.0)
        order.append("hand-back")
        await renewal
        assert order == ["renewal begins", "renewal ends", "hand-back"]
        assert ledger.held() == [b]
        for t in tasks:
            t.cancel()

    asyncio.run(main())


def test_a_shorter_lease_than_planned_asks_for_a_renewal_sooner() -> None:
    async def main() -> None:
        ledger = Attempts({}, asyncio.Event(), asyncio.get_running_loop())
        ledger.planned_for = timedelta(seconds=30)
        ledger.claimed([job(1)])  # a 30 s lease: the planned beat renews it in time
        assert ledger.renew_soon.is_set() is False
        short = job(2)
        short.lease = timedelta(seconds=3)
        ledger.claimed([short])
        assert ledger.renew_soon.is_set() is True

    asyncio.run(main())
