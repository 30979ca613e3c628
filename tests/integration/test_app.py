"""App plumbing on real PostgreSQL: its connection pools."""

from __future__ import annotations

import asyncio
import threading

import cronbase


def test_concurrent_first_async_pool_calls_share_one_pool(app: cronbase.App) -> None:
    async def main() -> set[int]:
        pools = await asyncio.gather(*(app.async_pool() for _ in range(5)))
        await app.aclose()
        return {id(p) for p in pools}

    assert len(asyncio.run(main())) == 1


def test_each_event_loop_gets_its_own_async_pool(app: cronbase.App) -> None:
    async def use() -> object:
        pool = await app.async_pool()
        async with pool.connection() as conn:
            row = await (await conn.execute("SELECT 1")).fetchone()
        assert row == (1,)
        assert await app.async_pool() is pool  # the same loop: the same pool
        await app.aclose()  # an async pool closes on its own loop
        return pool

    first = asyncio.run(use())
    second = asyncio.run(use())  # a new loop: the old loop's pool cannot serve it
    assert first is not second


def test_a_loop_that_ends_while_the_pool_grows_does_not_hang(app: cronbase.App) -> None:
    """asyncio.run cancels every task at its end; psycopg_pool's maintenance worker catches the
    CancelledError of a connection attempt in progress and waits for its next task, so the run
    never returned (CI hung here). The app closes its pool as the loop shuts down."""

    async def main() -> None:
        pool = await app.async_pool()
        held = await pool.getconn()
        second = asyncio.create_task(pool.getconn())  # no idle connection: the pool grows
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        second.cancel()
        await pool.putconn(held)

    finished = threading.Event()

    def run() -> None:
        asyncio.run(main())
        finished.set()

    threading.Thread(target=run, daemon=True).start()
    assert finished.wait(30), "asyncio.run did not return: a pool task survived its loop"
