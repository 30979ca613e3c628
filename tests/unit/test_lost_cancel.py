"""raise_if_cancelled: a background loop ends on a cancel that psycopg_pool absorbed."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from cronbase.db.pool import raise_if_cancelled


async def round_that_absorbs_a_cancel(after: asyncio.Event) -> None:
    # Swallowed, as psycopg_pool's checked getconn does (psycopg#1401).
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(3600)
    after.set()


async def loop(guarded: bool, after: asyncio.Event) -> None:
    while True:
        await round_that_absorbs_a_cancel(after)
        if guarded:
            raise_if_cancelled()
        await asyncio.sleep(3600)  # the next round's wait: a cancel already spent never ends it


@pytest.mark.parametrize("guarded", [True, False])
def test_a_loop_ends_on_an_absorbed_cancel_only_when_guarded(guarded: bool) -> None:
    async def run() -> bool:
        after = asyncio.Event()
        task = asyncio.create_task(loop(guarded, after))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.wait_for(after.wait(), 30)
        done, _ = await asyncio.wait({task}, timeout=5)
        if not done:
            task.cancel()  # a second cancel does reach it: the test ends either way
            await asyncio.gather(task, return_exceptions=True)
            return False
        return task.cancelled()

    assert asyncio.run(run()) is guarded


def test_outside_a_cancelled_task_it_does_nothing() -> None:
    async def run() -> None:
        raise_if_cancelled()

    asyncio.run(run())
