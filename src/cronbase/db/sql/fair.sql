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
-- This table only orders the keys: which have work is found in the jobs index (each claim looks
-- at a window of keys), so a stale or missing row can delay a key by a few claims, never strand
-- its jobs.

-- name: claim_fair_jobs
-- %(limit)s, %(probe)s and %(scan)s are written in as numbers before it runs
-- (worker/claim.py, written_in: so a prepared claim gets a generic plan).
-- Record (move to the history) this worker's waiting successes, as claim_jobs does (the same
-- complete_jobs fragment, one round trip), and lease up to
-- %(limit)s due fair jobs, round robin by pass across their keys. The cost does not grow with
-- the number of keys: a claim reads the %(probe)s busy keys with the lowest next pass (an index)
-- and %(scan)s keys of the jobs index, never all of them.
-- 1. found: the next %(scan)s fair keys with waiting jobs after %(after)s (this worker's cursor,
--    handed back in `cursor`; NULL when the window reached the end: start again), from
--    jobs_flow_due_idx by a skip scan: one probe per key however long its backlog. 'fair:'
--    sorts before the limited scopes ('key:', 'task:'), so the range holds only fair ones. This
--    is how a key new or back from idle is seen: within (keys / %(scan)s) claims of a pass over
--    the keys. Between passes a worker runs this with %(scan)s = 0, one key (worker/fair_claim.py,
--    FairPacing: the window was ~40% of a claim among 1,000 busy keys).
-- 2. clock: the virtual time now, the lowest pass of the busy keys (fair_keys_pass_idx). A key
--    found with no row yet, or idle, starts there (`fresh`): no credit banked while it was idle
--    (else a returning key would take every slot until it caught up). It wins ties: else the
--    key holding the lowest pass, which sets the clock, would win them for good.
-- 3. candidates / probed: the %(probe)s busy keys with the lowest next pass (pass + 1 / weight,
--    fair_keys_next_idx; a walk that stops after them, which the prepared claim's generic plan
--    keeps only without a queue test it cannot evaluate at plan time: so a worker of some queues
--    runs claim_fair_jobs_in_queues, this text with the tests at /* in_fair_queues */ filled in,
--    and a worker of all queues this one, without them; db/queries.py renders both; with the test
--    always present the generic plan read and sorted every busy key, 0.24 ms a claim at 1,000
--    keys) and the fresh keys found, each probed for a due job of
--    this worker's tasks and queues (fair_due_jobs; one index probe: a scalar sub-select with
--    ORDER BY and LIMIT 1; EXISTS became a semi-join hashing every waiting job, 12 ms at
--    20,000 jobs).
-- 4. served / quota: of the keys with a due job, the %(limit)s smallest tags pass + i / weight
--    (i = 1, 2, ...): the weighted round robin of one claim, as slots per key.
-- 5. picked: per key, its quota of jobs in priority order (fair_due_jobs), FOR UPDATE SKIP
--    LOCKED inside the LATERAL (workers claiming the same key at once take different jobs: a
--    key alone keeps every worker busy). A claim may take fewer than %(limit)s (jobs locked
--    by another claim).
-- 6. advanced: keys claimed from advance; fresh keys found join the busy ones at the clock;
--    busy keys probed without a due job turn idle (counted in `held`: a claim that took nothing
--    but did that is tried again at once, the next keys may have work). Rows in scope order, so
--    two claims never deadlock. A key marked idle by a claim whose snapshot missed a job
--    committed meanwhile is found again by the window: its jobs wait, they are never stranded.
WITH RECURSIVE /* include: complete_jobs */, found(k, n) AS (
    SELECT (SELECT min(flow_key) FROM {schema}.jobs
            WHERE status IN ('queued', 'failed')
              AND flow_key > greatest(%(after)s::text, 'fair:') AND flow_key < 'fair;'), 1
    UNION ALL
    SELECT (SELECT min(flow_key) FROM {schema}.jobs
            WHERE status IN ('queued', 'failed') AND flow_key > f.k AND flow_key < 'fair;'),
           f.n + 1
    FROM found f WHERE f.k IS NOT NULL AND f.n < %(scan)s
), clock AS MATERIALIZED (
    SELECT coalesce((SELECT min(pass) FROM {schema}.fair_keys WHERE NOT is_idle),
                    (SELECT max(pass) FROM {schema}.fair_keys), 0) AS v
), candidates AS MATERIALIZED (
    (SELECT x.scope, x.weight, x.pass, false AS fresh FROM {schema}.fair_keys x
     WHERE NOT x.is_idle /* in_fair_queues */
     ORDER BY x.next_pass
     LIMIT %(probe)s)
    UNION ALL
    SELECT x.scope, coalesce(k.weight, 1), greatest(k.pass, c.v), true
    FROM (SELECT f.k AS scope FROM found f WHERE f.k IS NOT NULL) x
    CROSS JOIN clock c LEFT JOIN {schema}.fair_keys k ON k.scope = x.scope
    WHERE k.is_idle IS NOT FALSE /* in_fair_queues */
), probed AS MATERIALIZED (
    -- Every candidate: at most %(probe)s busy keys and %(scan)s fresh ones. A common limit let
    -- fresh keys whose jobs are not due yet (they win ties) take every probe, claim after claim,
    -- while a busy key's due jobs waited.
    SELECT k.*, (/* include: fair_due_jobs */ LIMIT 1) IS NOT NULL AS is_due
    FROM candidates k
), served AS MATERIALIZED (
    SELECT scope, weight, pass, fresh FROM probed WHERE is_due
    ORDER BY pass + 1 / weight, fresh DESC, scope
    LIMIT %(limit)s
), quota AS MATERIALIZED (
    SELECT t.scope, count(*)::integer AS n FROM (
        SELECT s.scope FROM served s CROSS JOIN generate_series(1, %(limit)s) i
        ORDER BY s.pass + i / s.weight, s.fresh DESC, s.scope
        LIMIT %(limit)s
    ) t
    GROUP BY t.scope
), picked AS MATERIALIZED (
    SELECT p.id FROM quota k CROSS JOIN LATERAL (
        /* include: fair_due_jobs */
        LIMIT k.n
        FOR UPDATE OF j SKIP LOCKED
    ) p
    -- Never more than the quotas add up to; said again so the planner knows the row count
    -- (else it expects thousands, and leases them by a hash join over the whole table).
    LIMIT %(limit)s
), claimed AS (
    /* include: lease_picked */
), counts AS MATERIALIZED (
    SELECT flow_key AS scope, count(*) AS n FROM claimed GROUP BY flow_key
), advanced AS (
    -- A claimed key: its pass as this claim saw it (EXCLUDED.pass less this claim's share),
    -- raised to the row's latest pass, plus n / weight. A fresh key: at least the clock. An
    -- idle key keeps its pass.
    INSERT INTO {schema}.fair_keys AS f (scope, weight, pass, claimed, is_idle, updated_at)
    SELECT scope, weight, pass, claimed, is_idle, now() FROM (
        SELECT c.scope, c.weight, c.pass + coalesce(n.n, 0) / c.weight AS pass,
               coalesce(n.n, 0) AS claimed, false AS is_idle
        FROM candidates c LEFT JOIN counts n ON n.scope = c.scope
        WHERE n.n IS NOT NULL
           OR (c.fresh AND NOT EXISTS (
                   SELECT FROM probed p WHERE p.scope = c.scope AND NOT p.is_due))
        UNION ALL
        SELECT p.scope, p.weight, p.pass, 0, true FROM probed p
        WHERE NOT p.fresh AND NOT p.is_due
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
SELECT * FROM claimed FULL JOIN (
    SELECT (SELECT array_agg(id) FROM finished) AS written,
           (SELECT count(*) FROM probed WHERE NOT fresh AND NOT is_due)::integer AS held,
           (SELECT k FROM found WHERE n = %(scan)s) AS cursor
) summary ON false;

-- fragment: fair_due_jobs
-- The due jobs of the fair key k.scope that this worker may run (its tasks, unpaused queues), in
-- the order a claim takes them: `probed` asks whether there is one, `picked` leases its quota.
SELECT j.id FROM {schema}.jobs j
WHERE j.flow_key = k.scope AND j.status IN ('queued', 'failed') AND j.run_at <= now()
  AND (%(tasks)s::text[] IS NULL OR (j.task = ANY (%(tasks)s::text[])
                                      AND (j.task_version IS NULL
                                           OR j.task || '@' || j.task_version
                                              = ANY (%(tasks)s::text[]))))
  AND NOT EXISTS (SELECT FROM {schema}.queues q WHERE q.name = j.queue AND q.is_paused)
ORDER BY j.priority, j.run_at, j.id

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
