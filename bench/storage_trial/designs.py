"""Three storages for the hot path, reduced to what a claim touches: a job row with a lease
token, a claim of up to ``n`` due jobs in (priority, run_at, id) order, a completion fenced by
the token that moves the job to a history table.

- ``move``: cronbase's storage before issue 35: one live table, a partial index of due jobs
  walked by ``FOR UPDATE SKIP LOCKED``; the claim also writes the successes it carries (a DELETE
  from the live table, an INSERT into the history).
- ``keyset``: the same tables; each worker starts its scan at the head it saw last (brandur's
  "predicate specificity"), and from the start every ``RESET_SECONDS`` so that a job that
  became visible behind that head (a priority above it, a producer's late commit) is found.
- ``tickets``: jobs are never scanned. A claim first "ticks" (one claimer at a time): the jobs
  made ready since the last tick, found by the id of the transaction that made them ready
  (``ready_xid``, the two-snapshot rule of PgQ), and those that came due, get an immutable
  ticket in their lane (queue, priority); then it takes the next tickets past its lane's cursor
  (the last row of an insert-only ledger) and leases their jobs by primary key. A success is
  marked in place; a maintenance pass moves finished jobs to the history later.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg

LEASE = "interval '1 minute'"

COMMON = """
CREATE TABLE jobs (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue        text        NOT NULL DEFAULT 'default',
    priority     smallint    NOT NULL DEFAULT 100,
    run_at       timestamptz NOT NULL DEFAULT now(),
    status       text        NOT NULL DEFAULT 'queued',
    attempts     integer     NOT NULL DEFAULT 0,
    payload      jsonb       NOT NULL,
    lease_token  uuid,
    locked_until timestamptz,
    locked_by    text,
    finished_at  timestamptz
);
CREATE TABLE history (LIKE jobs);
CREATE INDEX history_id_idx ON history (id);
"""

MOVE_SCHEMA = (
    COMMON
    + """
CREATE INDEX jobs_due_idx ON jobs (priority, run_at, id) WHERE status IN ('queued', 'failed');
CREATE INDEX jobs_lease_idx ON jobs (locked_until) WHERE status = 'running';
"""
)

ENQUEUE = "INSERT INTO jobs (payload) SELECT p FROM unnest(%b::text[]::jsonb[]) AS p RETURNING id"

# The successes the claim carries leave for the history in the same statement, as cronbase's
# claim_jobs writes them (complete_jobs fragment).
CARRY = """
done AS (
    DELETE FROM jobs j USING unnest(%(done)s::bigint[], %(tokens)s::uuid[]) AS o(id, token)
    WHERE j.id = o.id AND j.lease_token = o.token
    RETURNING j.*
), moved AS (
    INSERT INTO history SELECT id, queue, priority, run_at, 'succeeded', attempts, payload,
        NULL, NULL, locked_by, now() FROM done
)"""

MOVE_CLAIM = f"""
WITH {CARRY}, picked AS MATERIALIZED (
    SELECT id FROM jobs WHERE status IN ('queued', 'failed') AND run_at <= now()
    ORDER BY priority, run_at, id LIMIT %(n)s FOR UPDATE SKIP LOCKED
)
UPDATE jobs j SET status = 'running', attempts = j.attempts + 1, lease_token = gen_random_uuid(),
    locked_until = now() + {LEASE}, locked_by = %(worker)s
FROM picked WHERE j.id = picked.id
RETURNING j.id, j.lease_token, j.payload::text, j.priority, j.run_at
"""

KEYSET_CLAIM = f"""
WITH {CARRY}, picked AS MATERIALIZED (
    SELECT id FROM jobs WHERE status IN ('queued', 'failed') AND run_at <= now()
      AND (priority, run_at, id) >= (%(p)s::smallint, %(r)s::timestamptz, %(i)s::bigint)
    ORDER BY priority, run_at, id LIMIT %(n)s FOR UPDATE SKIP LOCKED
)
UPDATE jobs j SET status = 'running', attempts = j.attempts + 1, lease_token = gen_random_uuid(),
    locked_until = now() + {LEASE}, locked_by = %(worker)s
FROM picked WHERE j.id = picked.id
RETURNING j.id, j.lease_token, j.payload::text, j.priority, j.run_at
"""

TICKETS_SCHEMA = (
    COMMON
    + """
-- The transaction that last made the job ready (its insert, a retry, a release): set by the
-- default on insert and by the trigger on any update that makes it wait again.
ALTER TABLE jobs ADD COLUMN ready_xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX jobs_ready_xid_idx ON jobs (ready_xid);
-- Jobs waiting for their time (retries, scheduled): the tick's second pass.
CREATE INDEX jobs_later_idx ON jobs (run_at) WHERE status IN ('queued', 'failed');
CREATE INDEX jobs_lease_idx ON jobs (locked_until) WHERE status = 'running';

CREATE FUNCTION jobs_ready_again() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.ready_xid := pg_current_xact_id();
    RETURN NEW;
END $$;
CREATE TRIGGER jobs_ready_again BEFORE UPDATE ON jobs FOR EACH ROW
    WHEN (NEW.status IN ('queued', 'failed')
          AND (OLD.status NOT IN ('queued', 'failed') OR NEW.run_at <> OLD.run_at
               OR NEW.priority <> OLD.priority OR NEW.queue <> OLD.queue))
    EXECUTE FUNCTION jobs_ready_again();

CREATE TABLE lanes (
    id       integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue    text NOT NULL,
    priority smallint NOT NULL,
    UNIQUE (queue, priority)
);
INSERT INTO lanes (queue, priority) VALUES ('default', 100);
CREATE SEQUENCE ticket_seq;
CREATE TABLE tickets (
    lane      integer NOT NULL,
    seq       bigint  NOT NULL,
    job_id    bigint  NOT NULL,
    ready_xid xid8    NOT NULL,
    PRIMARY KEY (lane, seq)
);
CREATE TABLE ticks (
    id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    snap pg_snapshot NOT NULL,
    at   timestamptz NOT NULL
);
INSERT INTO ticks (snap, at) VALUES (pg_current_snapshot(), clock_timestamp());
CREATE TABLE claims (lane integer NOT NULL, to_seq bigint NOT NULL, PRIMARY KEY (lane, to_seq));

CREATE FUNCTION tick() RETURNS integer LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET enable_bitmapscan = off
AS $$
DECLARE
    prev ticks;
    made integer;
BEGIN
    IF NOT pg_try_advisory_xact_lock(4242) THEN
        RETURN -1;
    END IF;
    SELECT * INTO prev FROM ticks ORDER BY id DESC LIMIT 1;
    WITH cur AS (SELECT pg_current_snapshot() AS snap, greatest(clock_timestamp(), prev.at) AS at),
    made_ready AS MATERIALIZED (
        -- Made ready since the last tick: by a transaction at or past its horizon, or one that
        -- was still running then (PgQ's two-snapshot rule; never the snapshot's xmin, which an
        -- idle transaction pins). Only ready_xid here: the planner then has one index to use,
        -- and the scan covers the new transactions' rows, never the consumed ones.
        SELECT j.id, j.queue, j.priority, j.ready_xid, j.status, j.run_at FROM jobs j, cur
        WHERE j.ready_xid >= pg_snapshot_xmax(prev.snap) AND j.ready_xid < pg_snapshot_xmax(cur.snap)
        UNION ALL
        SELECT j.id, j.queue, j.priority, j.ready_xid, j.status, j.run_at FROM jobs j
        WHERE j.ready_xid = ANY (ARRAY(SELECT pg_snapshot_xip(prev.snap)))
    ), fresh AS (
        SELECT m.id, m.queue, m.priority, m.ready_xid FROM made_ready m, cur
        WHERE m.status IN ('queued', 'failed') AND m.run_at <= cur.at
    ), due AS (
        -- Ready before the last tick, and due since.
        SELECT j.id, j.queue, j.priority, j.ready_xid FROM jobs j, cur
        WHERE j.status IN ('queued', 'failed') AND j.run_at > prev.at AND j.run_at <= cur.at
          AND pg_visible_in_snapshot(j.ready_xid, prev.snap)
    ), made AS (
        INSERT INTO tickets (lane, seq, job_id, ready_xid)
        SELECT l.id, nextval('ticket_seq'), x.id, x.ready_xid
        FROM (SELECT * FROM fresh UNION ALL SELECT * FROM due ORDER BY priority, id) x
        JOIN lanes l ON l.queue = x.queue AND l.priority = x.priority
        RETURNING 1
    ), logged AS (
        INSERT INTO ticks (snap, at) SELECT snap, at FROM cur
    )
    SELECT count(*) INTO made FROM made;
    RETURN made;
END $$;

CREATE FUNCTION claim_tickets(worker text, n integer, done bigint[], done_tokens uuid[])
RETURNS TABLE (id bigint, lease_token uuid, payload text, priority smallint, run_at timestamptz)
LANGUAGE plpgsql
-- Jobs are reached by primary key only: a scan of the table (or a hash of it) would read every
-- dead version a held horizon keeps.
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
DECLARE
    l lanes;
    cursor_seq bigint;
    taken integer;
BEGIN
    UPDATE jobs j SET status = 'succeeded', finished_at = now(), lease_token = NULL,
        locked_until = NULL
    FROM unnest(done, done_tokens) AS o(id, token)
    WHERE j.id = o.id AND j.lease_token = o.token;
    PERFORM tick();
    FOR l IN SELECT * FROM lanes ORDER BY lanes.priority LOOP
        EXIT WHEN n <= 0;
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(4243, l.id);
        SELECT coalesce(max(c.to_seq), 0) INTO cursor_seq FROM claims c WHERE c.lane = l.id;
        RETURN QUERY
        WITH t AS (
            SELECT tk.seq, tk.job_id, tk.ready_xid FROM tickets tk
            WHERE tk.lane = l.id AND tk.seq > cursor_seq ORDER BY tk.seq LIMIT n
        ), led AS (
            INSERT INTO claims (lane, to_seq) SELECT l.id, max(t.seq) FROM t HAVING count(*) > 0
        )
        UPDATE jobs j SET status = 'running', attempts = j.attempts + 1,
            lease_token = gen_random_uuid(), locked_until = now() + interval '1 minute',
            locked_by = worker
        FROM t
        WHERE j.id = t.job_id AND j.ready_xid = t.ready_xid AND j.status IN ('queued', 'failed')
        RETURNING j.id, j.lease_token, j.payload::text, j.priority, j.run_at;
        GET DIAGNOSTICS taken = ROW_COUNT;
        n := n - taken;
    END LOOP;
END $$;
"""
)

TICKETS_CLAIM = (
    "SELECT * FROM claim_tickets(%(worker)s, %(n)s, %(done)s::bigint[], %(tokens)s::uuid[])"
)

# The tickets design's maintenance: finished jobs to the history, consumed tickets and old
# ledger and tick rows deleted (below every cursor: no claim reads them).
TICKETS_MAINTAIN = """
WITH gone AS (
    DELETE FROM jobs WHERE status = 'succeeded' RETURNING *
), moved AS (
    INSERT INTO history SELECT id, queue, priority, run_at, status, attempts, payload,
        NULL, NULL, locked_by, finished_at FROM gone
), cut AS (
    SELECT lane, max(to_seq) AS to_seq FROM claims GROUP BY lane
), old_tickets AS (
    DELETE FROM tickets t USING cut WHERE t.lane = cut.lane AND t.seq <= cut.to_seq
), old_claims AS (
    DELETE FROM claims c USING cut WHERE c.lane = cut.lane AND c.to_seq < cut.to_seq
)
DELETE FROM ticks WHERE id < (SELECT max(id) - 100 FROM ticks)
"""


def array(values: list[Any]) -> str:
    return "{" + ",".join(str(v) for v in values) + "}"


@dataclass
class Worker:
    """One worker's claim state: the successes it carries, and the keyset design's head."""

    name: str
    design: str
    done: list[int] = field(default_factory=list)
    tokens: list[uuid.UUID] = field(default_factory=list)
    head: tuple[int, Any, int] | None = None
    reset_at: float = 0.0

    def claim(self, conn: psycopg.Connection[Any], n: int) -> list[tuple[Any, ...]]:
        params: dict[str, Any] = {
            "worker": self.name,
            "n": n,
            "done": array(self.done),
            "tokens": array(self.tokens),
        }
        if self.design == "move":
            rows = conn.execute(MOVE_CLAIM, params).fetchall()
        elif self.design == "keyset":
            now = time.monotonic()
            if self.head is None or now >= self.reset_at:
                self.head, self.reset_at = (-32768, "-infinity", 0), now + RESET_SECONDS
            params.update(p=self.head[0], r=self.head[1], i=self.head[2])
            rows = conn.execute(KEYSET_CLAIM, params).fetchall()
            if rows:
                first = min(rows, key=lambda r: (r[3], r[4], r[0]))
                self.head = (first[3], first[4], first[0])
        else:
            rows = conn.execute(TICKETS_CLAIM, params).fetchall()
        self.done, self.tokens = [r[0] for r in rows], [r[1] for r in rows]
        return rows


# How often a keyset worker scans from the start again.
RESET_SECONDS = 2.0

SCHEMAS = {"move": MOVE_SCHEMA, "keyset": MOVE_SCHEMA, "tickets": TICKETS_SCHEMA}
MAINTAIN = {"tickets": TICKETS_MAINTAIN}


def payloads(n: int) -> list[str]:
    t = time.time()
    return [json.dumps({"t": t})] * n
