"""The disturbances a scenario applies to the subject's database (the overload is a change of
rate in the producers' schedule and needs nothing here).

- :class:`IdleTransaction`: one session that begins a REPEATABLE READ transaction, takes an xid
  (``pg_current_xact_id()``) and a snapshot, and sits idle in it until the disturbance ends:
  vacuum can remove no row version deleted after it began, anywhere in the database.
- :class:`Readers`: four sessions, each running one REPEATABLE READ transaction every
  ``period`` seconds (staggered) that counts every row of each of the queue's tables, then
  commits. Unlike the idle session they hold each snapshot only as long as their scans take,
  but some snapshot is open much of the time, and the scans compete for the 2 cores and the
  buffers as reporting queries on a busy queue do.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
from psycopg import sql

from .config import PressureConfig, Scenario

READER_STATEMENT_TIMEOUT = "60s"  # a scan of a bloated table is bounded too


class IdleTransaction:
    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, application_name="pressure idle transaction")
        self.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        # The first statement takes the snapshot (REPEATABLE READ keeps it) and the xid.
        self.conn.execute("SELECT pg_current_xact_id()").fetchone()

    def close(self) -> None:
        self.conn.commit()
        self.conn.close()


class Readers:
    """``count`` reader threads (psycopg waits with the GIL released: the work is the
    server's) until :meth:`close`; each scan's duration is kept for the report."""

    def __init__(self, url: str, tables: list[sql.Composable], count: int, period: float) -> None:
        self.url = url
        self.tables = tables
        self.period = period
        self.scans: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(i * period / count,), daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def _run(self, offset: float) -> None:
        try:
            with psycopg.connect(
                self.url,
                application_name="pressure reader",
                options=f"-c statement_timeout={READER_STATEMENT_TIMEOUT}",
            ) as conn:
                conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
                next_at = time.monotonic() + offset
                while not self._stop.wait(max(0.0, next_at - time.monotonic())):
                    begin = time.perf_counter()
                    with conn.transaction():
                        for table in self.tables:
                            conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table))
                    self.scans.append(time.perf_counter() - begin)
                    next_at += self.period
        except Exception as error:  # a reader's failure is reported, not fatal
            self.errors.append(f"{type(error).__name__}: {error}")

    def close(self) -> dict[str, Any]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=70)
        scans = sorted(self.scans)
        return {
            "scans": len(scans),
            "scan_median_s": scans[len(scans) // 2] if scans else None,
            "scan_max_s": scans[-1] if scans else None,
            "errors": self.errors[:4],
        }


class Disturbance:
    """What a scenario starts at its disturbance and ends after it: the idle transaction, or
    the readers (of the subject's hot tables; of every table ``reading`` found in its schema
    when it names none)."""

    def __init__(
        self,
        scenario: Scenario,
        url: str,
        schema: str,
        hot_tables: tuple[str, ...] | None,
        reading: dict[str, Any],
        config: PressureConfig,
    ) -> None:
        self.idle: IdleTransaction | None = None
        self.readers: Readers | None = None
        if scenario.key == "idle":
            self.idle = IdleTransaction(url)
        elif scenario.key == "readers":
            names = hot_tables or tuple(reading["tables"])
            self.readers = Readers(
                url,
                [sql.Identifier(schema, name) for name in names],
                config.readers,
                config.reader_period,
            )

    def close(self) -> dict[str, Any]:
        if self.idle is not None:
            self.idle.close()
            self.idle = None
        if self.readers is not None:
            readers, self.readers = self.readers, None
            return readers.close()
        return {}
