-- Flow control: claims of limited jobs, and the limits they read. Loaded by db/queries.py.
--
-- How a limit holds across any number of workers (worker/flow.py runs the two claim statements
-- in one transaction):
-- 1. claim_flow_candidates picks candidate jobs from its snapshot and takes a transaction-level
--    advisory lock per scope they need (task:T, key:T|K, queue:Q), with pg_try_advisory_xact_lock:
--    a scope another worker is claiming in is skipped this round, never waited for;
-- 2. claim_flow_jobs, a new statement and so (at READ COMMITTED) a new snapshot, taken after the
--    locks: every claim in those scopes committed before it is visible, and none can commit
--    until we do. It counts the scopes' running jobs and recent starts and admits a candidate
--    only if it fits in every one of its scopes.
-- The snapshot of step 1 only finds candidates; it never decides room: a count read from a
-- snapshot older than the lock misses claims committed in between, the overrun pgqueuer (#761,
-- #774) and DBOS had with SKIP LOCKED. A slot is a running row, counted, not a counter: nothing
-- has to be released when an attempt ends, is reaped, cancelled or fenced out, and nothing can
-- drift (solid_queue's double release, PR #761; a killed worker's slot stays taken until its
-- job is reaped, #735).

-- name: register_task_limits
-- A starting worker writes the limits its code declares for its tasks (the last worker started
-- wins) and removes those of its tasks that no longer declare any. A task's start log is kept.
WITH removed AS (
    DELETE FROM {schema}.flow_limits
    WHERE scope = ANY (%(unlimited)s::text[])
), written AS (
    INSERT INTO {schema}.flow_limits AS f
        (scope, max_running, rate_n, rate_period, key_max_running, key_rate_n, key_rate_period)
    SELECT * FROM unnest(%(scopes)s::text[], %(max_running)s::integer[], %(rate_n)s::integer[],
                         %(rate_period)s::interval[], %(key_max_running)s::integer[],
                         %(key_rate_n)s::integer[], %(key_rate_period)s::interval[])
    ON CONFLICT (scope) DO UPDATE
    SET max_running = EXCLUDED.max_running, rate_n = EXCLUDED.rate_n,
        rate_period = EXCLUDED.rate_period, key_max_running = EXCLUDED.key_max_running,
        key_rate_n = EXCLUDED.key_rate_n, key_rate_period = EXCLUDED.key_rate_period,
        updated_at = now()
    RETURNING scope
)
SELECT count(*) FROM written;

-- name: list_task_limits
-- Every task's limits (for `cronbase queues` and the dashboard).
SELECT substr(scope, 6) AS task, max_running, rate_n, rate_period, key_max_running, key_rate_n,
       key_rate_period, updated_at
FROM {schema}.flow_limits WHERE scope LIKE 'task:%%'
ORDER BY scope;

-- name: list_limited_queues
-- The queues whose jobs only claim_flow_jobs takes (a worker asks at each reap).
SELECT name FROM {schema}.queues WHERE max_running IS NOT NULL OR rate_n IS NOT NULL ORDER BY name;

-- name: set_queue_limit
-- At most %(max_running)s running jobs of the queue across all workers (NULL: none). Counted
-- from running rows, so jobs already running count at once; claims begun after the commit obey.
INSERT INTO {schema}.queues AS q (name, max_running, updated_at)
VALUES (%(name)s, %(max_running)s, now())
ON CONFLICT (name) DO UPDATE SET max_running = EXCLUDED.max_running, updated_at = now()
RETURNING /* include: queue_state */;

-- name: set_queue_rate
-- At most %(rate_n)s starts of the queue's jobs in any window of %(rate_period)s (NULL: none).
INSERT INTO {schema}.queues AS q (name, rate_n, rate_period, updated_at)
VALUES (%(name)s, %(rate_n)s, %(rate_period)s, now())
ON CONFLICT (name) DO UPDATE
SET rate_n = EXCLUDED.rate_n, rate_period = EXCLUDED.rate_period, updated_at = now()
RETURNING /* include: queue_state */;

-- name: set_queue_aging
-- Priority aging of the queue's waiting jobs: %(aging_step)s priority gained for each
-- %(aging_every)s a job has been due, down to 0 at most (NULL: none; age_priorities in jobs.sql).
-- A NULL step keeps the queue's step, or takes %(default_step)s. Turning aging off leaves aged
-- jobs where they are.
INSERT INTO {schema}.queues AS q (name, aging_every, aging_step, updated_at)
VALUES (%(name)s, %(aging_every)s::interval,
        CASE WHEN %(aging_every)s::interval IS NOT NULL
             THEN coalesce(%(aging_step)s::integer, %(default_step)s::integer) END, now())
ON CONFLICT (name) DO UPDATE
SET aging_every = EXCLUDED.aging_every,
    aging_step = CASE WHEN EXCLUDED.aging_every IS NOT NULL
                      THEN coalesce(%(aging_step)s::integer, q.aging_step, EXCLUDED.aging_step) END,
    updated_at = now()
RETURNING /* include: queue_state */;

-- name: claim_flow_candidates
-- Step 1 (see the top of this file): up to %(scan)s due limited jobs this worker may run, and
-- the advisory locks of their scopes. Candidates come per scope from jobs_flow_due_idx, stepping
-- from one flow_key to the next (a skip scan: one probe per scope, however long its backlog),
-- starting after %(after)s, the last scope this worker claimed in, and wrapping around: scopes
-- are served round robin, and a full one is passed over, so it holds back no other (no
-- head-of-line blocking). A scope that looks full in this snapshot is skipped without a lock;
-- %(per_scope)s caps the candidates taken from one scope. The jobs of a limited queue that carry
-- no flow_key come from jobs_queue_due_idx. Fair jobs' scopes ('fair:...', claim_fair_jobs in
-- fair.sql) sort before the limited ones ('key:', 'task:'): the range `> 'fair;'` steps over them
-- without a probe.
WITH RECURSIVE ahead(k) AS (
    SELECT min(flow_key) FROM {schema}.jobs
    WHERE status IN ('queued', 'failed') AND flow_key > greatest(%(after)s, 'fair;')
    UNION ALL
    SELECT (SELECT min(flow_key) FROM {schema}.jobs
            WHERE status IN ('queued', 'failed') AND flow_key IS NOT NULL AND flow_key > a.k)
    FROM ahead a WHERE a.k IS NOT NULL
), behind(k) AS (
    SELECT min(flow_key) FROM {schema}.jobs
    WHERE status IN ('queued', 'failed') AND flow_key > 'fair;'
    UNION ALL
    SELECT (SELECT min(flow_key) FROM {schema}.jobs
            WHERE status IN ('queued', 'failed') AND flow_key IS NOT NULL AND flow_key > b.k)
    FROM behind b WHERE b.k IS NOT NULL AND b.k <= %(after)s
), busy AS MATERIALIZED (
    SELECT flow_key, count(*) AS n FROM {schema}.jobs
    WHERE status = 'running' AND flow_key IS NOT NULL
    GROUP BY flow_key
), limited_queues AS MATERIALIZED (
    SELECT name FROM {schema}.queues
    WHERE (max_running IS NOT NULL OR rate_n IS NOT NULL) AND NOT is_paused
      AND (%(queues)s::text[] IS NULL OR name = ANY (%(queues)s::text[]))
), keyed AS MATERIALIZED (
    SELECT c.* FROM (
        SELECT k FROM ahead WHERE k IS NOT NULL
        UNION ALL
        SELECT k FROM behind WHERE k IS NOT NULL AND k <= %(after)s
    ) s
    LEFT JOIN busy b ON b.flow_key = s.k
    CROSS JOIN LATERAL (
        SELECT j.id, j.task, j.queue, j.flow_key, j.priority, j.run_at FROM {schema}.jobs j
        WHERE j.flow_key = s.k AND j.status IN ('queued', 'failed') AND j.run_at <= now()
          AND (%(tasks)s::text[] IS NULL
               OR j.task = ANY (%(tasks)s::text[])
                  AND (j.task_version IS NULL
                       OR j.task || '@' || j.task_version = ANY (%(tasks)s::text[])))
          AND (%(queues)s::text[] IS NULL OR j.queue = ANY (%(queues)s::text[]))
          AND NOT EXISTS (SELECT FROM {schema}.queues q WHERE q.name = j.queue AND q.is_paused)
        ORDER BY j.priority, j.run_at, j.id
        LIMIT greatest(%(per_scope)s - coalesce(b.n, 0), 0)
    ) c
    LIMIT %(scan)s
), queued AS MATERIALIZED (
    SELECT c.* FROM limited_queues lq CROSS JOIN LATERAL (
        SELECT j.id, j.task, j.queue, j.flow_key, j.priority, j.run_at FROM {schema}.jobs j
        WHERE j.queue = lq.name AND j.status IN ('queued', 'failed') AND j.flow_key IS NULL
          AND j.run_at <= now()
          AND (%(tasks)s::text[] IS NULL
               OR j.task = ANY (%(tasks)s::text[])
                  AND (j.task_version IS NULL
                       OR j.task || '@' || j.task_version = ANY (%(tasks)s::text[])))
        ORDER BY j.priority, j.run_at, j.id
        LIMIT %(scan)s
    ) c
), cand AS MATERIALIZED (
    SELECT * FROM keyed UNION ALL SELECT * FROM queued
), needed AS MATERIALIZED (
    SELECT DISTINCT s.scope FROM cand c
    LEFT JOIN {schema}.flow_limits t ON t.scope = 'task:' || c.task
    CROSS JOIN LATERAL (VALUES
        (c.flow_key),
        (CASE WHEN c.flow_key LIKE 'key:%%'
                   AND (t.max_running IS NOT NULL OR t.rate_n IS NOT NULL)
              THEN 'task:' || c.task END),
        (CASE WHEN c.queue IN (SELECT name FROM limited_queues) THEN 'queue:' || c.queue END)
    ) s(scope)
    WHERE s.scope IS NOT NULL
), locked AS MATERIALIZED (
    SELECT scope FROM needed
    WHERE pg_try_advisory_xact_lock(hashtextextended(%(lock_space)s || scope, 0))
)
SELECT (SELECT array_agg(id ORDER BY priority, run_at, id) FROM cand) AS ids,
       (SELECT array_agg(scope) FROM locked) AS locked,
       (SELECT count(*) FROM needed)::integer AS needed,
       -- The locks above are held until step 2 commits. A worker cut off in between (a
       -- partition, a frozen host) would keep them, and its scopes unclaimable everywhere, until
       -- the server's TCP gives up (15 minutes or more): the server ends an idle transaction
       -- here after 10 s instead (step 2 follows within milliseconds). Local to the transaction.
       set_config('idle_in_transaction_session_timeout', '10000', true) AS idle_limit;

-- name: claim_flow_jobs
-- Step 2, in the same transaction as step 1, on a snapshot taken after its locks: lease the
-- candidates %(ids)s that fit in every scope they need, all of which must be in %(locked)s.
-- Room in a scope = its limit - its running jobs now (a row is running from its claim to its
-- end, whatever ends it), and, for a rate, n - its starts in the last period (the start log in
-- flow_limits, newest first, at most n entries: a sliding window, so no burst of n at each
-- window edge as a fixed window allows). Candidates are ranked per scope; a candidate turned away
-- by one scope still uses its rank in the others, so a claim may take fewer than fit, never
-- more. The start log of every rate-limited scope gets this claim's starts.
-- Rows: the claimed jobs (as claim_jobs returns them), and one row whose job columns are NULL
-- carrying how many candidates were held back and, when a rate held one back, in how many
-- seconds its window next has room.
WITH limited_queues AS MATERIALIZED (
    SELECT name, max_running, rate_n, rate_period FROM {schema}.queues
    WHERE max_running IS NOT NULL OR rate_n IS NOT NULL
), cand AS MATERIALIZED (
    SELECT j.id, j.task, j.queue, j.flow_key, j.priority, j.run_at FROM {schema}.jobs j
    WHERE j.id = ANY (%(ids)s::bigint[]) AND j.status IN ('queued', 'failed')
      AND j.run_at <= now()
), need AS MATERIALIZED (
    SELECT c.id, c.priority, c.run_at, x.scope, x.max_running, x.rate_n, x.rate_period
    FROM cand c
    LEFT JOIN {schema}.flow_limits t ON t.scope = 'task:' || c.task
    LEFT JOIN limited_queues q ON q.name = c.queue
    CROSS JOIN LATERAL (VALUES
        (c.flow_key,
         CASE WHEN c.flow_key LIKE 'key:%%' THEN t.key_max_running ELSE t.max_running END,
         CASE WHEN c.flow_key LIKE 'key:%%' THEN t.key_rate_n ELSE t.rate_n END,
         CASE WHEN c.flow_key LIKE 'key:%%' THEN t.key_rate_period ELSE t.rate_period END),
        (CASE WHEN c.flow_key LIKE 'key:%%'
                   AND (t.max_running IS NOT NULL OR t.rate_n IS NOT NULL)
              THEN 'task:' || c.task END,
         t.max_running, t.rate_n, t.rate_period),
        ('queue:' || q.name, q.max_running, q.rate_n, q.rate_period)
    ) x(scope, max_running, rate_n, rate_period)
    WHERE x.scope IS NOT NULL
), running AS MATERIALIZED (
    -- A job is in its flow_key's scope, its task's and its queue's (flow_key task:T is its
    -- task's: counted once).
    SELECT s.scope, count(*) AS n FROM {schema}.jobs j
    CROSS JOIN LATERAL (VALUES
        (CASE WHEN j.flow_key LIKE 'key:%%' THEN j.flow_key END),
        ('task:' || j.task),
        ('queue:' || j.queue)
    ) s(scope)
    WHERE j.status = 'running' AND s.scope = ANY (%(locked)s::text[])
    GROUP BY s.scope
), log AS MATERIALIZED (
    SELECT scope, starts FROM {schema}.flow_limits WHERE scope = ANY (%(locked)s::text[])
), ranked AS (
    SELECT n.id, n.priority, n.run_at, n.scope = ANY (%(locked)s::text[])
           AND (n.max_running IS NULL
                OR row_number() OVER w <= n.max_running - coalesce(r.n, 0))
           AND (n.rate_n IS NULL
                OR row_number() OVER w <= n.rate_n - (SELECT count(*) FROM unnest(l.starts) s
                                                     WHERE s > now() - n.rate_period)) AS fits
    FROM need n
    LEFT JOIN running r ON r.scope = n.scope
    LEFT JOIN log l ON l.scope = n.scope
    WINDOW w AS (PARTITION BY n.scope ORDER BY n.priority, n.run_at, n.id)
), admitted AS (
    SELECT id, priority, run_at FROM ranked
    GROUP BY id, priority, run_at
    HAVING bool_and(fits)
), picked AS MATERIALIZED (
    SELECT j.id FROM {schema}.jobs j JOIN admitted a ON a.id = j.id
    WHERE j.status IN ('queued', 'failed')
    ORDER BY a.priority, a.run_at, a.id
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), claimed AS (
    /* include: lease_picked */
), started AS (
    SELECT n.scope, max(n.rate_n) AS rate_n, count(*) AS n
    FROM claimed c JOIN need n ON n.id = c.id
    WHERE n.rate_n IS NOT NULL
    GROUP BY n.scope
), logged AS (
    INSERT INTO {schema}.flow_limits AS f (scope, starts, updated_at)
    SELECT s.scope,
           ARRAY(SELECT t FROM unnest(coalesce(l.starts, '{{}}') || array_fill(now(), ARRAY[s.n]::integer[])) t
                 ORDER BY t DESC LIMIT s.rate_n),
           now()
    FROM started s LEFT JOIN log l ON l.scope = s.scope
    ON CONFLICT (scope) DO UPDATE SET starts = EXCLUDED.starts, updated_at = now()
    RETURNING f.scope, f.starts
), reopens AS (
    -- When each rate-limited scope next has room: its n-th newest start leaves the window.
    SELECT min((coalesce(g.starts, l.starts))[n.rate_n] + n.rate_period) AS at
    FROM (SELECT DISTINCT scope, rate_n, rate_period FROM need WHERE rate_n IS NOT NULL) n
    LEFT JOIN logged g ON g.scope = n.scope
    LEFT JOIN log l ON l.scope = n.scope
    WHERE cardinality(coalesce(g.starts, l.starts)) >= n.rate_n
)
SELECT * FROM claimed FULL JOIN (
    SELECT (SELECT count(*) FROM cand)::integer - (SELECT count(*) FROM claimed)::integer AS held,
           (SELECT greatest(extract(epoch FROM at - now()), 0)::float8 FROM reopens) AS open_in
) summary ON false;

-- name: prune_flow_logs
-- Start logs of keys idle for longer than their task's window: no start in them can hold a job
-- back any more. A task's or queue's row stays.
DELETE FROM {schema}.flow_limits f
WHERE f.scope LIKE 'key:%%'
  AND f.updated_at < now() - coalesce(
      (SELECT t.key_rate_period FROM {schema}.flow_limits t
       WHERE t.scope = 'task:' || split_part(substr(f.scope, 5), '|', 1)),
      interval '0');
