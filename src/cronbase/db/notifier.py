"""LISTEN/NOTIFY on a dedicated connection, reconnecting when it drops.

Each statement that makes jobs due (enqueue, retry, requeue, release, reap) sends one
notification per queue on channel ``<schema>_jobs``; the worker's claim loop wakes on it. Polling
stays as the fallback, so a lost notification delays a job by at most one poll interval, never
loses it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import psycopg
from psycopg import sql

from .outage import OUTAGE, first_failure

logger = logging.getLogger("cronbase")

# The longest pause between reconnects: after a restart the listener is back within about this
# long, and wakes its worker to claim what was enqueued meanwhile.
RETRY_FIRST = 0.1
RETRY_MAX = 1.0


def channel_name(schema: str) -> str:
    return f"{schema}_jobs"


def done_channel_name(schema: str) -> str:
    """Final states of jobs someone waits for: each NOTIFY carries their ids, comma-separated."""
    return f"{schema}_done"


class Notifier:
    """Calls ``on_notify(payload)`` for each notification; ``on_reconnect()`` after each reconnect."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[psycopg.AsyncConnection]],
        channel: str,
        on_notify: Callable[[str], None],
        on_reconnect: Callable[[], None],
    ) -> None:
        self._connect = connect
        self.channel = channel
        self._on_notify = on_notify
        self._on_reconnect = on_reconnect
        self.backend_pid: int | None = None
        self.connections_made = 0
        self.listening = asyncio.Event()

    async def run(self) -> None:
        """Listen until cancelled; any failure leads to a new connection after a pause."""
        delay = RETRY_FIRST
        while True:
            try:
                conn = await self._connect()
            except Exception as exc:
                if delay == RETRY_FIRST:  # once per outage, not once a second
                    first_failure(
                        "listening", exc, "listen connection failed (%s); retrying until it works"
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)
                continue
            try:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                self.backend_pid = conn.info.backend_pid
                self.connections_made += 1
                if self.connections_made > 1:
                    OUTAGE.works("listening")
                    logger.info("listen connection re-established")
                    # Anything enqueued while we were away sent its notification to nobody.
                    self._on_reconnect()
                self.listening.set()
                delay = RETRY_FIRST
                async for notification in conn.notifies():
                    self._on_notify(notification.payload)
            except Exception as exc:
                # Not only OperationalError: whatever ends the listen, the notifier must live on,
                # or the worker silently falls back to polling for good.
                first_failure("listening", exc, "listen connection lost (%s); reconnecting")
            finally:
                self.listening.clear()
                self.backend_pid = None
                await conn.close()
            # A connection that keeps dying at once (server restarting) is not retried in a
            # tight loop.
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)
