"""App plumbing on real PostgreSQL: its connection pools."""

from __future__ import annotations

import asyncio

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
