-- 0018: task versions (`@app.task(version=2)`, issue 24): a job deferred for version N of its
-- task is claimed only by a worker whose code has version N or later of it, so a change of a
-- payload's shape rolls out while workers of the previous code still run.
--
-- Expand-only. jobs.task_version is nullable without a default (adding it rewrites nothing):
-- NULL is version 1, what every job of an unversioned task and of a previous release gets, so
-- the claim of an unversioned job is unchanged. A worker registers "name" and "name@k" for
-- 2 <= k <= its version; claim_jobs and claim_flow_jobs match a job's
-- CASE WHEN task_version IS NULL THEN task ELSE task || '@' || task_version END against them.
ALTER TABLE {schema}.jobs ADD COLUMN task_version integer;
ALTER TABLE {schema}.jobs_history ADD COLUMN task_version integer;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_task_version_check CHECK (task_version >= 2);

-- The view's * was expanded when it was made: make it again to carry the new column.
CREATE OR REPLACE VIEW {schema}.jobs_all AS
    SELECT * FROM {schema}.jobs UNION ALL SELECT * FROM {schema}.jobs_history;

COMMENT ON COLUMN {schema}.jobs.task_version IS
    'The version of its task the job was deferred for (@app.task(version=N)); only workers with that version or later of the task claim it. NULL: version 1.';
COMMENT ON COLUMN {schema}.jobs_history.task_version IS
    'The version of its task the job was deferred for (@app.task(version=N)); NULL: version 1.';

-- A keyed insert of a versioned job: the keyed insert of 0015, then its version written on the
-- row it inserted (same transaction, not yet visible to any claim). The 14-argument function
-- stays for producers of 0015 and 0016 (expand-only).
CREATE FUNCTION {schema}.insert_keyed_job(
    p_task text, p_queue text, p_payload jsonb, p_priority smallint, p_run_at timestamptz,
    p_max_attempts integer, p_lease interval, p_metadata jsonb, p_flow_key text,
    p_idempotency_key text, p_dedupe_key text, p_unique_for_key text, p_unique_until timestamptz,
    p_channel text, p_task_version integer
) RETURNS TABLE (id bigint, created boolean)
LANGUAGE plpgsql AS $$
DECLARE
    k record;
BEGIN
    SELECT * INTO k FROM {schema}.insert_keyed_job(
        p_task, p_queue, p_payload, p_priority, p_run_at, p_max_attempts, p_lease, p_metadata,
        p_flow_key, p_idempotency_key, p_dedupe_key, p_unique_for_key, p_unique_until,
        p_channel) AS f;
    IF k.created AND p_task_version IS NOT NULL THEN
        UPDATE {schema}.jobs j SET task_version = p_task_version WHERE j.id = k.id;
    END IF;
    RETURN QUERY SELECT k.id, k.created WHERE k.id IS NOT NULL;
END
$$;

COMMENT ON FUNCTION {schema}.insert_keyed_job(text, text, jsonb, smallint, timestamptz, integer,
    interval, jsonb, text, text, text, text, timestamptz, text, integer) IS
    'insert_job_unique: insert_keyed_job of 0015, then the job''s task_version (NULL: version 1) written on the row it inserted.';
