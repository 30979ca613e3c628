"""pg-boss 12 (Node, from npm: ``node/package.json`` pins it), driven by Node processes of its
own: ``node/worker.mjs`` (``boss.work()``), ``node/producer.mjs`` (``boss.insert()``) and
``node/setup.mjs`` (schema, queue, pre-load). They print the harness's messages as JSON lines.

The probe is Python: pg-boss 12's fetch statement, as ``fetchNextJob`` in src/plans.ts
(dist/plans.js of the installed 12.38.0) renders it for a standard-policy queue, a worker's
batch of 10, no group or priority options and no telemetry, written out below; the queue's
table is read from ``pgboss.queue`` (``job_common`` unless the queue is partitioned).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import psycopg
from psycopg import sql

from ..processes import NODE_DIR, NodeSpec, PySpec

QUEUE = "pressure"
BATCH = 10  # must match node/worker.mjs's batchSize
SETUP_TIMEOUT = 180.0
# pg-boss 12.38.0, src/plans.ts fetchNextJob(): the `next` CTE locks the batch (SKIP LOCKED),
# the UPDATE makes it active; retry_count counts an attempt only when started_on was set.
FETCH = """
WITH next AS (
  SELECT j.id
  FROM pgboss.{table} j
  WHERE j.name = {queue}
    AND j.state < 'active'
    AND NOT j.blocked
    AND j.start_after <= pgboss.job_now()
  ORDER BY j.priority desc, j.created_on
  LIMIT {limit}
  FOR UPDATE OF j SKIP LOCKED
)
UPDATE pgboss.{table} j SET
  state = 'active',
  started_on = pgboss.job_now(),
  heartbeat_on = pgboss.job_now(),
  retry_count = CASE WHEN started_on IS NOT NULL THEN retry_count + 1 ELSE retry_count END
FROM next
WHERE name = {queue} AND j.id = next.id
RETURNING j.id, name, data, retry_count as "retryCount", expire_seconds as "expireInSeconds",
  heartbeat_seconds as "heartbeatSeconds", group_id as "groupId", group_tier as "groupTier"
"""


def _node(url: str, *args: str) -> None:
    subprocess.run(
        ["node", "setup.mjs", *args],
        cwd=NODE_DIR,
        env={**os.environ, "DATABASE_URL": url},
        check=True,
        timeout=SETUP_TIMEOUT,
        stdout=subprocess.DEVNULL,
    )


class _Prober:
    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        row = self.conn.execute(
            "SELECT table_name FROM pgboss.queue WHERE name = %s", (QUEUE,)
        ).fetchone()
        if row is None:
            raise RuntimeError(f"pg-boss has no queue {QUEUE!r}")
        self.statement = sql.SQL(FETCH).format(
            table=sql.Identifier(row[0]), queue=sql.Literal(QUEUE), limit=sql.Literal(BATCH)
        )

    def claim(self) -> float:
        with self.conn.transaction(force_rollback=True):
            begin = time.perf_counter()
            self.conn.execute(self.statement).fetchall()
            return time.perf_counter() - begin

    def close(self) -> None:
        self.conn.close()


class PgBossSubject:
    key = "pgboss"
    name = "pg-boss"
    schemas = ("pgboss",)
    hot_tables = ("job",)
    setup_note = (
        f"boss.work() per process: batchSize {BATCH}, pollingIntervalSeconds 0.5 (its minimum), "
        "burstWhenBatchFull, perJobResults; otherwise defaults (no LISTEN/NOTIFY); "
        "queue retryLimit 2, retryDelay 1 s; producers: boss.insert()"
    )

    def unavailable(self) -> str | None:
        if shutil.which("node") is None:
            return "no `node` on PATH"
        if not (NODE_DIR / "node_modules" / "pg-boss" / "package.json").exists():
            return f"pg-boss is not installed in {NODE_DIR}/node_modules: run `make pressure`"
        return None

    def setup(self, url: str) -> None:
        _node(url, "setup")

    def preload(self, url: str, n: int) -> None:
        _node(url, "preload", str(n))

    def workers(self, url: str, count: int) -> list[PySpec | NodeSpec]:
        return [
            NodeSpec(f"worker {i}", "worker.mjs", (f"worker {i}",), {"DATABASE_URL": url})
            for i in range(count)
        ]

    def producers(
        self, url: str, schedules: list[list[tuple[float, float, int]]]
    ) -> list[PySpec | NodeSpec]:
        return [
            NodeSpec(
                f"producer {i}",
                "producer.mjs",
                (str(i), json.dumps(schedule)),
                {"DATABASE_URL": url},
            )
            for i, schedule in enumerate(schedules)
        ]

    def prober(self, url: str) -> _Prober:
        return _Prober(url)


SUBJECT = PgBossSubject()
