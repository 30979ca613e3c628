-- Fair share between keys (fair_key tasks): the claim, weights, and what the dashboard shows.
-- Loaded by db/queries.py.
--
-- A fair job carries 'fair:<queue>|<key>' in flow_key: the plain claim's indexes leave it out,
-- and claim_fair_jobs takes it. The schedule is stride scheduling (Waldspurger and Weihl, 1995),
-- the virtual-time form of weighted round robin: every key has a pass in fair_keys; claiming n
-- jobs of a key advances its pass by n / weight; a claim gives its slots to the keys with the
-- lowest pass. So a key alone gets every slot, two busy keys of equal weight alternate, and a
-- key of weight 2 gets two slots for the other's one. Within a key, jobs go by priority, run_at,
-- id, as everywhere.
--
-- Race-free across workers without a lock held between statements (one statement, so through a
-- transaction pooler too): jobs are taken with FOR UPDATE SKIP LOCKED, so two claims never take
-- the same job; passes are advanced by an upsert that adds this claim's count to the row's
-- latest committed pass (ON CONFLICT DO UPDATE reads it under the row lock), so concurrent
-- claims never lose each other's advance. Two claims that start together may both serve the
-- lowest key: the key is ahead for an instant and its pass says so, so the next claims serve
-- the others until it evens out. The rows are written in scope order: no two claims deadlock.
-- Which keys have work is read from the jobs, never from this table, so a stale or missing row
-- can only misplace a key in the order, never strand its jobs.

-- name: claim_fair_jobs
-- Record this worker's waiting successes (as claim_jobs does: one round trip) and lease up to
-- %(limit)s due fair jobs, round robin by pass across their keys.
-- 1. scopes: the fair keys with waiting jobs, from jobs_flow_due_idx by a skip scan (one probe
--    per key however long its backlog; 'fair:' sorts before the limited scopes 'key:', 'task:',
--    so the range holds only fair ones). ~1 ms per 1,000 keys (bench/README.md).
-- 2. clock: the virtual time now, the lowest pass of the keys that were busy at the last claim.
--    A key with no row yet, or marked idle, starts there: no credit banked while it was idle
--    (else a returning key would take every slot until it caught up). It wins ties (`fresh`):
--    else the key holding the lowest pass, which sets the clock, would win them for good.
-- 3. ordered / served: keys by their next tag (pass + 1 / weight); only keys with a due job this
--    worker runs are served, checked in that order until %(limit)s are found (the MATERIALIZED
--    CTE keeps its order for the scan above it: keys past the first few are never probed).
-- 4. quota: how many of the slots each served key gets: the %(limit)s smallest tags
--    pass + i / weight (i = 1, 2, ...) over the served keys, the weighted round robin of one
--    claim.
-- 5. picked: per key, its quota of jobs in priority order, FOR UPDATE SKIP LOCKED inside the
--    LATERAL (so workers claiming the same key at once take different jobs; a key alone keeps
--    every worker busy). A claim may take fewer than %(limit)s (jobs locked by another claim).
-- 6. advanced: the passes of the keys claimed from, and keys with no waiting job marked idle.
WITH RECURSIVE finished AS (
    /* include: complete_jobs */
), scopes(k) AS (
    SELECT min(flow_key) FROM {schema}.jobs
    WHERE status IN ('queued', 'failed') AND flow_key > 'fair:' AND flow_key < 'fair;'
    UNION ALL
    SELECT (SELECT min(flow_key) FROM {schema}.jobs
            WHERE status IN ('queued', 'failed') AND flow_key > s.k AND flow_key < 'fair;')
    FROM scopes s WHERE s.k IS NOT NULL
), waiting AS MATERIALIZED (
    SELECT s.k AS scope, f.pass, coalesce(f.weight, 1) AS weight, f.is_idle
    FROM scopes s LEFT JOIN {schema}.fair_keys f ON f.scope = s.k
    WHERE s.k IS NOT NULL
), clock AS MATERIALIZED (
    SELECT coalesce(min(pass) FILTER (WHERE NOT is_idle), max(pass), 0) AS v FROM waiting
), ordered AS MATERIALIZED (
    SELECT w.scope, w.weight, e.pass, w.is_idle IS NOT FALSE AS fresh
    FROM waiting w CROSS JOIN clock c
    CROSS JOIN LATERAL (
        SELECT CASE WHEN w.is_idle IS FALSE THEN w.pass ELSE greatest(w.pass, c.v) END AS pass
    ) e
    ORDER BY e.pass + 1 / w.weight, fresh DESC, w.scope
), served AS MATERIALIZED (
    SELECT o.scope, o.weight, o.pass, o.fresh FROM ordered o
    WHERE EXISTS (
        SELECT FROM {schema}.jobs j
        WHERE j.flow_key = o.scope AND j.status IN ('queued', 'failed') AND j.run_at <= now()
          AND (%(tasks)s::text[] IS NULL OR j.task = ANY (%(tasks)s::text[]))
          AND (%(queues)s::text[] IS NULL OR j.queue = ANY (%(queues)s::text[]))
          AND NOT EXISTS (SELECT FROM {schema}.queues q WHERE q.name = j.queue AND q.is_paused))
    LIMIT %(limit)s
), quota AS MATERIALIZED (
    SELECT t.scope, count(*)::integer AS n FROM (
        SELECT s.scope FROM served s CROSS JOIN generate_series(1, %(limit)s) i
        ORDER BY s.pass + i / s.weight, s.fresh DESC, s.scope
        LIMIT %(limit)s
    ) t
    GROUP BY t.scope
), picked AS MATERIALIZED (
    SELECT p.id FROM quota q CROSS JOIN LATERAL (
        SELECT j.id FROM {schema}.jobs j
        WHERE j.flow_key = q.scope AND j.status IN ('queued', 'failed') AND j.run_at <= now()
          AND (%(tasks)s::text[] IS NULL OR j.task = ANY (%(tasks)s::text[]))
          AND (%(queues)s::text[] IS NULL OR j.queue = ANY (%(queues)s::text[]))
          AND NOT EXISTS (SELECT FROM {schema}.queues q WHERE q.name = j.queue AND q.is_paused)
        ORDER BY j.priority, j.run_at, j.id
        LIMIT q.n
        FOR UPDATE OF j SKIP LOCKED
    ) p
), claimed AS (
    /* include: lease_picked */
), advanced AS (
    -- A claimed key: its pass as this claim saw it (EXCLUDED.pass less this claim's share),
    -- raised to the row's latest pass, plus n / weight. An idle key keeps its pass.
    INSERT INTO {schema}.fair_keys AS f (scope, weight, pass, claimed, is_idle, updated_at)
    SELECT scope, weight, pass, claimed, is_idle, now() FROM (
        SELECT s.scope, s.weight, s.pass + c.n / s.weight AS pass, c.n AS claimed,
               false AS is_idle
        FROM (SELECT flow_key, count(*) AS n FROM claimed GROUP BY flow_key) c
        JOIN served s ON s.scope = c.flow_key
        UNION ALL
        SELECT b.scope, b.weight, b.pass, 0, true FROM {schema}.fair_keys b
        WHERE NOT b.is_idle AND NOT EXISTS (SELECT FROM waiting w WHERE w.scope = b.scope)
    ) t
    ORDER BY scope
    ON CONFLICT (scope) DO UPDATE
    SET pass = CASE WHEN EXCLUDED.is_idle THEN f.pass
                    ELSE greatest(f.pass, EXCLUDED.pass - EXCLUDED.claimed / EXCLUDED.weight)
                         + EXCLUDED.claimed / f.weight END,
        claimed = f.claimed + EXCLUDED.claimed,
        is_idle = EXCLUDED.is_idle,
        updated_at = now()
)
SELECT * FROM claimed FULL JOIN (SELECT array_agg(id) AS written FROM finished) w ON false;

-- name: set_fair_weight
-- An operator's weight for one key (1: the default share). A key first named here starts idle:
-- its first claim places it at the busy keys' lowest pass, not at 0.
INSERT INTO {schema}.fair_keys AS f (scope, weight, is_idle)
VALUES (%(scope)s, %(weight)s, true)
ON CONFLICT (scope) DO UPDATE SET weight = EXCLUDED.weight, updated_at = now()
RETURNING scope, weight;

-- name: list_fair_keys
-- The busiest fair keys (waiting and running jobs), with their weights and how many jobs each
-- has had claimed, and keys with a weight set; for the dashboard and `cronbase queues fair`.
-- Reads every waiting fair job (jobs_flow_due_idx): for operators, not the hot path.
WITH counts AS (
    SELECT flow_key AS scope,
           count(*) FILTER (WHERE status IN ('queued', 'failed')) AS waiting,
           count(*) FILTER (WHERE status = 'running') AS running
    FROM {schema}.jobs
    WHERE flow_key > 'fair:' AND flow_key < 'fair;' AND status IN ('queued', 'failed', 'running')
    GROUP BY flow_key
)
SELECT split_part(substr(s.scope, 6), '|', 1) AS queue,
       substr(s.scope, strpos(s.scope, '|') + 1) AS key,
       coalesce(c.waiting, 0) AS waiting, coalesce(c.running, 0) AS running,
       coalesce(f.weight, 1) AS weight, coalesce(f.claimed, 0) AS claimed
FROM (SELECT scope FROM counts UNION SELECT scope FROM {schema}.fair_keys WHERE weight <> 1) s
LEFT JOIN counts c ON c.scope = s.scope
LEFT JOIN {schema}.fair_keys f ON f.scope = s.scope
WHERE %(queue)s::text IS NULL OR split_part(substr(s.scope, 6), '|', 1) = %(queue)s::text
ORDER BY coalesce(c.waiting, 0) + coalesce(c.running, 0) DESC, s.scope
LIMIT %(limit)s;
