-- Tickets (migration 0020, docs/design/storage.md): the order in which plain jobs are claimed,
-- written by the tick that claim_jobs' claim_tickets runs first, read past each lane's cursor,
-- and cleared once behind every cursor. Nothing here walks rows that a held horizon keeps: the
-- tick reads jobs by the transactions since the last tick, the claim reads tickets past a
-- cursor, the clearing deletes what no claim reads again.

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
