-- Every statement cronbase sends, for the schema "cronbase", as PostgreSQL receives it: fragments
-- put in place, variants rendered (src/cronbase/db/queries.py). The sources, with their comments,
-- are src/cronbase/db/sql/*.sql; this file is made from them:
--   python -m cronbase.operations.statements --write docs/statements.sql
-- and tests/unit/test_statements.py fails when it is stale. %(name)s is a parameter.

-- name: advance_schedule
UPDATE "cronbase".schedules
SET last_fired_at = COALESCE(%(last_fired_at)s, last_fired_at),
    next_fire_at = %(next_fire_at)s,
    updated_at = now()
WHERE key = %(key)s;

-- name: age_priorities
WITH aging AS MATERIALIZED (
    SELECT name, aging_every, aging_step FROM "cronbase".queues
    WHERE aging_every IS NOT NULL
      AND (aged_at IS NULL
           OR aged_at <= now() - least(aging_every / 4, interval '30 seconds'))
    FOR UPDATE SKIP LOCKED
), stamped AS (
    UPDATE "cronbase".queues q SET aged_at = now() FROM aging a WHERE q.name = a.name
), aged AS MATERIALIZED (
    SELECT c.id, c.priority
    FROM aging a
    CROSS JOIN LATERAL (
        SELECT j.id, t.priority
        FROM "cronbase".jobs j
        CROSS JOIN LATERAL (
            SELECT greatest(0, coalesce(j.base_priority, j.priority)::bigint - a.aging_step
                               * floor(extract(epoch FROM now() - j.run_at)
                                       / extract(epoch FROM a.aging_every))::bigint)::smallint
        ) t(priority)
        WHERE j.queue = a.name AND j.status IN ('queued', 'failed') AND j.priority > 0
          AND j.run_at <= now() - a.aging_every AND t.priority < j.priority
        ORDER BY j.run_at
        LIMIT %(limit)s
        FOR UPDATE OF j SKIP LOCKED
    ) c
)
UPDATE "cronbase".jobs j
SET base_priority = coalesce(j.base_priority, j.priority), priority = g.priority,
    updated_at = now()
FROM aged g
WHERE j.id = g.id AND EXISTS (SELECT FROM aged)
RETURNING j.id, j.queue, j.priority;

-- name: cancel_job
WITH target AS (
    SELECT id, status, attempts, locked_by, started_at FROM "cronbase".jobs
    WHERE id = %(id)s
    FOR UPDATE
), gone AS (
    DELETE FROM "cronbase".jobs j USING target t
    WHERE j.id = t.id AND t.status IN ('pending', 'queued', 'failed', 'running')
    RETURNING j.*
), cancelled AS (
    INSERT INTO "cronbase".jobs_history (id, task, queue, payload, status, priority, run_at, attempts, max_attempts, lease, locked_by, locked_until, lease_token, idempotency_key, dedupe_key, progress, stage, last_error, error_type, started_at, created_at, updated_at, finished_at, metadata, flow_key, result, snoozes, wait_notify, unique_for_key, parents_left, has_dependents, on_parent_failure, receives, workflow_id, waiting_for, task_version, base_priority) SELECT gone.id, gone.task, gone.queue, gone.payload, 'cancelled', gone.priority, gone.run_at, gone.attempts, gone.max_attempts, gone.lease, NULL, NULL, NULL, gone.idempotency_key, gone.dedupe_key, gone.progress, gone.stage, gone.last_error, gone.error_type, gone.started_at, gone.created_at, now(), now(), gone.metadata, gone.flow_key, gone.result, gone.snoozes, gone.wait_notify, gone.unique_for_key, gone.parents_left, gone.has_dependents, gone.on_parent_failure, gone.receives, gone.workflow_id, gone.waiting_for, gone.task_version, gone.base_priority FROM gone
    RETURNING *
), history AS (
    INSERT INTO "cronbase".job_attempts
        (job_id, attempt, worker, started_at, outcome, error, error_type)
    SELECT t.id, t.attempts, t.locked_by, t.started_at, 'cancelled', 'cancelled while running',
           'Cancelled'
    FROM target t JOIN cancelled c ON c.id = t.id
    WHERE t.status = 'running'
)
SELECT c.* FROM cancelled c;

-- name: claim_fair_jobs
WITH RECURSIVE done AS (
    DELETE FROM "cronbase".jobs j
    USING unnest(%(done_ids)s::bigint[], %(done_tokens)s::uuid[], %(done_results)b::text[])
        AS o(id, token, result)
    WHERE j.id = o.id AND j.lease_token = o.token
    RETURNING j.*, o.result AS new_result
), finished AS (
    INSERT INTO "cronbase".jobs_history (id, task, queue, payload, status, priority, run_at, attempts, max_attempts, lease, locked_by, locked_until, lease_token, idempotency_key, dedupe_key, progress, stage, last_error, error_type, started_at, created_at, updated_at, finished_at, metadata, flow_key, result, snoozes, wait_notify, unique_for_key, parents_left, has_dependents, on_parent_failure, receives, workflow_id, waiting_for, task_version, base_priority) SELECT done.id, done.task, done.queue, done.payload, 'succeeded', done.priority, done.run_at, done.attempts, done.max_attempts, done.lease, done.locked_by, NULL, NULL, done.idempotency_key, done.dedupe_key, 100, done.stage, done.last_error, done.error_type, done.started_at, done.created_at, now(), now(), done.metadata, done.flow_key, done.new_result::jsonb, done.snoozes, done.wait_notify, done.unique_for_key, done.parents_left, done.has_dependents, done.on_parent_failure, done.receives, done.workflow_id, done.waiting_for, done.task_version, done.base_priority FROM done
    RETURNING id
), found(k, n) AS (
    SELECT (SELECT min(flow_key) FROM "cronbase".jobs
            WHERE status IN ('queued', 'failed')
              AND flow_key > greatest(%(after)s::text, 'fair:') AND flow_key < 'fair;'), 1
    UNION ALL
    SELECT (SELECT min(flow_key) FROM "cronbase".jobs
            WHERE status IN ('queued', 'failed') AND flow_key > f.k AND flow_key < 'fair;'),
           f.n + 1
    FROM found f WHERE f.k IS NOT NULL AND f.n < %(scan)s
), clock AS MATERIALIZED (
    SELECT coalesce((SELECT min(pass) FROM "cronbase".fair_keys WHERE NOT is_idle),
                    (SELECT max(pass) FROM "cronbase".fair_keys), 0) AS v
), candidates AS MATERIALIZED (
    (SELECT x.scope, x.weight, x.pass, false AS fresh FROM "cronbase".fair_keys x
     WHERE NOT x.is_idle 
     ORDER BY x.next_pass
     LIMIT %(probe)s)
    UNION ALL
    SELECT x.scope, coalesce(k.weight, 1), greatest(k.pass, c.v), true
    FROM (SELECT f.k AS scope FROM found f WHERE f.k IS NOT NULL) x
    CROSS JOIN clock c LEFT JOIN "cronbase".fair_keys k ON k.scope = x.scope
    WHERE k.is_idle IS NOT FALSE 
), probed AS MATERIALIZED (
    SELECT k.*, (SELECT j.id FROM "cronbase".jobs j
WHERE j.flow_key = k.scope AND j.status IN ('queued', 'failed') AND j.run_at <= now()
  AND (%(tasks)s::text[] IS NULL OR (j.task = ANY (%(tasks)s::text[])
                                      AND (j.task_version IS NULL
                                           OR j.task || '@' || j.task_version
                                              = ANY (%(tasks)s::text[]))))
  AND NOT EXISTS (SELECT FROM "cronbase".queues q WHERE q.name = j.queue AND q.is_paused)
ORDER BY j.priority, j.run_at, j.id LIMIT 1) IS NOT NULL AS is_due
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
        SELECT j.id FROM "cronbase".jobs j
WHERE j.flow_key = k.scope AND j.status IN ('queued', 'failed') AND j.run_at <= now()
  AND (%(tasks)s::text[] IS NULL OR (j.task = ANY (%(tasks)s::text[])
                                      AND (j.task_version IS NULL
                                           OR j.task || '@' || j.task_version
                                              = ANY (%(tasks)s::text[]))))
  AND NOT EXISTS (SELECT FROM "cronbase".queues q WHERE q.name = j.queue AND q.is_paused)
ORDER BY j.priority, j.run_at, j.id
        LIMIT k.n
        FOR UPDATE OF j SKIP LOCKED
    ) p
    LIMIT %(limit)s
), claimed AS (
    UPDATE "cronbase".jobs j
SET status = 'running', attempts = j.attempts + 1, locked_by = %(worker)s,
    locked_until = now() + j.lease, lease_token = gen_random_uuid(),
    started_at = now(), updated_at = now()
FROM picked
WHERE j.id = picked.id
RETURNING j.id, j.task, j.queue, j.payload::text AS payload, j.priority, j.attempts,
          j.max_attempts, j.lease_token, extract(epoch FROM j.lease)::float8 AS lease,
          j.metadata::text AS metadata, j.flow_key, j.task_version
), counts AS MATERIALIZED (
    SELECT flow_key AS scope, count(*) AS n FROM claimed GROUP BY flow_key
), advanced AS (
    INSERT INTO "cronbase".fair_keys AS f (scope, weight, pass, claimed, is_idle, updated_at)
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

-- name: claim_fair_jobs_in_queues
WITH RECURSIVE done AS (
    DELETE FROM "cronbase".jobs j
    USING unnest(%(done_ids)s::bigint[], %(done_tokens)s::uuid[], %(done_results)b::text[])
        AS o(id, token, result)
    WHERE j.id = o.id AND j.lease_token = o.token
    RETURNING j.*, o.result AS new_result
), finished AS (
    INSERT INTO "cronbase".jobs_history (id, task, queue, payload, status, priority, run_at, attempts, max_attempts, lease, locked_by, locked_until, lease_token, idempotency_key, dedupe_key, progress, stage, last_error, error_type, started_at, created_at, updated_at, finished_at, metadata, flow_key, result, snoozes, wait_notify, unique_for_key, parents_left, has_dependents, on_parent_failure, receives, workflow_id, waiting_for, task_version, base_priority) SELECT done.id, done.task, done.queue, done.payload, 'succeeded', done.priority, done.run_at, done.attempts, done.max_attempts, done.lease, done.locked_by, NULL, NULL, done.idempotency_key, done.dedupe_key, 100, done.stage, done.last_error, done.error_type, done.started_at, done.created_at, now(), now(), done.metadata, done.flow_key, done.new_result::jsonb, done.snoozes, done.wait_notify, done.unique_for_key, done.parents_left, done.has_dependents, done.on_parent_failure, done.receives, done.workflow_id, done.waiting_for, done.task_version, done.base_priority FROM done
    RETURNING id
), found(k, n) AS (
    SELECT (SELECT min(flow_key) FROM "cronbase".jobs
            WHERE status IN ('queued', 'failed')
              AND flow_key > greatest(%(after)s::text, 'fair:') AND flow_key < 'fair;'), 1
    UNION ALL
    SELECT (SELECT min(flow_key) FROM "cronbase".jobs
            WHERE status IN ('queued', 'failed') AND flow_key > f.k AND flow_key < 'fair;'),
           f.n + 1
    FROM found f WHERE f.k IS NOT NULL AND f.n < %(scan)s
), clock AS MATERIALIZED (
    SELECT coalesce((SELECT min(pass) FROM "cronbase".fair_keys WHERE NOT is_idle),
                    (SELECT max(pass) FROM "cronbase".fair_keys), 0) AS v
), candidates AS MATERIALIZED (
    (SELECT x.scope, x.weight, x.pass, false AS fresh FROM "cronbase".fair_keys x
     WHERE NOT x.is_idle AND split_part(substr(x.scope, 6), '|', 1) = ANY (%(queues)s::text[])
     ORDER BY x.next_pass
     LIMIT %(probe)s)
    UNION ALL
    SELECT x.scope, coalesce(k.weight, 1), greatest(k.pass, c.v), true
    FROM (SELECT f.k AS scope FROM found f WHERE f.k IS NOT NULL) x
    CROSS JOIN clock c LEFT JOIN "cronbase".fair_keys k ON k.scope = x.scope
    WHERE k.is_idle IS NOT FALSE AND split_part(substr(x.scope, 6), '|', 1) = ANY (%(queues)s::text[])
), probed AS MATERIALIZED (
    SELECT k.*, (SELECT j.id FROM "cronbase".jobs j
WHERE j.flow_key = k.scope AND j.status IN ('queued', 'failed') AND j.run_at <= now()
  AND (%(tasks)s::text[] IS NULL OR (j.task = ANY (%(tasks)s::text[])
                                      AND (j.task_version IS NULL
                                           OR j.task || '@' || j.task_version
                                              = ANY (%(tasks)s::text[]))))
  AND NOT EXISTS (SELECT FROM "cronbase".queues q WHERE q.name = j.queue AND q.is_paused)
ORDER BY j.priority, j.run_at, j.id LIMIT 1) IS NOT NULL AS is_due
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
        SELECT j.id FROM "cronbase".jobs j
WHERE j.flow_key = k.scope AND j.status IN ('queued', 'failed') AND j.run_at <= now()
  AND (%(tasks)s::text[] IS NULL OR (j.task = ANY (%(tasks)s::text[])
                                      AND (j.task_version IS NULL
                                           OR j.task || '@' || j.task_version
                                              = ANY (%(tasks)s::text[]))))
  AND NOT EXISTS (SELECT FROM "cronbase".queues q WHERE q.name = j.queue AND q.is_paused)
ORDER BY j.priority, j.run_at, j.id
        LIMIT k.n
        FOR UPDATE OF j SKIP LOCKED
    ) p
    LIMIT %(limit)s
), claimed AS (
    UPDATE "cronbase".jobs j
SET status = 'running', attempts = j.attempts + 1, locked_by = %(worker)s,
    locked_until = now() + j.lease, lease_token = gen_random_uuid(),
    started_at = now(), updated_at = now()
FROM picked
WHERE j.id = picked.id
RETURNING j.id, j.task, j.queue, j.payload::text AS payload, j.priority, j.attempts,
          j.max_attempts, j.lease_token, extract(epoch FROM j.lease)::float8 AS lease,
          j.metadata::text AS metadata, j.flow_key, j.task_version
), counts AS MATERIALIZED (
    SELECT flow_key AS scope, count(*) AS n FROM claimed GROUP BY flow_key
), advanced AS (
    INSERT INTO "cronbase".fair_keys AS f (scope, weight, pass, claimed, is_idle, updated_at)
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

-- name: claim_flow_candidates
WITH RECURSIVE ahead(k) AS (
    SELECT min(flow_key) FROM "cronbase".jobs
    WHERE status IN ('queued', 'failed') AND flow_key > greatest(%(after)s, 'fair;')
    UNION ALL
    SELECT (SELECT min(flow_key) FROM "cronbase".jobs
            WHERE status IN ('queued', 'failed') AND flow_key IS NOT NULL AND flow_key > a.k)
    FROM ahead a WHERE a.k IS NOT NULL
), behind(k) AS (
    SELECT min(flow_key) FROM "cronbase".jobs
    WHERE status IN ('queued', 'failed') AND flow_key > 'fair;'
    UNION ALL
    SELECT (SELECT min(flow_key) FROM "cronbase".jobs
            WHERE status IN ('queued', 'failed') AND flow_key IS NOT NULL AND flow_key > b.k)
    FROM behind b WHERE b.k IS NOT NULL AND b.k <= %(after)s
), busy AS MATERIALIZED (
    SELECT flow_key, count(*) AS n FROM "cronbase".jobs
    WHERE status = 'running' AND flow_key IS NOT NULL
    GROUP BY flow_key
), limited_queues AS MATERIALIZED (
    SELECT name FROM "cronbase".queues
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
        SELECT j.id, j.task, j.queue, j.flow_key, j.priority, j.run_at FROM "cronbase".jobs j
        WHERE j.flow_key = s.k AND j.status IN ('queued', 'failed') AND j.run_at <= now()
          AND (%(tasks)s::text[] IS NULL
               OR j.task = ANY (%(tasks)s::text[])
                  AND (j.task_version IS NULL
                       OR j.task || '@' || j.task_version = ANY (%(tasks)s::text[])))
          AND (%(queues)s::text[] IS NULL OR j.queue = ANY (%(queues)s::text[]))
          AND NOT EXISTS (SELECT FROM "cronbase".queues q WHERE q.name = j.queue AND q.is_paused)
        ORDER BY j.priority, j.run_at, j.id
        LIMIT greatest(%(per_scope)s - coalesce(b.n, 0), 0)
    ) c
    LIMIT %(scan)s
), queued AS MATERIALIZED (
    SELECT c.* FROM limited_queues lq CROSS JOIN LATERAL (
        SELECT j.id, j.task, j.queue, j.flow_key, j.priority, j.run_at FROM "cronbase".jobs j
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
    LEFT JOIN "cronbase".flow_limits t ON t.scope = 'task:' || c.task
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
       set_config('idle_in_transaction_session_timeout', '10000', true) AS idle_limit;

-- name: claim_flow_jobs
WITH limited_queues AS MATERIALIZED (
    SELECT name, max_running, rate_n, rate_period FROM "cronbase".queues
    WHERE max_running IS NOT NULL OR rate_n IS NOT NULL
), cand AS MATERIALIZED (
    SELECT j.id, j.task, j.queue, j.flow_key, j.priority, j.run_at FROM "cronbase".jobs j
    WHERE j.id = ANY (%(ids)s::bigint[]) AND j.status IN ('queued', 'failed')
      AND j.run_at <= now()
), need AS MATERIALIZED (
    SELECT c.id, c.priority, c.run_at, x.scope, x.max_running, x.rate_n, x.rate_period
    FROM cand c
    LEFT JOIN "cronbase".flow_limits t ON t.scope = 'task:' || c.task
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
    SELECT s.scope, count(*) AS n FROM "cronbase".jobs j
    CROSS JOIN LATERAL (VALUES
        (CASE WHEN j.flow_key LIKE 'key:%%' THEN j.flow_key END),
        ('task:' || j.task),
        ('queue:' || j.queue)
    ) s(scope)
    WHERE j.status = 'running' AND s.scope = ANY (%(locked)s::text[])
    GROUP BY s.scope
), log AS MATERIALIZED (
    SELECT scope, starts FROM "cronbase".flow_limits WHERE scope = ANY (%(locked)s::text[])
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
    SELECT j.id FROM "cronbase".jobs j JOIN admitted a ON a.id = j.id
    WHERE j.status IN ('queued', 'failed')
    ORDER BY a.priority, a.run_at, a.id
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), claimed AS (
    UPDATE "cronbase".jobs j
SET status = 'running', attempts = j.attempts + 1, locked_by = %(worker)s,
    locked_until = now() + j.lease, lease_token = gen_random_uuid(),
    started_at = now(), updated_at = now()
FROM picked
WHERE j.id = picked.id
RETURNING j.id, j.task, j.queue, j.payload::text AS payload, j.priority, j.attempts,
          j.max_attempts, j.lease_token, extract(epoch FROM j.lease)::float8 AS lease,
          j.metadata::text AS metadata, j.flow_key, j.task_version
), started AS (
    SELECT n.scope, max(n.rate_n) AS rate_n, count(*) AS n
    FROM claimed c JOIN need n ON n.id = c.id
    WHERE n.rate_n IS NOT NULL
    GROUP BY n.scope
), logged AS (
    INSERT INTO "cronbase".flow_limits AS f (scope, starts, updated_at)
    SELECT s.scope,
           ARRAY(SELECT t FROM unnest(coalesce(l.starts, '{}') || array_fill(now(), ARRAY[s.n]::integer[])) t
                 ORDER BY t DESC LIMIT s.rate_n),
           now()
    FROM started s LEFT JOIN log l ON l.scope = s.scope
    ON CONFLICT (scope) DO UPDATE SET starts = EXCLUDED.starts, updated_at = now()
    RETURNING f.scope, f.starts
), reopens AS (
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

-- name: claim_jobs
WITH done AS (
    DELETE FROM "cronbase".jobs j
    USING unnest(%(done_ids)s::bigint[], %(done_tokens)s::uuid[], %(done_results)b::text[])
        AS o(id, token, result)
    WHERE j.id = o.id AND j.lease_token = o.token
    RETURNING j.*, o.result AS new_result
), finished AS (
    INSERT INTO "cronbase".jobs_history (id, task, queue, payload, status, priority, run_at, attempts, max_attempts, lease, locked_by, locked_until, lease_token, idempotency_key, dedupe_key, progress, stage, last_error, error_type, started_at, created_at, updated_at, finished_at, metadata, flow_key, result, snoozes, wait_notify, unique_for_key, parents_left, has_dependents, on_parent_failure, receives, workflow_id, waiting_for, task_version, base_priority) SELECT done.id, done.task, done.queue, done.payload, 'succeeded', done.priority, done.run_at, done.attempts, done.max_attempts, done.lease, done.locked_by, NULL, NULL, done.idempotency_key, done.dedupe_key, 100, done.stage, done.last_error, done.error_type, done.started_at, done.created_at, now(), now(), done.metadata, done.flow_key, done.new_result::jsonb, done.snoozes, done.wait_notify, done.unique_for_key, done.parents_left, done.has_dependents, done.on_parent_failure, done.receives, done.workflow_id, done.waiting_for, done.task_version, done.base_priority FROM done
    RETURNING id
)
SELECT c.*, CASE WHEN c.id IS NULL THEN (SELECT array_agg(f.id) FROM finished f) END AS written
FROM "cronbase".claim_tickets(%(worker)s, %(limit)s, %(queues)s::text[], %(tasks)s::text[]) c;

-- name: clear_tickets
WITH lock AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(%(key)s) AS held
), cursors AS MATERIALIZED (
    SELECT l.id AS lane, k.to_seq
    FROM lock, "cronbase".lanes l
    CROSS JOIN LATERAL (
        SELECT max(lc.to_seq) AS to_seq FROM "cronbase".lane_claims lc WHERE lc.lane = l.id
    ) k
    WHERE lock.held AND k.to_seq IS NOT NULL
), gone AS (
    DELETE FROM "cronbase".tickets t
    USING cursors c
    WHERE t.lane = c.lane AND t.seq <= c.to_seq AND t.seq > %(since)s
    RETURNING 1
), old_cursors AS (
    DELETE FROM "cronbase".lane_claims lc
    USING cursors c
    WHERE lc.lane = c.lane AND lc.to_seq < c.to_seq AND lc.to_seq > %(since)s
), last_tick AS MATERIALIZED (
    SELECT max(id) - 100 AS below FROM "cronbase".ticks WHERE (SELECT held FROM lock)
), old_ticks AS (
    DELETE FROM "cronbase".ticks
    WHERE id > %(ticks_since)s AND id < (SELECT below FROM last_tick)
)
SELECT (SELECT count(*) FROM gone) AS deleted,
       (SELECT min(to_seq) FROM cursors) AS cleared_to,
       (SELECT below FROM last_tick) AS ticks_cleared_to;

-- name: complete_jobs
WITH done AS (
    DELETE FROM "cronbase".jobs j
    USING unnest(%(done_ids)s::bigint[], %(done_tokens)s::uuid[], %(done_results)b::text[])
        AS o(id, token, result)
    WHERE j.id = o.id AND j.lease_token = o.token
    RETURNING j.*, o.result AS new_result
), finished AS (
    INSERT INTO "cronbase".jobs_history (id, task, queue, payload, status, priority, run_at, attempts, max_attempts, lease, locked_by, locked_until, lease_token, idempotency_key, dedupe_key, progress, stage, last_error, error_type, started_at, created_at, updated_at, finished_at, metadata, flow_key, result, snoozes, wait_notify, unique_for_key, parents_left, has_dependents, on_parent_failure, receives, workflow_id, waiting_for, task_version, base_priority) SELECT done.id, done.task, done.queue, done.payload, 'succeeded', done.priority, done.run_at, done.attempts, done.max_attempts, done.lease, done.locked_by, NULL, NULL, done.idempotency_key, done.dedupe_key, 100, done.stage, done.last_error, done.error_type, done.started_at, done.created_at, now(), now(), done.metadata, done.flow_key, done.new_result::jsonb, done.snoozes, done.wait_notify, done.unique_for_key, done.parents_left, done.has_dependents, done.on_parent_failure, done.receives, done.workflow_id, done.waiting_for, done.task_version, done.base_priority FROM done
    RETURNING id
)
SELECT array_agg(id) AS written FROM finished;

-- name: connection_room
SELECT current_setting('max_connections')::int AS max_connections,
       current_setting('superuser_reserved_connections')::int
         + COALESCE(current_setting('reserved_connections', true)::int, 0) AS reserved,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int AS in_use;

-- name: count_error_scan_by_task
SELECT task, count(*) AS count
FROM (SELECT id, task, COALESCE(error_type, '') AS error_type,
       CASE WHEN left(last_error, 8) = E'\x24sealed:'
            THEN '(encrypted with key ' || split_part(last_error, ':', 2) || ')'
            ELSE regexp_replace(
                regexp_replace(
                    left(btrim(split_part(COALESCE(last_error, ''), E'\n', 1), E' \t\r'), 200),
                    '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<id>',
                    'gi'),
                '[0-9]+', '<n>', 'g') END AS message,
       COALESCE(finished_at, updated_at) AS at
FROM "cronbase".jobs_all
WHERE status = %(status)s::text
ORDER BY id DESC
LIMIT %(scan)s) newest
GROUP BY task
ORDER BY task;

-- name: count_jobs_by_status
SELECT queue, status, count(*) AS count FROM "cronbase".jobs_all GROUP BY queue, status
ORDER BY queue, status;

-- name: count_prunable
SELECT status, count(*) AS n FROM "cronbase".jobs_all
WHERE status = ANY (%(statuses)s::text[]) AND finished_at < now() - %(older_than)s::interval
GROUP BY status
ORDER BY status;

-- name: count_search_jobs
SELECT count(*) AS count FROM (
    SELECT 1 FROM "cronbase".jobs_all
    WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
  AND (%(search)s::text IS NULL
       OR id::text = %(search)s::text
       OR idempotency_key = %(search)s::text OR dedupe_key = %(search)s::text
       OR idempotency_key LIKE %(prefix)s OR dedupe_key LIKE %(prefix)s
       OR %(contains)s::text IS NOT NULL AND id IN (
           SELECT n.id
           FROM (SELECT s.id, s.payload, s.last_error FROM "cronbase".jobs_all s
                 WHERE (%(status)s::text IS NULL OR s.status = %(status)s::text)
                   AND (%(queue)s::text IS NULL OR s.queue = %(queue)s::text)
                   AND (%(task)s::text IS NULL OR s.task = %(task)s::text)
                 ORDER BY s.id DESC
                 LIMIT %(scan)s) n
           WHERE n.payload::text ILIKE %(contains)s OR n.last_error ILIKE %(contains)s))
    LIMIT %(limit)s
) matching;

-- name: create_history_days
WITH lock AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(%(key)s) AS got
)
SELECT got AS locked,
       CASE WHEN got THEN "cronbase".create_history_days(
           COALESCE(%(first)s::date, (now() AT TIME ZONE 'UTC')::date - 1),
           COALESCE(%(last)s::date, (now() AT TIME ZONE 'UTC')::date + 7))
       END AS made
FROM lock;

-- name: database_now
SELECT now();

-- name: delete_finished_jobs
WITH done AS (
    DELETE FROM "cronbase".jobs_history WHERE id = ANY (%(ids)s::bigint[]) RETURNING id
), live AS (
    DELETE FROM "cronbase".jobs
    WHERE id = ANY (%(ids)s::bigint[]) AND status IN ('succeeded', 'dead', 'cancelled')
    RETURNING id
)
SELECT id FROM done UNION ALL SELECT id FROM live;

-- name: delete_gone_workers
DELETE FROM "cronbase".workers w
WHERE w.last_seen_at < now() - greatest(%(older_than)s::interval, %(live_within)s::interval)
AND NOT EXISTS (SELECT FROM "cronbase".jobs j WHERE j.status = 'running' AND j.locked_by = w.id)
RETURNING w.id;

-- name: drop_history_days
WITH lock AS MATERIALIZED (
    SELECT CASE WHEN %(wait)s::boolean THEN (SELECT true FROM pg_advisory_xact_lock(%(key)s))
                ELSE pg_try_advisory_xact_lock(%(key)s) END AS got
)
SELECT got AS locked,
       CASE WHEN got THEN "cronbase".drop_history_days(%(status)s::text,
                                                     now() - %(older_than)s::interval)
       END AS dropped
FROM lock;

-- name: emit_event
WITH ins AS (
    INSERT INTO "cronbase".events (key, payload) VALUES (%(key)s, %(payload)s::jsonb)
    ON CONFLICT (key) DO NOTHING
    RETURNING key
), woken AS (
    UPDATE "cronbase".jobs j
    SET run_at = now(), waiting_for = NULL, updated_at = now()
    WHERE j.waiting_for = %(key)s AND j.status = 'queued'
    RETURNING j.id, j.queue
), notified AS (
    SELECT pg_notify(%(channel)s, q.queue) FROM (SELECT DISTINCT queue FROM woken) q
)
SELECT (SELECT count(*) FROM ins) AS emitted, (SELECT count(*) FROM woken) AS woken,
       (SELECT count(*) FROM notified) AS notified;

-- name: enter_effect
WITH ins AS (
    INSERT INTO "cronbase".effects (key, status, owner, job_id, attempt)
    VALUES (%(key)s, 'processing', %(owner)s, %(job_id)s, %(attempt)s)
    ON CONFLICT (key) DO NOTHING
    RETURNING *
)
SELECT true AS created, false AS stale, ins.* FROM ins
UNION ALL
SELECT false, e.status = 'processing' AND e.started_at < now() - %(stale_after)s::interval, e.*
FROM "cronbase".effects e
WHERE NOT EXISTS (SELECT FROM ins) AND e.key = %(key)s;

-- name: error_group_ids
SELECT id
FROM (SELECT id, task, COALESCE(error_type, '') AS error_type,
       CASE WHEN left(last_error, 8) = E'\x24sealed:'
            THEN '(encrypted with key ' || split_part(last_error, ':', 2) || ')'
            ELSE regexp_replace(
                regexp_replace(
                    left(btrim(split_part(COALESCE(last_error, ''), E'\n', 1), E' \t\r'), 200),
                    '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<id>',
                    'gi'),
                '[0-9]+', '<n>', 'g') END AS message,
       COALESCE(finished_at, updated_at) AS at
FROM "cronbase".jobs_all
WHERE status = %(status)s::text
ORDER BY id DESC
LIMIT %(scan)s) newest
WHERE task = %(task)s::text AND error_type = %(error_type)s::text AND message = %(message)s::text
ORDER BY id DESC;

-- name: error_groups
SELECT task, error_type, message, count(*) AS count, max(at) AS newest,
       (sum(count(*)) OVER ())::bigint AS scanned
FROM (SELECT id, task, COALESCE(error_type, '') AS error_type,
       CASE WHEN left(last_error, 8) = E'\x24sealed:'
            THEN '(encrypted with key ' || split_part(last_error, ':', 2) || ')'
            ELSE regexp_replace(
                regexp_replace(
                    left(btrim(split_part(COALESCE(last_error, ''), E'\n', 1), E' \t\r'), 200),
                    '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', '<id>',
                    'gi'),
                '[0-9]+', '<n>', 'g') END AS message,
       COALESCE(finished_at, updated_at) AS at
FROM "cronbase".jobs_all
WHERE status = %(status)s::text
ORDER BY id DESC
LIMIT %(scan)s) newest
GROUP BY task, error_type, message
ORDER BY count(*) DESC, max(at) DESC, task, message
LIMIT %(limit)s;

-- name: finish_effect
UPDATE "cronbase".effects
SET status = %(status)s, result = %(result)s::jsonb, error = %(error)s, finished_at = now(),
    updated_at = now()
WHERE key = %(key)s AND owner = %(owner)s AND status = 'processing'
RETURNING *;

-- name: finish_jobs
WITH outcome AS (
    SELECT *, o.outcome = 'snoozed' AS snoozing, o.snooze_cap < 0 AS uncounted,
           CASE WHEN o.snooze_cap < 0 THEN 2147483647 ELSE o.snooze_cap END AS cap
    FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(outcomes)s::text[],
                %(retry_in)s::float8[], %(errors)s::text[], %(error_types)s::text[],
                %(tracebacks)s::text[], %(snooze_caps)s::integer[])
        AS o(id, token, outcome, retry_in, error, error_type, traceback, snooze_cap)
), target AS MATERIALIZED (
    SELECT j.id, o.outcome, o.retry_in, o.error, o.error_type, o.traceback, o.snoozing,
           o.uncounted, o.snooze_cap, j.attempts, j.snoozes,
           CASE WHEN o.outcome = 'cancelled' THEN 'cancelled'
                WHEN o.snoozing AND j.snoozes < o.cap THEN 'queued'
                WHEN o.outcome IN ('dead', 'snoozed') OR j.attempts >= j.max_attempts THEN 'dead'
                ELSE 'failed' END AS status
    FROM "cronbase".jobs j JOIN outcome o ON j.id = o.id AND j.lease_token = o.token
    WHERE o.outcome IN ('failed', 'dead', 'cancelled', 'snoozed')
    FOR NO KEY UPDATE OF j
), retried AS (
    UPDATE "cronbase".jobs j
    SET status = t.status,
        attempts = CASE WHEN t.status = 'queued' THEN t.attempts - 1 ELSE t.attempts END,
        snoozes = CASE WHEN t.status = 'queued' AND NOT t.uncounted
                       THEN t.snoozes + 1 ELSE t.snoozes END,
        run_at = now() + make_interval(secs => t.retry_in),
        finished_at = NULL,
        last_error = CASE WHEN t.status = 'queued' THEN j.last_error ELSE t.error END,
        error_type = CASE WHEN t.status = 'queued' THEN j.error_type ELSE t.error_type END,
        locked_by = NULL, locked_until = NULL, lease_token = NULL, updated_at = now()
    FROM target t
    WHERE j.id = t.id AND t.status IN ('queued', 'failed')
    RETURNING j.id, j.status, j.attempts, j.started_at, j.run_at, j.last_error, j.error_type
), gone AS (
    DELETE FROM "cronbase".jobs j USING target t
    WHERE j.id = t.id AND t.status IN ('dead', 'cancelled')
    RETURNING j.*, t.status AS new_status, t.snoozing AS was_snoozing, t.error AS new_error,
              t.error_type AS new_error_type, t.snooze_cap AS given_cap
), ended AS (
    INSERT INTO "cronbase".jobs_history (id, task, queue, payload, status, priority, run_at, attempts, max_attempts, lease, locked_by, locked_until, lease_token, idempotency_key, dedupe_key, progress, stage, last_error, error_type, started_at, created_at, updated_at, finished_at, metadata, flow_key, result, snoozes, wait_notify, unique_for_key, parents_left, has_dependents, on_parent_failure, receives, workflow_id, waiting_for, task_version, base_priority) SELECT gone.id, gone.task, gone.queue, gone.payload, gone.new_status, gone.priority, gone.run_at, gone.attempts, gone.max_attempts, gone.lease, NULL, NULL, NULL, gone.idempotency_key, gone.dedupe_key, gone.progress, gone.stage, CASE WHEN gone.was_snoozing AND gone.new_status = 'dead'
           THEN format('snoozed %%s times: the task allows %%s (max_snoozes)', gone.snoozes + 1,
                       gone.given_cap)
           ELSE gone.new_error END, CASE WHEN gone.was_snoozing AND gone.new_status = 'dead' THEN 'SnoozeLimit'
           ELSE gone.new_error_type END, gone.started_at, gone.created_at, now(), now(), gone.metadata, gone.flow_key, gone.result, gone.snoozes, gone.wait_notify, gone.unique_for_key, gone.parents_left, gone.has_dependents, gone.on_parent_failure, gone.receives, gone.workflow_id, gone.waiting_for, gone.task_version, gone.base_priority FROM gone
    RETURNING id, status, attempts, started_at, run_at, last_error, error_type
), finished AS (
    SELECT * FROM retried UNION ALL SELECT * FROM ended
), history AS (
    INSERT INTO "cronbase".job_attempts
        (job_id, attempt, worker, started_at, outcome, error, error_type, traceback)
    SELECT f.id,
           CASE WHEN f.status = 'queued' THEN f.attempts + 1 ELSE f.attempts END,
           %(worker)s, f.started_at,
           CASE WHEN f.status = 'queued' THEN 'snoozed' ELSE f.status END,
           CASE WHEN t.snoozing AND f.status = 'dead' THEN f.last_error ELSE t.error END,
           CASE WHEN t.snoozing AND f.status = 'dead' THEN f.error_type ELSE t.error_type END,
           t.traceback
    FROM finished f JOIN target t ON t.id = f.id
)
SELECT id, status, run_at FROM finished;

-- name: forget_effect
DELETE FROM "cronbase".effects WHERE key = %(key)s RETURNING *;

-- name: get_effect
SELECT * FROM "cronbase".effects WHERE key = %(key)s;

-- name: get_event
SELECT key, payload, emitted_at FROM "cronbase".events WHERE key = %(key)s;

-- name: get_job
SELECT * FROM "cronbase".jobs_all WHERE id = %(id)s;

-- name: get_schedule
SELECT * FROM "cronbase".schedules WHERE key = %(key)s;

-- name: heartbeat_jobs
WITH beat AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(progress)s::real[],
                         %(stages)s::text[])
        AS b(id, token, progress, stage)
), renewed AS (
    UPDATE "cronbase".jobs j
    SET locked_until = now() + j.lease,
        progress = COALESCE(b.progress, j.progress),
        stage = COALESCE(b.stage, j.stage),
        updated_at = now()
    FROM beat b
    WHERE j.id = b.id AND j.lease_token = b.token
    RETURNING j.id, j.lease_token
), seen AS (
    UPDATE "cronbase".workers
    SET last_seen_at = now(), overruns = %(overruns)s::jsonb,
        succeeded_jobs = %(succeeded)s, failed_attempts = %(failed)s
    WHERE id = %(worker)s
    RETURNING 1
)
SELECT id, lease_token FROM renewed
UNION ALL
SELECT NULL, NULL WHERE NOT EXISTS (SELECT FROM seen);

-- name: history_span
SELECT (min(day) AT TIME ZONE 'UTC')::date AS first, (max(day) AT TIME ZONE 'UTC')::date AS last
FROM (
    SELECT min(COALESCE(finished_at, updated_at)) AS day FROM "cronbase".jobs
    WHERE status IN ('succeeded', 'dead', 'cancelled')
    UNION ALL
    SELECT max(COALESCE(finished_at, updated_at)) AS day FROM "cronbase".jobs
    WHERE status IN ('succeeded', 'dead', 'cancelled')
    UNION ALL
    SELECT min(finished_at) FROM "cronbase".job_attempts_legacy
    UNION ALL
    SELECT max(finished_at) FROM "cronbase".job_attempts_legacy
    UNION ALL
    SELECT now()
) d;

-- name: holds_lease
SELECT EXISTS (SELECT FROM "cronbase".jobs WHERE id = %(id)s AND lease_token = %(token)s) AS held;

-- name: insert_audit
INSERT INTO "cronbase".audit_log (actor, action, target, detail)
VALUES (%(actor)s, %(action)s, %(target)s, %(detail)s::jsonb)
RETURNING *;

-- name: insert_graph
WITH existing_live AS (
    UPDATE "cronbase".jobs SET has_dependents = true
    WHERE id = ANY (%(after)s::bigint[])
    RETURNING id, task, status
), existing_done AS (
    UPDATE "cronbase".jobs_history SET has_dependents = true
    WHERE id = ANY (%(after)s::bigint[])
    RETURNING id, task, status
), existing AS (
    SELECT * FROM existing_live UNION ALL SELECT * FROM existing_done
), missing AS (
    SELECT array_agg(a.id ORDER BY a.id) AS ids
    FROM unnest(%(after)s::bigint[]) AS a(id)
    WHERE NOT EXISTS (SELECT FROM existing e WHERE e.id = a.id)
), node AS MATERIALIZED (
    SELECT n.ord, nextval(pg_get_serial_sequence('"cronbase".jobs', 'id')) AS id, n.task, n.queue,
           n.payload, n.priority, n.run_at, n.delay, n.max_attempts, n.lease, n.metadata,
           n.flow_key, n.receives, n.on_parent_failure, n.task_version
    FROM unnest(%(tasks)s::text[], %(queues)s::text[], %(payloads)b::text[]::jsonb[],
                %(priorities)s::smallint[], %(run_ats)s::timestamptz[], %(delays)s::interval[],
                %(max_attempts)s::integer[], %(leases)s::interval[], %(metadata)s::text[]::jsonb[],
                %(flow_keys)s::text[], %(receives)s::text[], %(on_parent_failure)s::text[],
                %(task_versions)s::integer[])
        WITH ORDINALITY AS n(task, queue, payload, priority, run_at, delay, max_attempts, lease,
                             metadata, flow_key, receives, on_parent_failure, task_version, ord)
    WHERE (SELECT ids FROM missing) IS NULL
), edge AS MATERIALIZED (
    SELECT e.child_ord, COALESCE(p.id, e.parent_id) AS parent, e.position,
           COALESCE(x.status, 'new') AS parent_status,
           x.id AS failed_id, x.task AS failed_task
    FROM unnest(%(edge_child)s::integer[], %(edge_parent)s::integer[],
                %(edge_parent_id)s::bigint[], %(edge_position)s::integer[])
        AS e(child_ord, parent_ord, parent_id, position)
    LEFT JOIN node p ON p.ord = e.parent_ord
    LEFT JOIN existing x ON x.id = e.parent_id
    WHERE (SELECT ids FROM missing) IS NULL
), parent_node AS (
    SELECT DISTINCT parent FROM edge
), tally AS (
    SELECT n.ord,
           count(*) FILTER (
               WHERE e.parent_status <> 'succeeded'
                 AND NOT (e.parent_status IN ('dead', 'cancelled') AND n.on_parent_failure = 'run')
           ) AS waiting,
           min(format('parent job %%s (%%s) is %%s', e.failed_id, e.failed_task, e.parent_status))
               FILTER (WHERE e.parent_status IN ('dead', 'cancelled')
                         AND n.on_parent_failure = 'cancel') AS failure
    FROM node n LEFT JOIN edge e ON e.child_ord = n.ord
    GROUP BY n.ord
), ins AS (
    INSERT INTO "cronbase".jobs (id, task, queue, payload, priority, run_at, max_attempts, lease,
                               metadata, flow_key, status, parents_left, has_dependents,
                               on_parent_failure, receives, workflow_id, finished_at, last_error,
                               error_type, task_version)
    SELECT n.id, n.task, n.queue, n.payload, n.priority,
           COALESCE(n.run_at, now() + n.delay), n.max_attempts, n.lease, n.metadata, n.flow_key,
           CASE WHEN t.failure IS NOT NULL THEN 'cancelled'
                WHEN t.waiting > 0 THEN 'pending' ELSE 'queued' END,
           CASE WHEN t.failure IS NOT NULL THEN 0 ELSE t.waiting END,
           pn.parent IS NOT NULL,
           n.on_parent_failure, n.receives,
           (SELECT w.id FROM node w WHERE w.ord = %(workflow)s),
           CASE WHEN t.failure IS NOT NULL THEN now() END,
           t.failure,
           CASE WHEN t.failure IS NOT NULL THEN 'ParentFailed' END,
           n.task_version
    FROM node n JOIN tally t ON t.ord = n.ord LEFT JOIN parent_node pn ON pn.parent = n.id
    ORDER BY n.ord
    RETURNING id, status, queue, run_at
), deps AS (
    INSERT INTO "cronbase".job_deps (child, parent, position)
    SELECT c.id, e.parent, e.position FROM edge e JOIN node c ON c.ord = e.child_ord
), notified AS (
    SELECT pg_notify(%(channel)s, q.queue)
    FROM (SELECT DISTINCT queue FROM ins WHERE status = 'queued' AND run_at <= now()) q
)
SELECT n.ord, n.id, i.status, NULL::bigint[] AS missing
FROM node n JOIN ins i ON i.id = n.id, (SELECT count(*) FROM notified) c
UNION ALL
SELECT NULL, NULL, NULL, ids FROM missing WHERE ids IS NOT NULL
ORDER BY 1;

-- name: insert_job
INSERT INTO "cronbase".jobs (task, queue, payload, priority, run_at, max_attempts, lease, metadata,
                           flow_key, task_version)
VALUES (%(task)s, %(queue)s, %(payload)s::jsonb, %(priority)s,
        COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
        %(lease)s, %(metadata)s::jsonb, %(flow_key)s, %(task_version)s::integer)
RETURNING id, true AS created,
          CASE WHEN run_at <= now() THEN pg_notify(%(channel)s, queue)::text END AS notified;

-- name: insert_job_unique
SELECT k.id, k.created
FROM (SELECT COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval) AS run_at) r
CROSS JOIN LATERAL (
    SELECT floor(extract(epoch FROM r.run_at) / %(unique_seconds)s::float8)::bigint AS window
) w
CROSS JOIN LATERAL "cronbase".insert_keyed_job(
    %(task)s, %(queue)s, %(payload)s::jsonb, %(priority)s::smallint, r.run_at,
    %(max_attempts)s, %(lease)s, %(metadata)s::jsonb, %(flow_key)s, %(idempotency_key)s,
    %(dedupe_key)s, %(unique_prefix)s::text || w.window,
    to_timestamp((w.window + 1) * %(unique_seconds)s::float8), %(channel)s,
    %(task_version)s::integer
) k;

-- name: insert_jobs
WITH ins AS (
    INSERT INTO "cronbase".jobs (task, queue, payload, priority, run_at, max_attempts, lease,
                               metadata, flow_key, task_version)
    SELECT %(task)s, %(queue)s, p.payload, %(priority)s,
           COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
           %(lease)s, %(metadata)s::jsonb, p.flow_key, %(task_version)s::integer
    FROM unnest(%(payloads)b::text[]::jsonb[], %(flow_keys)b::text[])
        WITH ORDINALITY AS p(payload, flow_key, ord)
    ORDER BY p.ord
    RETURNING id
), notified AS (
    SELECT pg_notify(%(channel)s, %(queue)s)
    WHERE COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval) <= now()
)
SELECT id FROM ins, (SELECT count(*) FROM notified) n;

-- name: job_graph
WITH start AS (
    SELECT id, workflow_id FROM "cronbase".jobs_all WHERE id = %(id)s
), members AS (
    SELECT j.id FROM "cronbase".jobs_all j JOIN start s ON j.workflow_id = s.workflow_id
    UNION
    SELECT id FROM start
    UNION
    SELECT d.parent FROM "cronbase".job_deps d JOIN start s ON d.child = s.id
    UNION
    SELECT d.child FROM "cronbase".job_deps d JOIN start s ON d.parent = s.id
)
SELECT j.id, j.task, j.status, j.result, j.parents_left, j.workflow_id, j.last_error,
       ARRAY(SELECT d.parent FROM "cronbase".job_deps d WHERE d.child = j.id
             ORDER BY d.position NULLS FIRST, d.parent) AS parents,
       (SELECT count(*) FROM members) AS total
FROM (SELECT id FROM members ORDER BY id LIMIT %(limit)s) m
JOIN "cronbase".jobs_all j ON j.id = m.id
ORDER BY j.id;

-- name: limit_idle_transaction
SELECT set_config('idle_in_transaction_session_timeout', %(milliseconds)s, true);

-- name: list_audit
SELECT * FROM "cronbase".audit_log ORDER BY at DESC, id DESC LIMIT %(limit)s;

-- name: list_cronbase_schemas
SELECT n.nspname AS name
FROM pg_namespace n JOIN pg_class c ON c.relnamespace = n.oid
WHERE c.relname = 'jobs' AND c.relkind = 'r'
  AND EXISTS (SELECT FROM pg_class m WHERE m.relnamespace = n.oid AND m.relname = 'migrations')
ORDER BY 1;

-- name: list_effects
SELECT * FROM "cronbase".effects
WHERE (%(status)s::text IS NULL OR status = %(status)s)
ORDER BY updated_at DESC, key
LIMIT %(limit)s;

-- name: list_fair_keys
WITH counts AS (
    SELECT flow_key AS scope,
           count(*) FILTER (WHERE status IN ('queued', 'failed')) AS waiting,
           count(*) FILTER (WHERE status = 'running') AS running
    FROM "cronbase".jobs
    WHERE flow_key > 'fair:' AND flow_key < 'fair;' AND status IN ('queued', 'failed', 'running')
    GROUP BY flow_key
)
SELECT split_part(substr(s.scope, 6), '|', 1) AS queue,
       substr(s.scope, strpos(s.scope, '|') + 1) AS key,
       coalesce(c.waiting, 0) AS waiting, coalesce(c.running, 0) AS running,
       coalesce(f.weight, 1) AS weight, coalesce(f.claimed, 0) AS claimed
FROM (SELECT scope FROM counts UNION SELECT scope FROM "cronbase".fair_keys WHERE weight <> 1) s
LEFT JOIN counts c ON c.scope = s.scope
LEFT JOIN "cronbase".fair_keys f ON f.scope = s.scope
WHERE %(queue)s::text IS NULL OR split_part(substr(s.scope, 6), '|', 1) = %(queue)s::text
ORDER BY coalesce(c.waiting, 0) + coalesce(c.running, 0) DESC, s.scope
LIMIT %(limit)s;

-- name: list_job_attempts
SELECT job_id, attempt, worker, started_at, finished_at, outcome, error, error_type, traceback
FROM "cronbase".job_attempts_all WHERE job_id = %(id)s
UNION ALL
SELECT id, attempts, locked_by, started_at, finished_at, 'succeeded', NULL, NULL, NULL
FROM "cronbase".jobs_all WHERE id = %(id)s AND status = 'succeeded'
ORDER BY attempt, finished_at;

-- name: list_jobs
SELECT * FROM "cronbase".jobs_all
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: list_limited_queues
SELECT name FROM "cronbase".queues WHERE max_running IS NOT NULL OR rate_n IS NOT NULL ORDER BY name;

-- name: list_long_running
SELECT * FROM "cronbase".jobs
WHERE status = 'running'
  AND (started_at < now() - %(older_than)s::interval
       OR started_at < now() - lease * %(leases)s::int)
ORDER BY started_at
LIMIT %(limit)s;

-- name: list_queues
SELECT n.name, COALESCE(q.is_paused, false) AS is_paused, q.paused_at, q.paused_by,
       q.max_running, q.rate_n, q.rate_period, q.aging_every, q.aging_step
FROM (SELECT DISTINCT queue AS name FROM "cronbase".jobs
      UNION SELECT queue FROM "cronbase".jobs_history
      WHERE status = 'dead' OR finished_at > now() - interval '1 day'
      UNION SELECT name FROM "cronbase".queues) n
LEFT JOIN "cronbase".queues q USING (name)
ORDER BY n.name;

-- name: list_scheduled_jobs
SELECT * FROM "cronbase".jobs
WHERE status = 'queued' AND run_at > now()
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
ORDER BY run_at, id
LIMIT %(limit)s OFFSET %(offset)s;

-- name: list_schedules
SELECT * FROM "cronbase".schedules ORDER BY key;

-- name: list_task_limits
SELECT substr(scope, 6) AS task, max_running, rate_n, rate_period, key_max_running, key_rate_n,
       key_rate_period, updated_at
FROM "cronbase".flow_limits WHERE scope LIKE 'task:%%'
ORDER BY scope;

-- name: list_unserved_jobs
SELECT v.task, j.queue, count(*) AS waiting, min(j.run_at) AS oldest_run_at,
       (SELECT array_agg(DISTINCT q.queue ORDER BY q.queue)
        FROM "cronbase".workers w CROSS JOIN unnest(w.queues) AS q(queue)
        WHERE w.last_seen_at > now() - %(live_within)s::interval
          AND (w.tasks IS NULL OR v.task = ANY (w.tasks))) AS task_queues
FROM "cronbase".jobs j
CROSS JOIN LATERAL (SELECT CASE WHEN j.task_version IS NULL THEN j.task ELSE j.task || '@' || j.task_version END AS task) v
WHERE j.status IN ('queued', 'failed') AND j.run_at <= now()
  AND NOT EXISTS (
      SELECT FROM "cronbase".workers w
      WHERE w.last_seen_at > now() - %(live_within)s::interval
        AND (w.tasks IS NULL OR v.task = ANY (w.tasks))
        AND (w.queues IS NULL OR j.queue = ANY (w.queues)))
GROUP BY v.task, j.queue
ORDER BY v.task, j.queue;

-- name: list_workers
SELECT id, hostname, pid, queues, concurrency, tasks, started_at, last_seen_at,
       extract(epoch FROM now() - last_seen_at)::float8 AS heartbeat_age,
       COALESCE(jsonb_array_length(overruns), 0) AS overrunning
FROM "cronbase".workers
ORDER BY started_at;

-- name: lock_due_schedules
SELECT * FROM "cronbase".schedules
WHERE NOT is_paused AND next_fire_at <= %(now)s AND task = ANY(%(tasks)s)
ORDER BY next_fire_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: lock_event_key
SELECT pg_advisory_xact_lock(hashtextextended('cronbase:' || %(schema)s || ':event:' || %(key)s, 0));

-- name: lock_event_keys
SELECT k AS key,
       pg_try_advisory_xact_lock(hashtextextended('cronbase:' || %(schema)s || ':event:' || k, 0))
           AS locked
FROM unnest(%(keys)s::text[]) AS k;

-- name: mark_queue_minute
INSERT INTO "cronbase".queue_minutes (queue, minute)
SELECT '', date_trunc('minute', now() - interval '70 seconds')
WHERE pg_try_advisory_xact_lock(%(key)s)
ON CONFLICT DO NOTHING
RETURNING minute;

-- name: move_finished_jobs
WITH lock AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(%(key)s) AS got
), doomed AS (
    SELECT id FROM "cronbase".jobs
    WHERE (SELECT got FROM lock) AND status IN ('succeeded', 'dead', 'cancelled')
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM "cronbase".jobs j USING doomed d WHERE j.id = d.id
    RETURNING j.*
), moved AS (
    INSERT INTO "cronbase".jobs_history (id, task, queue, payload, status, priority, run_at, attempts, max_attempts, lease, locked_by, locked_until, lease_token, idempotency_key, dedupe_key, progress, stage, last_error, error_type, started_at, created_at, updated_at, finished_at, metadata, flow_key, result, snoozes, wait_notify, unique_for_key, parents_left, has_dependents, on_parent_failure, receives, workflow_id, waiting_for, task_version, base_priority) SELECT gone.id, gone.task, gone.queue, gone.payload, gone.status, gone.priority, gone.run_at, gone.attempts, gone.max_attempts, gone.lease, gone.locked_by, gone.locked_until, gone.lease_token, gone.idempotency_key, gone.dedupe_key, gone.progress, gone.stage, gone.last_error, gone.error_type, gone.started_at, gone.created_at, gone.updated_at, COALESCE(gone.finished_at, gone.updated_at), gone.metadata, gone.flow_key, gone.result, gone.snoozes, gone.wait_notify, gone.unique_for_key, gone.parents_left, gone.has_dependents, gone.on_parent_failure, gone.receives, gone.workflow_id, gone.waiting_for, gone.task_version, gone.base_priority FROM gone
    RETURNING id, idempotency_key, unique_for_key, status, finished_at, run_at
), keys AS (
    INSERT INTO "cronbase".job_keys (key, job_id, expires_at)
    SELECT 'i:' || idempotency_key, id, NULL::timestamptz FROM moved
    WHERE idempotency_key IS NOT NULL
    UNION ALL
    SELECT 'u:' || unique_for_key, id, NULL FROM moved
    WHERE unique_for_key IS NOT NULL AND status <> 'cancelled'
    ON CONFLICT (key) DO NOTHING
)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*) FROM moved)::integer AS moved;

-- name: move_legacy_attempts
WITH lock AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(%(key)s) AS got
), doomed AS (
    SELECT id FROM "cronbase".job_attempts_legacy
    WHERE (SELECT got FROM lock)
    ORDER BY id  -- the primary key's order, as move_finished_jobs
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM "cronbase".job_attempts_legacy a USING doomed d WHERE a.id = d.id
    RETURNING a.*
), moved AS (
    INSERT INTO "cronbase".job_attempts SELECT * FROM gone RETURNING 1
)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*) FROM moved)::integer AS moved;

-- name: oldest_expired_lease
SELECT coalesce(
    (SELECT locked_until FROM "cronbase".jobs
     WHERE status = 'running' AND locked_until < now()
       AND locked_until >= coalesce(%(since)s::timestamptz, '-infinity')
     ORDER BY locked_until LIMIT 1),
    now()) AS since;

-- name: pause_queue
INSERT INTO "cronbase".queues AS q (name, is_paused, paused_at, paused_by)
VALUES (%(name)s, true, now(), %(actor)s)
ON CONFLICT (name) DO UPDATE
SET is_paused = true, paused_at = now(), paused_by = excluded.paused_by, updated_at = now()
RETURNING name, is_paused, paused_at, paused_by, max_running, rate_n, rate_period, aging_every, aging_step;

-- name: pause_schedule
UPDATE "cronbase".schedules SET is_paused = true, updated_at = now()
WHERE key = %(key)s
RETURNING *;

-- name: prune_attempts
WITH lock AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(%(key)s) AS got
), gone AS (
    DELETE FROM "cronbase".job_attempts_default WHERE id IN (
    SELECT id FROM "cronbase".job_attempts_default
    WHERE (SELECT got FROM lock) AND finished_at < now() - %(older_than)s::interval
    LIMIT %(limit)s)
RETURNING id
)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*) FROM gone)::integer AS deleted;

-- name: prune_defaults_exclusive
WITH lock AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(%(key)s) AS got
), succeeded_gone AS (
    DELETE FROM "cronbase".jobs_history_succeeded_default WHERE id IN (
    SELECT id FROM "cronbase".jobs_history_succeeded_default
    WHERE (SELECT got FROM lock) AND finished_at < now() - %(succeeded)s::interval
    LIMIT %(limit)s)
RETURNING id
), cancelled_gone AS (
    DELETE FROM "cronbase".jobs_history_cancelled_default WHERE id IN (
    SELECT id FROM "cronbase".jobs_history_cancelled_default
    WHERE (SELECT got FROM lock) AND finished_at < now() - %(cancelled)s::interval
    LIMIT %(limit)s)
RETURNING id
), dead_gone AS (
    DELETE FROM "cronbase".jobs_history_dead_default WHERE id IN (
    SELECT id FROM "cronbase".jobs_history_dead_default
    WHERE (SELECT got FROM lock) AND finished_at < now() - %(dead)s::interval
    LIMIT %(limit)s)
RETURNING id
), gone AS (
    SELECT id FROM succeeded_gone UNION ALL SELECT id FROM cancelled_gone
    UNION ALL SELECT id FROM dead_gone
), keys_gone AS (
    DELETE FROM "cronbase".job_keys k USING gone g WHERE k.job_id = g.id
), parents_gone AS (
    DELETE FROM "cronbase".job_deps d USING gone g WHERE d.parent = g.id
), children_gone AS (
    DELETE FROM "cronbase".job_deps d USING gone g WHERE d.child = g.id
), attempts_gone AS (
    DELETE FROM "cronbase".job_attempts a USING gone g WHERE a.job_id = g.id
), legacy_attempts_gone AS (
    DELETE FROM "cronbase".job_attempts_legacy a USING gone g WHERE a.job_id = g.id
)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*) FROM gone) AS deleted;

-- name: prune_events_exclusive
WITH lock AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(%(key)s) AS got
), doomed AS (
    SELECT key FROM "cronbase".events
    WHERE (SELECT got FROM lock) AND emitted_at < now() - %(older_than)s::interval
    ORDER BY emitted_at
    LIMIT %(limit)s
), gone AS (
    DELETE FROM "cronbase".events e USING doomed d WHERE e.key = d.key RETURNING 1
)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*) FROM gone) AS deleted;

-- name: prune_flow_logs
DELETE FROM "cronbase".flow_limits f
WHERE f.scope LIKE 'key:%%'
  AND f.updated_at < now() - coalesce(
      (SELECT t.key_rate_period FROM "cronbase".flow_limits t
       WHERE t.scope = 'task:' || split_part(substr(f.scope, 5), '|', 1)),
      interval '0');

-- name: prune_gone_workers
WITH lock AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(%(key)s) AS got
), doomed AS (
    SELECT w.id FROM "cronbase".workers w
    WHERE (SELECT got FROM lock) AND w.last_seen_at < now() - greatest(%(older_than)s::interval, %(live_within)s::interval)
AND NOT EXISTS (SELECT FROM "cronbase".jobs j WHERE j.status = 'running' AND j.locked_by = w.id)
    ORDER BY w.last_seen_at
    LIMIT %(limit)s
    FOR UPDATE OF w SKIP LOCKED
), gone AS (
    DELETE FROM "cronbase".workers w USING doomed d WHERE w.id = d.id RETURNING 1
)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*) FROM gone) AS deleted;

-- name: prune_job_keys
WITH lock AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(%(key)s) AS got
), doomed AS (
    SELECT key FROM "cronbase".job_keys
    WHERE (SELECT got FROM lock) AND expires_at < now()
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM "cronbase".job_keys k USING doomed d WHERE k.key = d.key RETURNING 1
)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*) FROM gone)::integer AS deleted;

-- name: prune_jobs
WITH doomed_done AS (
    SELECT id, status FROM "cronbase".jobs_history
    WHERE status = ANY (%(statuses)s::text[]) AND finished_at < now() - %(older_than)s::interval
    LIMIT %(limit)s
), done_gone AS (
    DELETE FROM "cronbase".jobs_history h USING doomed_done d
    WHERE h.id = d.id AND h.status = d.status AND h.status = ANY (%(statuses)s::text[])
    RETURNING h.id
), doomed_live AS (
    SELECT id FROM "cronbase".jobs
    WHERE status = ANY (%(statuses)s::text[]) AND finished_at < now() - %(older_than)s::interval
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), live_gone AS (
    DELETE FROM "cronbase".jobs j USING doomed_live d WHERE j.id = d.id RETURNING j.id
), gone AS (
    SELECT id FROM done_gone UNION ALL SELECT id FROM live_gone
), keys_gone AS (
    DELETE FROM "cronbase".job_keys k USING gone g WHERE k.job_id = g.id
), parents_gone AS (
    DELETE FROM "cronbase".job_deps d USING gone g WHERE d.parent = g.id
), children_gone AS (
    DELETE FROM "cronbase".job_deps d USING gone g WHERE d.child = g.id
), attempts_gone AS (
    DELETE FROM "cronbase".job_attempts a USING gone g WHERE a.job_id = g.id
), legacy_attempts_gone AS (
    DELETE FROM "cronbase".job_attempts_legacy a USING gone g WHERE a.job_id = g.id
)
SELECT count(*)::integer AS deleted FROM gone;

-- name: prune_queue_minutes
DELETE FROM "cronbase".queue_minutes WHERE minute < now() - %(keep)s::interval;

-- name: queue_demand
WITH live AS (
    SELECT queue,
           count(*) FILTER (WHERE status IN ('queued', 'failed') AND run_at <= now()) AS due,
           count(*) FILTER (WHERE status = 'running') AS running,
           min(run_at) FILTER (WHERE status IN ('queued', 'failed') AND run_at <= now())
               AS oldest_due_at,
           count(*) FILTER (WHERE created_at > now() - %(window)s::interval) AS created,
           count(*) FILTER (WHERE status IN ('succeeded', 'dead')
                              AND finished_at > now() - %(window)s::interval) AS finished
    FROM "cronbase".jobs
    WHERE %(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[])
    GROUP BY queue
), history AS (
    SELECT queue,
           count(*) FILTER (WHERE created_at > now() - %(window)s::interval) AS created,
           count(*) FILTER (WHERE status IN ('succeeded', 'dead')) AS finished
    FROM "cronbase".jobs_history
    WHERE finished_at > now() - %(window)s::interval
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
    GROUP BY queue
)
SELECT queue,
       COALESCE(l.due, 0) AS due,
       COALESCE(l.running, 0) AS running,
       extract(epoch FROM now() - l.oldest_due_at)::float8 AS oldest_due_age,
       COALESCE(l.created, 0) + COALESCE(h.created, 0) AS arrivals,
       COALESCE(l.finished, 0) + COALESCE(h.finished, 0) AS completions,
       COALESCE(q.is_paused, false) AS is_paused, q.max_running
FROM live l FULL JOIN history h USING (queue)
LEFT JOIN "cronbase".queues q ON q.name = queue
ORDER BY queue;

-- name: queue_minutes
SELECT queue, minute, due, running, started, waits
FROM "cronbase".queue_minutes
WHERE minute >= date_trunc('minute', now() - %(window)s::interval)
  AND (%(queues)s::text[] IS NULL OR queue = '' OR queue = ANY(%(queues)s::text[]))
ORDER BY minute, queue;

-- name: queue_overview
WITH per_status AS (
    SELECT queue, status, count(*) AS n,
           count(*) FILTER (WHERE status = 'queued' AND run_at > now()) AS later
    FROM "cronbase".jobs GROUP BY queue, status
    UNION ALL
    SELECT queue, status, count(*), 0 FROM "cronbase".jobs_history
    WHERE status = 'dead' OR finished_at > now() - interval '1 day'
    GROUP BY queue, status
), counts AS (
    SELECT queue, jsonb_object_agg(status, n) AS counts, sum(later)::bigint AS scheduled
    FROM (SELECT queue, status, sum(n) AS n, sum(later) AS later FROM per_status
          GROUP BY queue, status) c
    GROUP BY queue
), oldest AS (
    SELECT queue, extract(epoch FROM now() - min(run_at))::float8 AS oldest_wait
    FROM "cronbase".jobs
    WHERE status IN ('queued', 'failed') AND run_at <= now()
    GROUP BY queue
), waits AS (
    SELECT queue,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY w) AS wait_p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY w) AS wait_p95
    FROM (SELECT queue, greatest(extract(epoch FROM started_at - run_at)::float8, 0) AS w
          FROM "cronbase".jobs
          WHERE started_at > now() - interval '1 hour' AND status <> 'failed'
          UNION ALL
          SELECT queue, greatest(extract(epoch FROM started_at - run_at)::float8, 0)
          FROM "cronbase".jobs_history
          WHERE finished_at > now() - interval '1 hour' AND started_at > now() - interval '1 hour') s
    GROUP BY queue
), names AS (
    SELECT queue FROM counts UNION SELECT name FROM "cronbase".queues
)
SELECT n.queue, COALESCE(c.counts, '{}'::jsonb) AS counts, COALESCE(c.scheduled, 0) AS scheduled,
       COALESCE(q.is_paused, false) AS is_paused, q.max_running, q.rate_n, q.rate_period,
       q.aging_every, q.aging_step, o.oldest_wait, w.wait_p50, w.wait_p95
FROM names n
LEFT JOIN counts c USING (queue)
LEFT JOIN oldest o USING (queue)
LEFT JOIN waits w USING (queue)
LEFT JOIN "cronbase".queues q ON q.name = n.queue
ORDER BY n.queue;

-- name: reap_expired_jobs
WITH expired AS MATERIALIZED (
    SELECT id, locked_by, locked_until, attempts >= max_attempts AS used_up FROM "cronbase".jobs
    WHERE status = 'running' AND locked_until < now() 
    ORDER BY locked_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), reaped AS (
    UPDATE "cronbase".jobs j
    SET status = 'failed', run_at = now(),
        last_error = format('lease expired at %%s: worker %%s stopped renewing it',
                            e.locked_until, e.locked_by),
        error_type = 'LeaseExpired',
        locked_by = NULL, locked_until = NULL, lease_token = NULL, updated_at = now()
    FROM expired e
    WHERE j.id = e.id AND NOT e.used_up
    RETURNING j.id, j.queue, j.status, j.attempts, j.started_at, j.last_error, e.locked_by
), gone AS (
    DELETE FROM "cronbase".jobs j USING expired e
    WHERE j.id = e.id AND e.used_up
    RETURNING j.*, e.locked_by AS lost_by,
              format('lease expired at %%s: worker %%s stopped renewing it', e.locked_until,
                     e.locked_by) AS lost_error
), dead AS (
    INSERT INTO "cronbase".jobs_history (id, task, queue, payload, status, priority, run_at, attempts, max_attempts, lease, locked_by, locked_until, lease_token, idempotency_key, dedupe_key, progress, stage, last_error, error_type, started_at, created_at, updated_at, finished_at, metadata, flow_key, result, snoozes, wait_notify, unique_for_key, parents_left, has_dependents, on_parent_failure, receives, workflow_id, waiting_for, task_version, base_priority) SELECT gone.id, gone.task, gone.queue, gone.payload, 'dead', gone.priority, gone.run_at, gone.attempts, gone.max_attempts, gone.lease, NULL, NULL, NULL, gone.idempotency_key, gone.dedupe_key, gone.progress, gone.stage, gone.lost_error, 'LeaseExpired', gone.started_at, gone.created_at, now(), now(), gone.metadata, gone.flow_key, gone.result, gone.snoozes, gone.wait_notify, gone.unique_for_key, gone.parents_left, gone.has_dependents, gone.on_parent_failure, gone.receives, gone.workflow_id, gone.waiting_for, gone.task_version, gone.base_priority FROM gone
    RETURNING id, queue, status, attempts, started_at, last_error
), ended AS (
    SELECT id, queue, status, attempts, started_at, last_error, locked_by FROM reaped
    UNION ALL
    SELECT d.id, d.queue, d.status, d.attempts, d.started_at, d.last_error, g.lost_by
    FROM dead d JOIN gone g ON g.id = d.id
), history AS (
    INSERT INTO "cronbase".job_attempts
        (job_id, attempt, worker, started_at, outcome, error, error_type)
    SELECT id, attempts, locked_by, started_at, 'lost', last_error, 'LeaseExpired' FROM ended
), notified AS (
    SELECT pg_notify(%(channel)s, queue)
    FROM (SELECT DISTINCT queue FROM reaped) q
)
SELECT e.id, e.status FROM ended e, (SELECT count(*) FROM notified) n;

-- name: reap_recently_expired_jobs
WITH expired AS MATERIALIZED (
    SELECT id, locked_by, locked_until, attempts >= max_attempts AS used_up FROM "cronbase".jobs
    WHERE status = 'running' AND locked_until < now() AND locked_until >= %(since)s::timestamptz
    ORDER BY locked_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), reaped AS (
    UPDATE "cronbase".jobs j
    SET status = 'failed', run_at = now(),
        last_error = format('lease expired at %%s: worker %%s stopped renewing it',
                            e.locked_until, e.locked_by),
        error_type = 'LeaseExpired',
        locked_by = NULL, locked_until = NULL, lease_token = NULL, updated_at = now()
    FROM expired e
    WHERE j.id = e.id AND NOT e.used_up
    RETURNING j.id, j.queue, j.status, j.attempts, j.started_at, j.last_error, e.locked_by
), gone AS (
    DELETE FROM "cronbase".jobs j USING expired e
    WHERE j.id = e.id AND e.used_up
    RETURNING j.*, e.locked_by AS lost_by,
              format('lease expired at %%s: worker %%s stopped renewing it', e.locked_until,
                     e.locked_by) AS lost_error
), dead AS (
    INSERT INTO "cronbase".jobs_history (id, task, queue, payload, status, priority, run_at, attempts, max_attempts, lease, locked_by, locked_until, lease_token, idempotency_key, dedupe_key, progress, stage, last_error, error_type, started_at, created_at, updated_at, finished_at, metadata, flow_key, result, snoozes, wait_notify, unique_for_key, parents_left, has_dependents, on_parent_failure, receives, workflow_id, waiting_for, task_version, base_priority) SELECT gone.id, gone.task, gone.queue, gone.payload, 'dead', gone.priority, gone.run_at, gone.attempts, gone.max_attempts, gone.lease, NULL, NULL, NULL, gone.idempotency_key, gone.dedupe_key, gone.progress, gone.stage, gone.lost_error, 'LeaseExpired', gone.started_at, gone.created_at, now(), now(), gone.metadata, gone.flow_key, gone.result, gone.snoozes, gone.wait_notify, gone.unique_for_key, gone.parents_left, gone.has_dependents, gone.on_parent_failure, gone.receives, gone.workflow_id, gone.waiting_for, gone.task_version, gone.base_priority FROM gone
    RETURNING id, queue, status, attempts, started_at, last_error
), ended AS (
    SELECT id, queue, status, attempts, started_at, last_error, locked_by FROM reaped
    UNION ALL
    SELECT d.id, d.queue, d.status, d.attempts, d.started_at, d.last_error, g.lost_by
    FROM dead d JOIN gone g ON g.id = d.id
), history AS (
    INSERT INTO "cronbase".job_attempts
        (job_id, attempt, worker, started_at, outcome, error, error_type)
    SELECT id, attempts, locked_by, started_at, 'lost', last_error, 'LeaseExpired' FROM ended
), notified AS (
    SELECT pg_notify(%(channel)s, queue)
    FROM (SELECT DISTINCT queue FROM reaped) q
)
SELECT e.id, e.status FROM ended e, (SELECT count(*) FROM notified) n;

-- name: reconcile_effect
UPDATE "cronbase".effects
SET status = 'done', result = %(result)s::jsonb, reconciled = true, finished_at = now(),
    takeovers = takeovers + 1, updated_at = now()
WHERE key = %(key)s AND owner = %(previous_owner)s
  AND (status = 'failed'
       OR (status = 'processing' AND started_at < now() - %(stale_after)s::interval))
RETURNING *;

-- name: register_task_limits
WITH removed AS (
    DELETE FROM "cronbase".flow_limits
    WHERE scope = ANY (%(unlimited)s::text[])
), written AS (
    INSERT INTO "cronbase".flow_limits AS f
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

-- name: register_worker
INSERT INTO "cronbase".workers (id, hostname, pid, queues, concurrency, tasks, supervisor, version,
                              schema_version, succeeded_jobs, failed_attempts)
VALUES (%(id)s, %(hostname)s, %(pid)s, %(queues)s, %(concurrency)s, %(tasks)s, %(supervisor)s,
        %(version)s, %(schema_version)s, 0, 0)
ON CONFLICT (id) DO UPDATE SET last_seen_at = now();

-- name: release_jobs
WITH released AS (
    UPDATE "cronbase".jobs j
    SET status = 'queued', attempts = j.attempts - 1, run_at = now(),
        locked_by = NULL, locked_until = NULL, lease_token = NULL, updated_at = now()
    FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS r(id, token)
    WHERE j.id = r.id AND j.lease_token = r.token
    RETURNING j.id, j.queue, j.attempts, j.started_at
), history AS (
    INSERT INTO "cronbase".job_attempts (job_id, attempt, worker, started_at, outcome, error)
    SELECT id, attempts + 1, %(worker)s, started_at, 'released', %(reason)s
    FROM released
), notified AS (
    SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM released) q
)
SELECT r.id FROM released r, (SELECT count(*) FROM notified) n;

-- name: release_orphaned_jobs
WITH released AS (
    UPDATE "cronbase".jobs j
    SET status = 'queued', attempts = j.attempts - 1, run_at = now(),
        locked_by = NULL, locked_until = NULL, lease_token = NULL, updated_at = now()
    WHERE j.status = 'running' AND j.locked_by = %(worker)s
      AND NOT (j.lease_token = ANY (%(tokens)s::uuid[]))
    RETURNING j.id, j.queue, j.attempts, j.started_at
), history AS (
    INSERT INTO "cronbase".job_attempts (job_id, attempt, worker, started_at, outcome, error)
    SELECT id, attempts + 1, %(worker)s, started_at, 'released',
           'claimed by a statement whose reply was lost; handed back by its worker'
    FROM released
), notified AS (
    SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM released) q
)
SELECT r.id FROM released r, (SELECT count(*) FROM notified) n;

-- name: remove_schedule
DELETE FROM "cronbase".schedules WHERE key = %(key)s RETURNING *;

-- name: requeue_dead_jobs
WITH candidates AS (
    SELECT DISTINCT ON (j.dedupe_key IS NULL, COALESCE(j.dedupe_key, j.id::text)) j.id
    FROM "cronbase".jobs_all j
    WHERE j.status = 'dead'
      AND (%(task)s::text IS NULL OR j.task = %(task)s)
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
      AND (j.dedupe_key IS NULL OR NOT EXISTS (
          SELECT FROM "cronbase".jobs o
          WHERE o.dedupe_key = j.dedupe_key AND o.status IN ('queued', 'failed', 'running')))
    ORDER BY j.dedupe_key IS NULL, COALESCE(j.dedupe_key, j.id::text), j.id DESC
), in_place AS (
    UPDATE "cronbase".jobs j
    SET status = 'queued', run_at = now(), max_attempts = GREATEST(j.max_attempts, j.attempts + 1),
        finished_at = NULL, locked_by = NULL, locked_until = NULL, lease_token = NULL,
        updated_at = now()
    FROM candidates c
    WHERE j.id = c.id AND j.status = 'dead'
    RETURNING j.id, j.queue
), back AS (
    DELETE FROM "cronbase".jobs_history h USING candidates c
    WHERE h.id = c.id AND h.status = 'dead'
    RETURNING h.*
), moved AS (
    INSERT INTO "cronbase".jobs (id, task, queue, payload, status, priority, run_at, attempts, max_attempts, lease, locked_by, locked_until, lease_token, idempotency_key, dedupe_key, progress, stage, last_error, error_type, started_at, created_at, updated_at, finished_at, metadata, flow_key, result, snoozes, wait_notify, unique_for_key, parents_left, has_dependents, on_parent_failure, receives, workflow_id, waiting_for, task_version, base_priority) SELECT back.id, back.task, back.queue, back.payload, 'queued', back.priority, now(), back.attempts, GREATEST(back.max_attempts, back.attempts + 1), back.lease, NULL, NULL, NULL, back.idempotency_key, back.dedupe_key, back.progress, back.stage, back.last_error, back.error_type, back.started_at, back.created_at, now(), NULL, back.metadata, back.flow_key, back.result, back.snoozes, back.wait_notify, back.unique_for_key, back.parents_left, back.has_dependents, back.on_parent_failure, back.receives, back.workflow_id, back.waiting_for, back.task_version, back.base_priority FROM back
    RETURNING id, queue
), repended AS (
    SELECT "cronbase".repend_dependents(id) FROM back WHERE has_dependents
), requeued AS (
    SELECT * FROM in_place UNION ALL SELECT * FROM moved
), notified AS (
    SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM requeued) q
)
SELECT r.id FROM requeued r, (SELECT count(*) FROM notified) n, (SELECT count(*) FROM repended) p
ORDER BY r.id;

-- name: reseal_attempts
SELECT r.id
FROM "cronbase".reseal_attempts(%(ids)s::bigint[], %(job_ids)s::bigint[], %(old_errors)s::text[],
                              %(errors)s::text[], %(old_tracebacks)s::text[],
                              %(tracebacks)s::text[]) AS r(id);

-- name: reseal_history
WITH new AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(old_payloads)s::text[], %(payloads)s::text[],
                         %(old_results)s::text[], %(results)s::text[], %(old_errors)s::text[],
                         %(errors)s::text[])
        AS n(id, old_payload, payload, old_result, result, old_error, error)
)
UPDATE "cronbase".jobs_history j
SET payload = n.payload::jsonb, result = n.result::jsonb, last_error = n.error
FROM new n
WHERE j.id = n.id
  AND j.payload = n.old_payload::jsonb
  AND j.result IS NOT DISTINCT FROM n.old_result::jsonb
  AND j.last_error IS NOT DISTINCT FROM n.old_error
RETURNING j.id;

-- name: reseal_jobs
WITH new AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(old_payloads)s::text[], %(payloads)s::text[],
                         %(old_results)s::text[], %(results)s::text[], %(old_errors)s::text[],
                         %(errors)s::text[])
        AS n(id, old_payload, payload, old_result, result, old_error, error)
), locked AS MATERIALIZED (
    SELECT j.id FROM "cronbase".jobs j JOIN new n ON j.id = n.id
    WHERE j.payload = n.old_payload::jsonb
      AND j.result IS NOT DISTINCT FROM n.old_result::jsonb
      AND j.last_error IS NOT DISTINCT FROM n.old_error
    FOR NO KEY UPDATE OF j SKIP LOCKED
)
UPDATE "cronbase".jobs j
SET payload = n.payload::jsonb, result = n.result::jsonb, last_error = n.error
FROM new n JOIN locked l ON l.id = n.id
WHERE j.id = n.id
RETURNING j.id;

-- name: resume_queue
UPDATE "cronbase".queues
SET is_paused = false, paused_at = NULL, paused_by = NULL, updated_at = now()
WHERE name = %(name)s
RETURNING name, is_paused, paused_at, paused_by, max_running, rate_n, rate_period, aging_every, aging_step;

-- name: resume_schedule
UPDATE "cronbase".schedules
SET is_paused = false, next_fire_at = %(next_fire_at)s, updated_at = now()
WHERE key = %(key)s
RETURNING *;

-- name: retry_job
WITH live AS MATERIALIZED (
    SELECT id, status, attempts, locked_by, started_at, finished_at FROM "cronbase".jobs
    WHERE id = %(id)s AND status NOT IN ('running', 'pending')
    FOR UPDATE
), back AS (
    DELETE FROM "cronbase".jobs_history h
    WHERE h.id = %(id)s AND NOT EXISTS (SELECT FROM "cronbase".jobs WHERE id = %(id)s)
    RETURNING h.*
), history AS (
    INSERT INTO "cronbase".job_attempts (job_id, attempt, worker, started_at, finished_at, outcome)
    SELECT id, attempts, locked_by, started_at, finished_at, 'succeeded' FROM live
    WHERE status = 'succeeded'
    UNION ALL
    SELECT id, attempts, locked_by, started_at, finished_at, 'succeeded' FROM back
    WHERE status = 'succeeded'
), in_place AS (
    UPDATE "cronbase".jobs j
    SET status = 'queued', run_at = now(),
        max_attempts = GREATEST(j.max_attempts, j.attempts + 1),
        finished_at = NULL, locked_by = NULL, locked_until = NULL, lease_token = NULL,
        updated_at = now()
    FROM live t
    WHERE j.id = t.id
    RETURNING j.*
), moved AS (
    INSERT INTO "cronbase".jobs (id, task, queue, payload, status, priority, run_at, attempts, max_attempts, lease, locked_by, locked_until, lease_token, idempotency_key, dedupe_key, progress, stage, last_error, error_type, started_at, created_at, updated_at, finished_at, metadata, flow_key, result, snoozes, wait_notify, unique_for_key, parents_left, has_dependents, on_parent_failure, receives, workflow_id, waiting_for, task_version, base_priority) SELECT back.id, back.task, back.queue, back.payload, 'queued', back.priority, now(), back.attempts, GREATEST(back.max_attempts, back.attempts + 1), back.lease, NULL, NULL, NULL, back.idempotency_key, back.dedupe_key, back.progress, back.stage, back.last_error, back.error_type, back.started_at, back.created_at, now(), NULL, back.metadata, back.flow_key, back.result, back.snoozes, back.wait_notify, back.unique_for_key, back.parents_left, back.has_dependents, back.on_parent_failure, back.receives, back.workflow_id, back.waiting_for, back.task_version, back.base_priority FROM back
    RETURNING *
), repended AS (
    SELECT "cronbase".repend_dependents(id) FROM back
    WHERE has_dependents AND status IN ('dead', 'cancelled')
), retried AS (
    SELECT * FROM in_place UNION ALL SELECT * FROM moved
), notified AS (
    SELECT pg_notify(%(channel)s, queue) FROM retried
)
SELECT r.* FROM retried r, (SELECT count(*) FROM notified) n, (SELECT count(*) FROM repended) p;

-- name: roll_up_queue_minute
WITH started AS (
    SELECT queue, started_at - run_at AS waited
    FROM "cronbase".jobs
    WHERE started_at >= %(minute)s AND started_at < %(minute)s + interval '1 minute'
    UNION ALL
    SELECT queue, started_at - run_at
    FROM "cronbase".jobs_history
    WHERE finished_at >= %(minute)s
      AND started_at >= %(minute)s AND started_at < %(minute)s + interval '1 minute'
), counted AS (
    SELECT queue, width_bucket(extract(epoch FROM waited)::float8, %(bounds)s::float8[]) AS bucket,
           count(*)::integer AS n
    FROM started
    GROUP BY 1, 2
), waits AS (
    SELECT q.queue, sum(c.n)::integer AS started,
           array_agg(COALESCE(c.n, 0) ORDER BY b.bucket) AS waits
    FROM (SELECT DISTINCT queue FROM counted) q
    CROSS JOIN generate_series(0, cardinality(%(bounds)s::float8[])) AS b(bucket)
    LEFT JOIN counted c ON c.queue = q.queue AND c.bucket = b.bucket
    GROUP BY q.queue
), live AS (
    SELECT queue,
           count(*) FILTER (WHERE status IN ('queued', 'failed') AND run_at <= now())::integer
               AS due,
           count(*) FILTER (WHERE status = 'running')::integer AS running
    FROM "cronbase".jobs
    WHERE status IN ('queued', 'failed', 'running')
    GROUP BY queue
)
INSERT INTO "cronbase".queue_minutes (queue, minute, due, running, started, waits)
SELECT queue, %(minute)s, COALESCE(l.due, 0), COALESCE(l.running, 0),
       COALESCE(w.started, 0), COALESCE(w.waits, '{}')
FROM live l FULL JOIN waits w USING (queue)
WHERE COALESCE(l.due, 0) + COALESCE(l.running, 0) + COALESCE(w.started, 0) > 0
ON CONFLICT (minute, queue) DO NOTHING;

-- name: schedule_lateness
SELECT key, CASE WHEN is_paused THEN 0
                 ELSE greatest(0, extract(epoch FROM now() - next_fire_at)) END::float8
            AS late_seconds
FROM "cronbase".schedules
ORDER BY key;

-- name: schema_exists
SELECT to_regnamespace(%(schema)s) IS NOT NULL AS found;

-- name: sealed_attempts_batch
SELECT a.id, a.job_id, a.error, a.traceback
FROM "cronbase".job_attempts a
WHERE a.job_id >= %(after)s
  AND (left(a.error, 8) = '$sealed:' AND split_part(a.error, ':', 2) <> %(primary)s
       OR left(a.traceback, 8) = '$sealed:' AND split_part(a.traceback, ':', 2) <> %(primary)s)
ORDER BY a.job_id
LIMIT %(limit)s;

-- name: sealed_history_batch
SELECT j.id, j.payload::text AS payload, j.result::text AS result, j.last_error
FROM "cronbase".jobs_history j
WHERE j.id > %(after)s
  AND (EXISTS (SELECT FROM jsonb_path_query(j.payload, 'lax $."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
               WHERE k #>> '{}' <> %(primary)s)
       OR EXISTS (SELECT FROM jsonb_path_query(j.payload, 'lax $.*."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
                  WHERE k #>> '{}' <> %(primary)s)
       OR EXISTS (SELECT FROM jsonb_path_query(j.result, 'lax $."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
                  WHERE k #>> '{}' <> %(primary)s)
       OR left(j.last_error, 8) = '$sealed:' AND split_part(j.last_error, ':', 2) <> %(primary)s)
ORDER BY j.id
LIMIT %(limit)s;

-- name: sealed_jobs_batch
SELECT j.id, j.payload::text AS payload, j.result::text AS result, j.last_error
FROM "cronbase".jobs j
WHERE j.id > %(after)s
  AND (EXISTS (SELECT FROM jsonb_path_query(j.payload, 'lax $."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
               WHERE k #>> '{}' <> %(primary)s)
       OR EXISTS (SELECT FROM jsonb_path_query(j.payload, 'lax $.*."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
                  WHERE k #>> '{}' <> %(primary)s)
       OR EXISTS (SELECT FROM jsonb_path_query(j.result, 'lax $."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
                  WHERE k #>> '{}' <> %(primary)s)
       OR left(j.last_error, 8) = '$sealed:' AND split_part(j.last_error, ':', 2) <> %(primary)s)
ORDER BY j.id
LIMIT %(limit)s;

-- name: sealing_keys_in_use
SELECT used.key_id, count(*) AS sealed_values
FROM (
    SELECT k #>> '{}' AS key_id
    FROM "cronbase".jobs_all j, jsonb_path_query(j.payload, 'lax $."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
    UNION ALL
    SELECT k #>> '{}'
    FROM "cronbase".jobs_all j, jsonb_path_query(j.payload, 'lax $.*."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
    UNION ALL
    SELECT k #>> '{}'
    FROM "cronbase".jobs_all j, jsonb_path_query(j.result, 'lax $."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
    UNION ALL
    SELECT split_part(j.last_error, ':', 2) FROM "cronbase".jobs_all j
    WHERE left(j.last_error, 8) = '$sealed:'
    UNION ALL
    SELECT split_part(a.error, ':', 2) FROM "cronbase".job_attempts_all a
    WHERE left(a.error, 8) = '$sealed:'
    UNION ALL
    SELECT split_part(a.traceback, ':', 2) FROM "cronbase".job_attempts_all a
    WHERE left(a.traceback, 8) = '$sealed:'
) used
GROUP BY used.key_id
ORDER BY used.key_id;

-- name: search_job_ids
SELECT id FROM "cronbase".jobs_all
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
  AND (%(search)s::text IS NULL
       OR id::text = %(search)s::text
       OR idempotency_key = %(search)s::text OR dedupe_key = %(search)s::text
       OR idempotency_key LIKE %(prefix)s OR dedupe_key LIKE %(prefix)s
       OR %(contains)s::text IS NOT NULL AND id IN (
           SELECT n.id
           FROM (SELECT s.id, s.payload, s.last_error FROM "cronbase".jobs_all s
                 WHERE (%(status)s::text IS NULL OR s.status = %(status)s::text)
                   AND (%(queue)s::text IS NULL OR s.queue = %(queue)s::text)
                   AND (%(task)s::text IS NULL OR s.task = %(task)s::text)
                 ORDER BY s.id DESC
                 LIMIT %(scan)s) n
           WHERE n.payload::text ILIKE %(contains)s OR n.last_error ILIKE %(contains)s))
ORDER BY id DESC
LIMIT %(limit)s;

-- name: search_jobs
SELECT * FROM "cronbase".jobs_all
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
  AND (%(search)s::text IS NULL
       OR id::text = %(search)s::text
       OR idempotency_key = %(search)s::text OR dedupe_key = %(search)s::text
       OR idempotency_key LIKE %(prefix)s OR dedupe_key LIKE %(prefix)s
       OR %(contains)s::text IS NOT NULL AND id IN (
           SELECT n.id
           FROM (SELECT s.id, s.payload, s.last_error FROM "cronbase".jobs_all s
                 WHERE (%(status)s::text IS NULL OR s.status = %(status)s::text)
                   AND (%(queue)s::text IS NULL OR s.queue = %(queue)s::text)
                   AND (%(task)s::text IS NULL OR s.task = %(task)s::text)
                 ORDER BY s.id DESC
                 LIMIT %(scan)s) n
           WHERE n.payload::text ILIKE %(contains)s OR n.last_error ILIKE %(contains)s))
ORDER BY id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: set_fair_weight
INSERT INTO "cronbase".fair_keys AS f (scope, weight, is_idle)
VALUES (%(scope)s, %(weight)s, true)
ON CONFLICT (scope) DO UPDATE SET weight = EXCLUDED.weight, updated_at = now()
RETURNING scope, weight;

-- name: set_queue_aging
INSERT INTO "cronbase".queues AS q (name, aging_every, aging_step, updated_at)
VALUES (%(name)s, %(aging_every)s::interval,
        CASE WHEN %(aging_every)s::interval IS NOT NULL
             THEN coalesce(%(aging_step)s::integer, %(default_step)s::integer) END, now())
ON CONFLICT (name) DO UPDATE
SET aging_every = EXCLUDED.aging_every,
    aging_step = CASE WHEN EXCLUDED.aging_every IS NOT NULL
                      THEN coalesce(%(aging_step)s::integer, q.aging_step, EXCLUDED.aging_step) END,
    updated_at = now()
RETURNING name, is_paused, paused_at, paused_by, max_running, rate_n, rate_period, aging_every, aging_step;

-- name: set_queue_limit
INSERT INTO "cronbase".queues AS q (name, max_running, updated_at)
VALUES (%(name)s, %(max_running)s, now())
ON CONFLICT (name) DO UPDATE SET max_running = EXCLUDED.max_running, updated_at = now()
RETURNING name, is_paused, paused_at, paused_by, max_running, rate_n, rate_period, aging_every, aging_step;

-- name: set_queue_rate
INSERT INTO "cronbase".queues AS q (name, rate_n, rate_period, updated_at)
VALUES (%(name)s, %(rate_n)s, %(rate_period)s, now())
ON CONFLICT (name) DO UPDATE
SET rate_n = EXCLUDED.rate_n, rate_period = EXCLUDED.rate_period, updated_at = now()
RETURNING name, is_paused, paused_at, paused_by, max_running, rate_n, rate_period, aging_every, aging_step;

-- name: suspend_jobs
WITH o AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(wake_in)s::float8[],
                         %(waiting_for)s::text[], %(locked)s::boolean[])
        AS o(id, token, wake_in, waiting_for, locked)
), suspended AS (
    UPDATE "cronbase".jobs j
    SET status = 'queued', attempts = j.attempts - 1, waiting_for = o.waiting_for,
        run_at = CASE
            WHEN o.waiting_for IS NOT NULL
                 AND EXISTS (SELECT FROM "cronbase".events e WHERE e.key = o.waiting_for)
                THEN now()
            WHEN o.waiting_for IS NOT NULL AND NOT o.locked
                THEN now() + least(interval '1 second',
                                   COALESCE(make_interval(secs => o.wake_in), interval '1 second'))
            WHEN o.wake_in IS NULL THEN timestamptz '9999-12-31 00:00:00+00'
            ELSE now() + make_interval(secs => greatest(o.wake_in, 0)) END,
        locked_by = NULL, locked_until = NULL, lease_token = NULL, updated_at = now()
    FROM o
    WHERE j.id = o.id AND j.lease_token = o.token
    RETURNING j.id, j.attempts, j.started_at, j.run_at, j.queue, j.waiting_for
), history AS (
    INSERT INTO "cronbase".job_attempts (job_id, attempt, worker, started_at, outcome, error)
    SELECT id, attempts + 1, %(worker)s, started_at, 'suspended',
           CASE WHEN waiting_for IS NOT NULL THEN format('waiting for event %%s', waiting_for)
                ELSE format('sleeping until %%s', run_at) END
    FROM suspended
), notified AS (
    SELECT pg_notify(%(channel)s, q.queue)
    FROM (SELECT DISTINCT queue FROM suspended WHERE run_at <= now()) q
)
SELECT s.id, 'queued' AS status FROM suspended s, (SELECT count(*) FROM notified) n;

-- name: table_storage
WITH tables AS (
    SELECT c.oid, c.relname, c.relkind FROM pg_class c
    WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = 'cronbase')
      AND c.relkind IN ('r', 'p') AND NOT c.relispartition
)
SELECT t.relname AS name,
       sum(pg_table_size(p.relid))::bigint AS heap_bytes,
       sum(pg_indexes_size(p.relid))::bigint AS index_bytes,
       COALESCE(sum(s.n_live_tup), 0)::bigint AS live_rows,
       COALESCE(sum(s.n_dead_tup), 0)::bigint AS dead_rows,
       max(s.last_vacuum) AS last_vacuum,
       max(s.last_autovacuum) AS last_autovacuum,
       CASE WHEN t.relkind = 'p' THEN count(*) END AS partitions
FROM tables t
CROSS JOIN LATERAL (
    SELECT relid FROM pg_partition_tree(t.oid) WHERE isleaf
    UNION ALL
    SELECT t.oid WHERE t.relkind = 'r'
) p
LEFT JOIN pg_stat_user_tables s ON s.relid = p.relid
GROUP BY t.relname, t.relkind
ORDER BY t.relname;

-- name: take_over_effect
UPDATE "cronbase".effects
SET status = 'processing', owner = %(owner)s, job_id = %(job_id)s, attempt = %(attempt)s,
    started_at = now(), finished_at = NULL, error = NULL, takeovers = takeovers + 1,
    updated_at = now()
WHERE key = %(key)s AND owner = %(previous_owner)s
  AND (status = 'failed'
       OR (status = 'processing' AND started_at < now() - %(stale_after)s::interval))
RETURNING *;

-- name: task_stats
WITH ended AS (
    SELECT task, queue, true AS ok, extract(epoch FROM finished_at - started_at)::float8 AS secs
    FROM "cronbase".jobs_all
    WHERE status = 'succeeded' AND finished_at > now() - %(window)s::interval
    UNION ALL
    SELECT j.task, j.queue, a.outcome = 'succeeded',
           extract(epoch FROM a.finished_at - a.started_at)::float8
    FROM "cronbase".job_attempts_all a JOIN "cronbase".jobs_all j ON j.id = a.job_id
    WHERE a.finished_at > now() - %(window)s::interval
      AND a.outcome IN ('succeeded', 'failed', 'dead', 'lost')
)
SELECT task, queue,
       count(*) FILTER (WHERE ok) AS succeeded,
       count(*) FILTER (WHERE NOT ok) AS failed,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY secs) FILTER (WHERE ok) AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY secs) FILTER (WHERE ok) AS p95
FROM ended
GROUP BY task, queue
ORDER BY task, queue;

-- name: throughput_by_minute
WITH ended AS (
    SELECT finished_at, outcome FROM "cronbase".job_attempts_all
    WHERE finished_at > date_trunc('minute', now()) - interval '59 minutes'
    UNION ALL
    SELECT finished_at, 'succeeded' FROM "cronbase".jobs_all
    WHERE status = 'succeeded'
      AND finished_at > date_trunc('minute', now()) - interval '59 minutes'
)
SELECT date_trunc('minute', finished_at) AS minute,
       count(*) FILTER (WHERE outcome = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE outcome IN ('failed', 'dead', 'lost')) AS failed
FROM ended
GROUP BY 1
ORDER BY 1;

-- name: unpark_jobs
UPDATE "cronbase".jobs j SET ready_xid = pg_current_xact_id()
WHERE j.ready_xid IS NULL AND j.status IN ('queued', 'failed') AND j.flow_key IS NULL
  AND (%(tasks)s::text[] IS NULL
       OR CASE WHEN j.task_version IS NULL THEN j.task ELSE j.task || '@' || j.task_version END
          = ANY (%(tasks)s::text[]));

-- name: unregister_worker
DELETE FROM "cronbase".workers WHERE id = %(id)s;

-- name: upsert_job_replace
WITH up AS (
    INSERT INTO "cronbase".jobs (task, queue, payload, priority, run_at, max_attempts, lease,
                               dedupe_key, metadata, flow_key, task_version)
    VALUES (%(task)s, %(queue)s, %(payload)s::jsonb, %(priority)s,
            COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
            %(lease)s, %(dedupe_key)s, %(metadata)s::jsonb, %(flow_key)s,
            %(task_version)s::integer)
    ON CONFLICT (dedupe_key)
        WHERE dedupe_key IS NOT NULL AND status IN ('queued', 'failed', 'running')
    DO UPDATE SET payload = EXCLUDED.payload, priority = EXCLUDED.priority,
                  base_priority = NULL, run_at = EXCLUDED.run_at, metadata = EXCLUDED.metadata,
                  flow_key = EXCLUDED.flow_key, task_version = EXCLUDED.task_version,
                  updated_at = now()
        WHERE "cronbase".jobs.status IN ('queued', 'failed')
    RETURNING id, (xmax = 0) AS created, queue, run_at
), notified AS (
    SELECT pg_notify(%(channel)s, queue) FROM up WHERE run_at <= now()
)
SELECT id, created FROM up, (SELECT count(*) FROM notified) n
UNION ALL
SELECT id, false AS created FROM "cronbase".jobs
WHERE NOT EXISTS (SELECT FROM up)
  AND dedupe_key = %(dedupe_key)s AND status IN ('queued', 'failed', 'running')
LIMIT 1;

-- name: upsert_schedule
INSERT INTO "cronbase".schedules AS s (key, task, payload, queue, cron, tz, catch_up, max_catch_up,
                                     source, next_fire_at)
VALUES (%(key)s, %(task)s, %(payload)s::jsonb, %(queue)s, %(cron)s, %(tz)s, %(catch_up)s,
        %(max_catch_up)s, %(source)s, %(next_fire_at)s)
ON CONFLICT (key) DO UPDATE
SET task = excluded.task,
    payload = excluded.payload,
    queue = excluded.queue,
    cron = excluded.cron,
    tz = excluded.tz,
    catch_up = excluded.catch_up,
    max_catch_up = excluded.max_catch_up,
    source = excluded.source,
    next_fire_at = CASE WHEN (s.cron, s.tz) IS DISTINCT FROM (excluded.cron, excluded.tz)
                        THEN excluded.next_fire_at ELSE s.next_fire_at END,
    updated_at = now()
RETURNING *;

-- name: watch_job
WITH marked AS (
    UPDATE "cronbase".jobs SET wait_notify = true WHERE id = %(id)s
    RETURNING *
)
SELECT * FROM marked
UNION ALL
SELECT * FROM "cronbase".jobs_history WHERE id = %(id)s AND NOT EXISTS (SELECT FROM marked);

-- name: worker_overview
WITH running AS (
    SELECT locked_by, count(*) AS busy,
           (array_agg(id ORDER BY started_at, id))[1:%(jobs_shown)s] AS job_ids,
           (array_agg(task ORDER BY started_at, id))[1:%(jobs_shown)s] AS job_tasks
    FROM "cronbase".jobs
    WHERE status = 'running'
    GROUP BY locked_by
)
SELECT w.id, w.hostname, w.pid, w.supervisor, w.version, w.schema_version, w.queues,
       w.concurrency, w.tasks, w.started_at,
       w.last_seen_at, extract(epoch FROM now() - w.last_seen_at)::float8 AS heartbeat_age,
       w.last_seen_at > now() - %(live_within)s::interval AS alive,
       COALESCE(r.busy, 0) AS busy,
       COALESCE(r.job_ids, '{}') AS job_ids, COALESCE(r.job_tasks, '{}') AS job_tasks,
       w.overruns, w.succeeded_jobs, w.failed_attempts
FROM "cronbase".workers w
LEFT JOIN running r ON r.locked_by = w.id
ORDER BY bool_or(w.last_seen_at > now() - %(live_within)s::interval)
             OVER (PARTITION BY w.hostname, w.supervisor) DESC,
         w.hostname, w.supervisor NULLS FIRST,
         w.last_seen_at > now() - %(live_within)s::interval DESC, w.started_at;

-- name: xmin_holders
SELECT * FROM (
    SELECT 'session' AS kind, pid, application_name AS application, state,
           extract(epoch FROM now() - COALESCE(xact_start, backend_start))::float8 AS age,
           greatest(age(backend_xmin), age(backend_xid))::bigint AS xid_age
    FROM pg_stat_activity
    WHERE (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL) AND pid <> pg_backend_pid()
      AND backend_type <> 'autovacuum worker'
      AND (datname = current_database() OR datname IS NULL)
    UNION ALL
    SELECT 'prepared', NULL, gid, 'prepared', extract(epoch FROM now() - prepared)::float8,
           age(transaction)::bigint
    FROM pg_prepared_xacts WHERE database = current_database()
    UNION ALL
    SELECT 'slot', NULL, slot_name, CASE WHEN active THEN 'active' ELSE 'inactive' END, NULL,
           greatest(age(xmin), age(catalog_xmin))::bigint
    FROM pg_replication_slots WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL
) h
ORDER BY xid_age DESC NULLS LAST, age DESC NULLS LAST
LIMIT %(limit)s;
