-- The history's upkeep (migration 0015): partitions made ahead and dropped past their age, the
-- rows a previous release finished in place moved over, and keys of ended windows pruned. Run by
-- workers' retention (operations/retention.py) and `cronbase migrate`; none is on the hot path.
-- Each statement runs only for the caller that gets the maintenance advisory lock %(key)s (one
-- pruner at a time across all workers); the lock is transaction-scoped, so it works through a
-- transaction pooler. Each returns whether the lock was had, and what it did.

-- fragment: pruner_lock
-- The maintenance lock, tried (never waited for): `WITH /* include: pruner_lock */, ...`.
lock AS MATERIALIZED (
    SELECT pg_try_advisory_xact_lock(%(key)s) AS got
)

-- fragment: prune_default
-- Up to %(limit)s rows of $table, a default partition (their day had no partition of its own),
-- that ended more than %($age)s ago, deleted by the caller that got the lock.
DELETE FROM {schema}.$table WHERE id IN (
    SELECT id FROM {schema}.$table
    WHERE (SELECT got FROM lock) AND finished_at < now() - %($age)s::interval
    LIMIT %(limit)s)
RETURNING id

-- name: create_history_days
-- The partitions of the days (UTC) from %(first)s to %(last)s (NULL: yesterday, and a week
-- ahead), for each status and for job_attempts: how many were new. The days are the database's:
-- a worker whose clock is wrong makes the right ones.
WITH /* include: pruner_lock */
SELECT got AS locked,
       CASE WHEN got THEN {schema}.create_history_days(
           COALESCE(%(first)s::date, (now() AT TIME ZONE 'UTC')::date - 1),
           COALESCE(%(last)s::date, (now() AT TIME ZONE 'UTC')::date + 7))
       END AS made
FROM lock;

-- name: drop_history_days
-- Drop whole days of one status's history (job_attempts for a NULL status) that ended more than
-- %(older_than)s ago, with the job_keys and job_deps rows of their jobs: an object of partition name to rows dropped.
-- `cronbase prune` (%(wait)s) waits for the lock; a worker's round tries it.
WITH lock AS MATERIALIZED (
    SELECT CASE WHEN %(wait)s::boolean THEN (SELECT true FROM pg_advisory_xact_lock(%(key)s))
                ELSE pg_try_advisory_xact_lock(%(key)s) END AS got
)
SELECT got AS locked,
       CASE WHEN got THEN {schema}.drop_history_days(%(status)s::text,
                                                     now() - %(older_than)s::interval)
       END AS dropped
FROM lock;

-- name: move_finished_jobs
-- Up to %(limit)s finished jobs still in the live table (written in place by a previous release,
-- or there since before the upgrade), moved to the history with their keys (a keyed job's key
-- must hold on in job_keys once it leaves the live table's unique indexes). Their attempts are
-- moved by move_legacy_attempts. Rows: the lock, how many moved.
-- In id order, along the primary key: a walk that stops after %(limit)s rows (the index entries
-- of rows already moved are marked dead as it passes). Ordered by finished_at, which no index
-- serves, each batch sorted every finished row left: 1 million rows moved in 181 s, quadratic.
WITH /* include: pruner_lock */, doomed AS (
    SELECT id FROM {schema}.jobs
    WHERE (SELECT got FROM lock) AND status IN ('succeeded', 'dead', 'cancelled')
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM {schema}.jobs j USING doomed d WHERE j.id = d.id
    RETURNING j.*
), moved AS (
    /* archive gone: finished_at = COALESCE(gone.finished_at, gone.updated_at) */
    RETURNING id, idempotency_key, unique_for_key, status, finished_at, run_at
), keys AS (
    INSERT INTO {schema}.job_keys (key, job_id, expires_at)
    SELECT 'i:' || idempotency_key, id, NULL::timestamptz FROM moved
    WHERE idempotency_key IS NOT NULL
    UNION ALL
    SELECT 'u:' || unique_for_key, id, NULL FROM moved
    WHERE unique_for_key IS NOT NULL AND status <> 'cancelled'
    ON CONFLICT (key) DO NOTHING
)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*) FROM moved)::integer AS moved;

-- name: move_legacy_attempts
-- Up to %(limit)s rows of job_attempts_legacy (attempts recorded before migration 0015), oldest
-- first, moved into the partitioned job_attempts. Rows: the lock, how many moved.
WITH /* include: pruner_lock */, doomed AS (
    SELECT id FROM {schema}.job_attempts_legacy
    WHERE (SELECT got FROM lock)
    ORDER BY id  -- the primary key's order, as move_finished_jobs
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM {schema}.job_attempts_legacy a USING doomed d WHERE a.id = d.id
    RETURNING a.*
), moved AS (
    INSERT INTO {schema}.job_attempts SELECT * FROM gone RETURNING 1
)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*) FROM moved)::integer AS moved;

-- name: history_span
-- The first and last day (UTC) of the finished jobs the live table and the legacy attempts still
-- hold, and today: the days whose partitions the moves above need.
SELECT (min(day) AT TIME ZONE 'UTC')::date AS first, (max(day) AT TIME ZONE 'UTC')::date AS last
FROM (
    SELECT min(COALESCE(finished_at, updated_at)) AS day FROM {schema}.jobs
    WHERE status IN ('succeeded', 'dead', 'cancelled')
    UNION ALL
    SELECT max(COALESCE(finished_at, updated_at)) AS day FROM {schema}.jobs
    WHERE status IN ('succeeded', 'dead', 'cancelled')
    UNION ALL
    SELECT min(finished_at) FROM {schema}.job_attempts_legacy
    UNION ALL
    SELECT max(finished_at) FROM {schema}.job_attempts_legacy
    UNION ALL
    SELECT now()
) d;

-- name: prune_job_keys
-- Up to %(limit)s unique_for keys whose window ended (then free: a new window has a new key).
-- Rows: the lock, how many went.
WITH /* include: pruner_lock */, doomed AS (
    SELECT key FROM {schema}.job_keys
    WHERE (SELECT got FROM lock) AND expires_at < now()
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM {schema}.job_keys k USING doomed d WHERE k.key = d.key RETURNING 1
)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*) FROM gone)::integer AS deleted;

-- name: prune_attempts
-- Up to %(limit)s attempts in job_attempts' default partition (their day had no partition) that
-- ended more than %(older_than)s ago; whole days are dropped (drop_history_days with a NULL
-- status). Rows: the lock, how many went.
WITH /* include: pruner_lock */, gone AS (
    /* include: prune_default(table=job_attempts_default, age=older_than) */
)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*) FROM gone)::integer AS deleted;
