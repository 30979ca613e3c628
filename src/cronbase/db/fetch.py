"""Run one named statement on the App's pool and get dict rows: the admin modules' one helper."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from psycopg.rows import dict_row

if TYPE_CHECKING:
    from ..app import App

Row = dict[str, Any]


def fetch_all(app: App, query: bytes, params: Mapping[str, Any] | None = None) -> list[Row]:
    with app.pool().connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute(query, params)
        return cur.fetchall() if cur.description else []


def fetch_one(app: App, query: bytes, params: Mapping[str, Any] | None = None) -> Row | None:
    rows = fetch_all(app, query, params)
    return rows[0] if rows else None


async def fetch_all_async(
    app: App, query: bytes, params: Mapping[str, Any] | None = None
) -> list[Row]:
    pool = await app.async_pool()
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall() if cur.description else []


async def fetch_one_async(
    app: App, query: bytes, params: Mapping[str, Any] | None = None
) -> Row | None:
    rows = await fetch_all_async(app, query, params)
    return rows[0] if rows else None
