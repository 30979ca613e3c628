-- Tickets (migration 0020, docs/design/storage.md): the order in which plain jobs are claimed,
-- written by the tick that claim_jobs runs first, read past each lane's cursor, and cleared
-- once behind every cursor. Nothing here walks rows that a held horizon keeps: the tick reads
-- jobs by the transactions since the last tick, the claim reads tickets past a cursor, the
-- clearing deletes what no claim reads again.

-- fragment: tick
-- One claim at a time ticks (the schema's tick lock, to the end of its transaction; an uncorrelated
-- subquery, tried once): the others take the tickets already there. `prev` is the last tick this
-- statement's snapshot sees (none, in a table emptied by TRUNCATE: tick 0, before every
-- transaction: this tick then tickets every ready job); `cur` this one: the statement's snapshot
-- and the time, never before the last tick's. `seen`: what the tick reads of jobs
-- (ready_since, migration 0020: the jobs made ready since the last tick, and those come due
-- since), `ready` those of them to ticket. `tick`: this tick, after the one it read (prev_id is
-- unique: a claim whose snapshot predates another's tick writes no tick and, joined to it, no
-- ticket). Its tickets take seq = tick id << 24 + their rank (a later tick commits after this
-- one, so its id and its tickets' seqs are larger): by priority, then run_at and id, in lanes of
-- (queue, priority, id modulo the shards: db/queries.py's LANE_SHARDS).
last_tick AS MATERIALIZED (
    SELECT t.id, t.snap, t.at FROM {schema}.ticks t ORDER BY t.id DESC LIMIT 1
), prev AS MATERIALIZED (
    SELECT id, snap, at FROM last_tick
    UNION ALL
    SELECT 0, '1:1:'::pg_snapshot, '-infinity'::timestamptz WHERE NOT EXISTS (SELECT FROM last_tick)
), cur AS MATERIALIZED (
    SELECT prev.id AS prev_id, prev.snap AS prev_snap, prev.at AS prev_at,
           pg_current_snapshot() AS snap, greatest(clock_timestamp(), prev.at) AS at
    FROM prev
    WHERE (SELECT pg_try_advisory_xact_lock({tick_lock}, 0))
), seen AS MATERIALIZED (
    SELECT s.* FROM cur, {schema}.ready_since(cur.prev_snap, cur.snap, cur.prev_at, cur.at) s
), ready AS MATERIALIZED (
    SELECT id, queue, priority, run_at, ready_xid FROM seen WHERE is_ready
), tick AS (
    -- Only when it read something: a tick after nothing would be a row per claim for nothing
    -- (the next tick's range starts at the same place and is as empty).
    INSERT INTO {schema}.ticks (prev_id, snap, at) SELECT prev_id, snap, at FROM cur
    WHERE EXISTS (SELECT FROM seen)
    ON CONFLICT (prev_id) DO NOTHING
    RETURNING id
), new_lanes AS (
    INSERT INTO {schema}.lanes (queue, priority, shard)
    SELECT DISTINCT r.queue, r.priority, mod(r.id, {lane_shards})::smallint FROM ready r, tick
    ON CONFLICT DO NOTHING
    RETURNING id, queue, priority, shard
), made AS (
    INSERT INTO {schema}.tickets (lane, seq, job_id, ready_xid)
    SELECT l.id, (tick.id << 24) + r.rank, r.id, r.ready_xid
    FROM tick
    CROSS JOIN (
        SELECT ready.*, row_number() OVER (ORDER BY priority, run_at, id) AS rank FROM ready
    ) r
    JOIN (SELECT id, queue, priority, shard FROM {schema}.lanes
          UNION ALL SELECT id, queue, priority, shard FROM new_lanes) l
      ON l.queue = r.queue AND l.priority = r.priority AND l.shard = mod(r.id, {lane_shards})
    RETURNING lane, seq, job_id, ready_xid
)

-- name: unpark_jobs
-- A worker makes ready again the waiting plain jobs of its tasks that have no ticket: parked by
-- a claim when no live worker knew their task, or there from before migration 0020. As it
-- starts, and each reaper round: jobs_parked_idx holds only those (one probe when none).
UPDATE {schema}.jobs j SET ready_xid = pg_current_xact_id()
WHERE j.ready_xid IS NULL AND j.status IN ('queued', 'failed') AND j.flow_key IS NULL
  AND (%(tasks)s::text[] IS NULL
       OR CASE WHEN j.task_version IS NULL THEN j.task ELSE j.task || '@' || j.task_version END
          = ANY (%(tasks)s::text[]));

-- name: clear_tickets
-- What no claim reads again, deleted by the reaper round (one worker at a time, %(key)s): a
-- lane's tickets up to its cursor and its cursor rows but the last, and the ticks before the
-- last hundred; each from where the last clearing stopped (%(since)s, %(ticks_since)s), so the
-- rows it deleted before are not walked again while the horizon keeps them. Returns how many
-- tickets went and where the next clearing starts.
WITH lock AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(%(key)s) AS held
), cursors AS MATERIALIZED (
    SELECT l.id AS lane, k.to_seq
    FROM lock, {schema}.lanes l
    CROSS JOIN LATERAL (
        SELECT max(lc.to_seq) AS to_seq FROM {schema}.lane_claims lc WHERE lc.lane = l.id
    ) k
    WHERE lock.held AND k.to_seq IS NOT NULL
), gone AS (
    DELETE FROM {schema}.tickets t
    USING cursors c
    WHERE t.lane = c.lane AND t.seq <= c.to_seq AND t.seq > %(since)s
    RETURNING 1
), old_cursors AS (
    DELETE FROM {schema}.lane_claims lc
    USING cursors c
    WHERE lc.lane = c.lane AND lc.to_seq < c.to_seq AND lc.to_seq > %(since)s
), last_tick AS MATERIALIZED (
    SELECT max(id) - 100 AS below FROM {schema}.ticks WHERE (SELECT held FROM lock)
), old_ticks AS (
    DELETE FROM {schema}.ticks
    WHERE id > %(ticks_since)s AND id < (SELECT below FROM last_tick)
)
SELECT (SELECT count(*) FROM gone) AS deleted,
       (SELECT min(to_seq) FROM cursors) AS cleared_to,
       (SELECT below FROM last_tick) AS ticks_cleared_to;
