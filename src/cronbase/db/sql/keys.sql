-- Encrypted tasks' sealed values (payload/sealing.py; `cronbase keys`, operations/keys.py): the
-- keys rows need, and rotation's re-sealing, in batches by id. A sealed JSON value names its key
-- at "$sealed"."k": a payload's or result's own envelope, and a workflow's sealed results merged
-- into a payload as a member (or a list of them): where payload/sealing.py's envelopes() reads
-- them, no deeper (a deeper "$sealed" is data). A sealed text starts "$sealed:<key id>:".

-- name: sealed_jobs_batch
-- The next live jobs past %(after)s holding a value sealed with a key other than %(primary)s,
-- as text (rotation re-seals them in Python, where the keys are).
SELECT j.id, j.payload::text AS payload, j.result::text AS result, j.last_error
FROM {schema}.jobs j
WHERE j.id > %(after)s
  AND (EXISTS (SELECT FROM jsonb_path_query(j.payload, 'lax $."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
               WHERE k #>> '{{}}' <> %(primary)s)
       OR EXISTS (SELECT FROM jsonb_path_query(j.payload, 'lax $.*."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
                  WHERE k #>> '{{}}' <> %(primary)s)
       OR EXISTS (SELECT FROM jsonb_path_query(j.result, 'lax $."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
                  WHERE k #>> '{{}}' <> %(primary)s)
       OR left(j.last_error, 8) = '$sealed:' AND split_part(j.last_error, ':', 2) <> %(primary)s)
ORDER BY j.id
LIMIT %(limit)s;

-- name: sealed_history_batch
-- sealed_jobs_batch for the history (by jobs_history_id_idx).
SELECT j.id, j.payload::text AS payload, j.result::text AS result, j.last_error
FROM {schema}.jobs_history j
WHERE j.id > %(after)s
  AND (EXISTS (SELECT FROM jsonb_path_query(j.payload, 'lax $."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
               WHERE k #>> '{{}}' <> %(primary)s)
       OR EXISTS (SELECT FROM jsonb_path_query(j.payload, 'lax $.*."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
                  WHERE k #>> '{{}}' <> %(primary)s)
       OR EXISTS (SELECT FROM jsonb_path_query(j.result, 'lax $."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
                  WHERE k #>> '{{}}' <> %(primary)s)
       OR left(j.last_error, 8) = '$sealed:' AND split_part(j.last_error, ':', 2) <> %(primary)s)
ORDER BY j.id
LIMIT %(limit)s;

-- name: sealed_attempts_batch
-- The next attempts from job %(after)s on (>=: a job's attempts may span two batches; those
-- re-sealed no longer match) whose error or traceback is sealed with a key other than
-- %(primary)s. The legacy attempts table (before 0015) holds none: encryption came later.
SELECT a.id, a.job_id, a.error, a.traceback
FROM {schema}.job_attempts a
WHERE a.job_id >= %(after)s
  AND (left(a.error, 8) = '$sealed:' AND split_part(a.error, ':', 2) <> %(primary)s
       OR left(a.traceback, 8) = '$sealed:' AND split_part(a.traceback, ':', 2) <> %(primary)s)
ORDER BY a.job_id
LIMIT %(limit)s;

-- name: reseal_jobs
-- Write re-sealed values of live jobs, each only if the row still holds what was read (a job
-- that failed, finished or was changed meanwhile keeps its values: the next pass reads it
-- again, here or in the history); one a worker has locked is passed over (SKIP LOCKED), never
-- waited for. Not updated_at: the job did not change. Rows: the ids written.
WITH new AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(old_payloads)s::text[], %(payloads)s::text[],
                         %(old_results)s::text[], %(results)s::text[], %(old_errors)s::text[],
                         %(errors)s::text[])
        AS n(id, old_payload, payload, old_result, result, old_error, error)
), locked AS MATERIALIZED (
    SELECT j.id FROM {schema}.jobs j JOIN new n ON j.id = n.id
    WHERE j.payload = n.old_payload::jsonb
      AND j.result IS NOT DISTINCT FROM n.old_result::jsonb
      AND j.last_error IS NOT DISTINCT FROM n.old_error
    FOR NO KEY UPDATE OF j SKIP LOCKED
)
UPDATE {schema}.jobs j
SET payload = n.payload::jsonb, result = n.result::jsonb, last_error = n.error
FROM new n JOIN locked l ON l.id = n.id
WHERE j.id = n.id
RETURNING j.id;

-- name: reseal_history
-- reseal_jobs for the history.
WITH new AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(old_payloads)s::text[], %(payloads)s::text[],
                         %(old_results)s::text[], %(results)s::text[], %(old_errors)s::text[],
                         %(errors)s::text[])
        AS n(id, old_payload, payload, old_result, result, old_error, error)
)
UPDATE {schema}.jobs_history j
SET payload = n.payload::jsonb, result = n.result::jsonb, last_error = n.error
FROM new n
WHERE j.id = n.id
  AND j.payload = n.old_payload::jsonb
  AND j.result IS NOT DISTINCT FROM n.old_result::jsonb
  AND j.last_error IS NOT DISTINCT FROM n.old_error
RETURNING j.id;

-- name: reseal_attempts
-- Write re-sealed errors and tracebacks of attempts, each only if unchanged since read, through
-- migration 0025's function: the application role may not update attempts (written once).
SELECT r.id
FROM {schema}.reseal_attempts(%(ids)s::bigint[], %(job_ids)s::bigint[], %(old_errors)s::text[],
                              %(errors)s::text[], %(old_tracebacks)s::text[],
                              %(tracebacks)s::text[]) AS r(id);

-- name: sealing_keys_in_use
-- How many stored values each key opens, over every job and attempt (`cronbase keys status`;
-- after a rotation, a key no row names can be dropped). Reads every row: an operator's check.
SELECT used.key_id, count(*) AS sealed_values
FROM (
    SELECT k #>> '{{}}' AS key_id
    FROM {schema}.jobs_all j, jsonb_path_query(j.payload, 'lax $."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
    UNION ALL
    SELECT k #>> '{{}}'
    FROM {schema}.jobs_all j, jsonb_path_query(j.payload, 'lax $.*."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
    UNION ALL
    SELECT k #>> '{{}}'
    FROM {schema}.jobs_all j, jsonb_path_query(j.result, 'lax $."$sealed" ? (@.k.type() == "string" && @.c.type() == "string").k') k
    UNION ALL
    SELECT split_part(j.last_error, ':', 2) FROM {schema}.jobs_all j
    WHERE left(j.last_error, 8) = '$sealed:'
    UNION ALL
    SELECT split_part(a.error, ':', 2) FROM {schema}.job_attempts_all a
    WHERE left(a.error, 8) = '$sealed:'
    UNION ALL
    SELECT split_part(a.traceback, ':', 2) FROM {schema}.job_attempts_all a
    WHERE left(a.traceback, 8) = '$sealed:'
) used
GROUP BY used.key_id
ORDER BY used.key_id;
