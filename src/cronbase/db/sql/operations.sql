-- The operator's side: queue pauses, the audit log, the overview figures, bulk requeue, prune.

-- fragment: queue_state
-- What app.queues returns of a queue (QueueState.from_row).
name, is_paused, paused_at, paused_by, max_running, rate_n, rate_period, aging_every, aging_step

-- name: pause_queue
INSERT INTO {schema}.queues AS q (name, is_paused, paused_at, paused_by)
VALUES (%(name)s, true, now(), %(actor)s)
ON CONFLICT (name) DO UPDATE
SET is_paused = true, paused_at = now(), paused_by = excluded.paused_by, updated_at = now()
RETURNING /* include: queue_state */;

-- name: resume_queue
UPDATE {schema}.queues
SET is_paused = false, paused_at = NULL, paused_by = NULL, updated_at = now()
WHERE name = %(name)s
RETURNING /* include: queue_state */;

-- name: list_queues
-- Every queue that has live jobs, or jobs in the history that queue_overview counts (dead ones,
-- and the last day's), or was ever paused, limited or aged.
SELECT n.name, COALESCE(q.is_paused, false) AS is_paused, q.paused_at, q.paused_by,
       q.max_running, q.rate_n, q.rate_period, q.aging_every, q.aging_step
FROM (SELECT DISTINCT queue AS name FROM {schema}.jobs
      UNION SELECT queue FROM {schema}.jobs_history
      WHERE status = 'dead' OR finished_at > now() - interval '1 day'
      UNION SELECT name FROM {schema}.queues) n
LEFT JOIN {schema}.queues q USING (name)
ORDER BY n.name;

-- name: insert_audit
INSERT INTO {schema}.audit_log (actor, action, target, detail)
VALUES (%(actor)s, %(action)s, %(target)s, %(detail)s::jsonb)
RETURNING *;

-- name: list_audit
SELECT * FROM {schema}.audit_log ORDER BY at DESC, id DESC LIMIT %(limit)s;

-- name: queue_overview
-- Per queue: counts by status (and how many of the queued are scheduled: run_at still ahead),
-- paused or not, its limits, the oldest due job's wait so far, and the wait
-- (start minus due time) of the jobs started in the last hour at the 50th and 95th percentile.
-- Live jobs are counted all; of the history, the dead ones all (an operator requeues them) and
-- the succeeded and cancelled ones of the last day: a count over months of history would read
-- all of it on every refresh (the days outside are pruned by finished_at).
WITH per_status AS (
    SELECT queue, status, count(*) AS n,
           count(*) FILTER (WHERE status = 'queued' AND run_at > now()) AS later
    FROM {schema}.jobs GROUP BY queue, status
    UNION ALL
    SELECT queue, status, count(*), 0 FROM {schema}.jobs_history
    WHERE status = 'dead' OR finished_at > now() - interval '1 day'
    GROUP BY queue, status
), counts AS (
    SELECT queue, jsonb_object_agg(status, n) AS counts, sum(later)::bigint AS scheduled
    FROM (SELECT queue, status, sum(n) AS n, sum(later) AS later FROM per_status
          GROUP BY queue, status) c
    GROUP BY queue
), oldest AS (
    SELECT queue, extract(epoch FROM now() - min(run_at))::float8 AS oldest_wait
    FROM {schema}.jobs
    WHERE status IN ('queued', 'failed') AND run_at <= now()
    GROUP BY queue
), waits AS (
    SELECT queue,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY w) AS wait_p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY w) AS wait_p95
    FROM (SELECT queue, greatest(extract(epoch FROM started_at - run_at)::float8, 0) AS w
          FROM {schema}.jobs
          WHERE started_at > now() - interval '1 hour' AND status <> 'failed'
          UNION ALL
          SELECT queue, greatest(extract(epoch FROM started_at - run_at)::float8, 0)
          FROM {schema}.jobs_history
          WHERE finished_at > now() - interval '1 hour' AND started_at > now() - interval '1 hour') s
    GROUP BY queue
), names AS (
    SELECT queue FROM counts UNION SELECT name FROM {schema}.queues
)
SELECT n.queue, COALESCE(c.counts, '{{}}'::jsonb) AS counts, COALESCE(c.scheduled, 0) AS scheduled,
       COALESCE(q.is_paused, false) AS is_paused, q.max_running, q.rate_n, q.rate_period,
       q.aging_every, q.aging_step, o.oldest_wait, w.wait_p50, w.wait_p95
FROM names n
LEFT JOIN counts c USING (queue)
LEFT JOIN oldest o USING (queue)
LEFT JOIN waits w USING (queue)
LEFT JOIN {schema}.queues q ON q.name = n.queue
ORDER BY n.queue;

-- name: throughput_by_minute
-- Attempts ended per minute over the last hour: succeeded, and failed (retrying or dead).
-- Successes are the succeeded jobs' own rows (the history's recent days, by finished_at), which
-- record their final attempt, and job_attempts' (succeeded jobs since retried).
WITH ended AS (
    SELECT finished_at, outcome FROM {schema}.job_attempts_all
    WHERE finished_at > date_trunc('minute', now()) - interval '59 minutes'
    UNION ALL
    SELECT finished_at, 'succeeded' FROM {schema}.jobs_all
    WHERE status = 'succeeded'
      AND finished_at > date_trunc('minute', now()) - interval '59 minutes'
)
SELECT date_trunc('minute', finished_at) AS minute,
       count(*) FILTER (WHERE outcome = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE outcome IN ('failed', 'dead', 'lost')) AS failed
FROM ended
GROUP BY 1
ORDER BY 1;

-- name: list_long_running
-- Running jobs started more than %(older_than)s ago, or running for more than %(leases)s of their
-- own leases (the heartbeat has renewed the lease that many times): stuck, or slower than anyone
-- expected. A job with a short lease is noticed long before the fixed threshold.
SELECT * FROM {schema}.jobs
WHERE status = 'running'
  AND (started_at < now() - %(older_than)s::interval
       OR started_at < now() - lease * %(leases)s::int)
ORDER BY started_at
LIMIT %(limit)s;

-- name: requeue_dead_jobs
-- Run dead jobs again now (optionally of one task or queue): moved back from the history (a
-- previous release's dead row in the live table is updated in place), and the dependents their
-- death cancelled wait for them again. A dead job whose dedupe key is held by a waiting or
-- running job stays dead (the key's job will do the work); of several dead jobs with one dedupe
-- key, the newest is requeued.
WITH candidates AS (
    SELECT DISTINCT ON (j.dedupe_key IS NULL, COALESCE(j.dedupe_key, j.id::text)) j.id
    FROM {schema}.jobs_all j
    WHERE j.status = 'dead'
      AND (%(task)s::text IS NULL OR j.task = %(task)s)
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
      AND (j.dedupe_key IS NULL OR NOT EXISTS (
          SELECT FROM {schema}.jobs o
          WHERE o.dedupe_key = j.dedupe_key AND o.status IN ('queued', 'failed', 'running')))
    ORDER BY j.dedupe_key IS NULL, COALESCE(j.dedupe_key, j.id::text), j.id DESC
), in_place AS (
    UPDATE {schema}.jobs j
    SET status = 'queued', run_at = now(), max_attempts = GREATEST(j.max_attempts, j.attempts + 1),
        finished_at = NULL, locked_by = NULL, locked_until = NULL, lease_token = NULL,
        updated_at = now()
    FROM candidates c
    WHERE j.id = c.id AND j.status = 'dead'
    RETURNING j.id, j.queue
), back AS (
    DELETE FROM {schema}.jobs_history h USING candidates c
    WHERE h.id = c.id AND h.status = 'dead'
    RETURNING h.*
), moved AS (
    /* restore back: status = 'queued'; run_at = now();
       max_attempts = GREATEST(back.max_attempts, back.attempts + 1); finished_at = NULL;
       locked_by = NULL; locked_until = NULL; lease_token = NULL; updated_at = now() */
    RETURNING id, queue
), repended AS (
    SELECT {schema}.repend_dependents(id) FROM back WHERE has_dependents
), requeued AS (
    SELECT * FROM in_place UNION ALL SELECT * FROM moved
), notified AS (
    SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM requeued) q
)
SELECT r.id FROM requeued r, (SELECT count(*) FROM notified) n, (SELECT count(*) FROM repended) p
ORDER BY r.id;

-- fragment: forget_jobs
-- What names the jobs a `gone` CTE deleted (its id column), deleted with them: their keys in
-- job_keys, the edges of job_deps they are in, their attempts (job_attempts, and the legacy
-- table's of before migration 0015). A dropped day of the history cleans the same (its function).
keys_gone AS (
    DELETE FROM {schema}.job_keys k USING gone g WHERE k.job_id = g.id
), parents_gone AS (
    DELETE FROM {schema}.job_deps d USING gone g WHERE d.parent = g.id
), children_gone AS (
    DELETE FROM {schema}.job_deps d USING gone g WHERE d.child = g.id
), attempts_gone AS (
    DELETE FROM {schema}.job_attempts a USING gone g WHERE a.job_id = g.id
), legacy_attempts_gone AS (
    DELETE FROM {schema}.job_attempts_legacy a USING gone g WHERE a.job_id = g.id
)

-- name: prune_jobs
-- `cronbase prune`: delete up to %(limit)s finished jobs of the given statuses that ended more
-- than %(older_than)s ago, row by row: from the history (what is left after its whole days were
-- dropped: drop_history_days, the day the cutoff falls in and the default partitions) and a
-- previous release's finished rows in the live table; with what names them. One row: how many.
WITH doomed_done AS (
    SELECT id, status FROM {schema}.jobs_history
    WHERE status = ANY (%(statuses)s::text[]) AND finished_at < now() - %(older_than)s::interval
    LIMIT %(limit)s
), done_gone AS (
    DELETE FROM {schema}.jobs_history h USING doomed_done d
    WHERE h.id = d.id AND h.status = d.status AND h.status = ANY (%(statuses)s::text[])
    RETURNING h.id
), doomed_live AS (
    SELECT id FROM {schema}.jobs
    WHERE status = ANY (%(statuses)s::text[]) AND finished_at < now() - %(older_than)s::interval
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), live_gone AS (
    DELETE FROM {schema}.jobs j USING doomed_live d WHERE j.id = d.id RETURNING j.id
), gone AS (
    SELECT id FROM done_gone UNION ALL SELECT id FROM live_gone
), /* include: forget_jobs */
SELECT count(*)::integer AS deleted FROM gone;

-- name: prune_defaults_exclusive
-- A worker's retention batch for the rows whole days cannot drop: finished jobs in the history's
-- default partitions (their day had no partition when they finished: the upgrade's or a long
-- outage's) past their status's age (%(succeeded)s, %(cancelled)s, %(dead)s; NULL keeps them),
-- with what names them. Run only by the caller that gets the advisory lock, one pruner at a time
-- across all workers; the lock is transaction-scoped (it ends with this statement), so it works
-- through a transaction pooler. Rows: whether the lock was had, how many jobs were deleted.
WITH /* include: pruner_lock */, succeeded_gone AS (
    /* include: prune_default(table=jobs_history_succeeded_default, age=succeeded) */
), cancelled_gone AS (
    /* include: prune_default(table=jobs_history_cancelled_default, age=cancelled) */
), dead_gone AS (
    /* include: prune_default(table=jobs_history_dead_default, age=dead) */
), gone AS (
    SELECT id FROM succeeded_gone UNION ALL SELECT id FROM cancelled_gone
    UNION ALL SELECT id FROM dead_gone
), /* include: forget_jobs */
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*) FROM gone) AS deleted;

-- fragment: job_search_match
-- The job list's filters (search_jobs, count_search_jobs, search_job_ids): status, queue, task,
-- and a search term matched as a job id or a key (exact, or a key's prefix: indexed), or else as
-- text inside the payload or the last error, case-insensitive, in the newest %(scan)s jobs of the
-- other filters only: that match reads every payload it looks at, so it is bounded (a big
-- history is never read whole). %(contains)s is the term as an ILIKE pattern, its own wildcards
-- escaped; NULL for a whole number, which is a job id only.
(%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
  AND (%(search)s::text IS NULL
       OR id::text = %(search)s::text
       OR idempotency_key = %(search)s::text OR dedupe_key = %(search)s::text
       OR idempotency_key LIKE %(prefix)s OR dedupe_key LIKE %(prefix)s
       OR %(contains)s::text IS NOT NULL AND id IN (
           SELECT n.id
           FROM (SELECT s.id, s.payload, s.last_error FROM {schema}.jobs_all s
                 WHERE (%(status)s::text IS NULL OR s.status = %(status)s::text)
                   AND (%(queue)s::text IS NULL OR s.queue = %(queue)s::text)
                   AND (%(task)s::text IS NULL OR s.task = %(task)s::text)
                 ORDER BY s.id DESC
                 LIMIT %(scan)s) n
           WHERE n.payload::text ILIKE %(contains)s OR n.last_error ILIKE %(contains)s))

-- name: search_jobs
-- The dashboard's job list: filters, a search by id or key (idempotency, dedupe, or a
-- schedule slot) or by text in the newest jobs' payloads and errors, newest first, one page at
-- a time; live and finished jobs.
SELECT * FROM {schema}.jobs_all
WHERE /* include: job_search_match */
ORDER BY id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: count_search_jobs
-- How many jobs search_jobs' filters match, counting at most %(limit)s: the job list's "select
-- all N jobs matching this filter", on every render and every refresh. A count, not the ids
-- (search_job_ids reads those only when the operator acts on them), and bounded: past the limit
-- the page only says "more than", so a big history is never counted whole.
SELECT count(*) AS count FROM (
    SELECT 1 FROM {schema}.jobs_all
    WHERE /* include: job_search_match */
    LIMIT %(limit)s
) matching;

-- name: search_job_ids
-- The ids of search_jobs' matches, newest first, at most %(limit)s: what "select all jobs
-- matching this filter" acts on (the caller asks one more than it allows, to know when a filter
-- matches too many; count_search_jobs counts them for the page).
SELECT id FROM {schema}.jobs_all
WHERE /* include: job_search_match */
ORDER BY id DESC
LIMIT %(limit)s;

-- fragment: error_scan
-- The newest %(scan)s jobs of %(status)s, each with its error's headline: the error class and
-- the first line of the last error, at most 200 characters, its UUIDs and numbers written <id>
-- and <n> (the key error_groups groups by): "refused request 812" and "refused request 813" are
-- one error, as an error tracker's fingerprint would have them. An encrypted task's errors are
-- sealed (payload/sealing.py): grouped by class alone, the headline naming the key. (E'\x24' is
-- '$', which a fragment may not hold: its $names are placeholders.)
SELECT id, task, COALESCE(error_type, '') AS error_type,
       CASE WHEN left(last_error, 8) = E'\x24sealed:'
            THEN '(encrypted with key ' || split_part(last_error, ':', 2) || ')'
            ELSE regexp_replace(
                regexp_replace(
                    left(btrim(split_part(COALESCE(last_error, ''), E'\n', 1), E' \t\r'), 200),
                    '[0-9a-f]{{8}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}', '<id>',
                    'gi'),
                '[0-9]+', '<n>', 'g') END AS message,
       COALESCE(finished_at, updated_at) AS at
FROM {schema}.jobs_all
WHERE status = %(status)s::text
ORDER BY id DESC
LIMIT %(scan)s

-- name: error_groups
-- The dead (or failed) jobs grouped by what went wrong: task, error class and the first line of
-- the last error, with how many and the newest, over the newest %(scan)s jobs only; scanned:
-- how many jobs the groups cover (the bound was hit when it equals the scan).
SELECT task, error_type, message, count(*) AS count, max(at) AS newest,
       (sum(count(*)) OVER ())::bigint AS scanned
FROM (/* include: error_scan */) newest
GROUP BY task, error_type, message
ORDER BY count(*) DESC, max(at) DESC, task, message
LIMIT %(limit)s;

-- name: count_error_scan_by_task
-- error_groups' scan (the newest %(scan)s jobs of %(status)s) counted by task alone: the Dead
-- page's per-task counts when the groups error_groups returns (at most 100) leave some out. The
-- headline columns are not computed: the planner drops a subquery's unused outputs (EXPLAIN
-- VERBOSE shows them as NULL).
SELECT task, count(*) AS count
FROM (/* include: error_scan */) newest
GROUP BY task
ORDER BY task;

-- name: error_group_ids
-- The ids of one group of error_groups (the same scan), newest first: what a group's "Retry
-- all" and "Delete all" act on.
SELECT id
FROM (/* include: error_scan */) newest
WHERE task = %(task)s::text AND error_type = %(error_type)s::text AND message = %(message)s::text
ORDER BY id DESC;

-- name: list_scheduled_jobs
-- The Scheduled view: queued jobs whose run_at is still ahead, soonest first, a page at a time.
SELECT * FROM {schema}.jobs
WHERE status = 'queued' AND run_at > now()
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
ORDER BY run_at, id
LIMIT %(limit)s OFFSET %(offset)s;

-- name: prune_events_exclusive
-- One retention batch of emitted events older than %(older_than)s, under the same lock as
-- prune_jobs_exclusive (one pruner at a time; no FOR UPDATE: nothing else updates an event, and
-- the DELETE locks its rows). Rows: whether the lock was had, how many went.
WITH /* include: pruner_lock */, doomed AS (
    SELECT key FROM {schema}.events
    WHERE (SELECT got FROM lock) AND emitted_at < now() - %(older_than)s::interval
    ORDER BY emitted_at
    LIMIT %(limit)s
), gone AS (
    DELETE FROM {schema}.events e USING doomed d WHERE e.key = d.key RETURNING 1
)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*) FROM gone) AS deleted;

-- name: count_prunable
-- What prune_jobs would delete (cronbase prune --dry-run): finished jobs of %(statuses)s that
-- ended more than %(older_than)s ago, by status.
SELECT status, count(*) AS n FROM {schema}.jobs_all
WHERE status = ANY (%(statuses)s::text[]) AND finished_at < now() - %(older_than)s::interval
GROUP BY status
ORDER BY status;

-- name: delete_finished_jobs
-- The dashboard's bulk delete: finished jobs only (a waiting or running job is cancelled first,
-- so a worker never loses a row under its lease), from the history (or the live table, for a
-- previous release's finished rows); their attempts stay until their day is dropped.
WITH done AS (
    DELETE FROM {schema}.jobs_history WHERE id = ANY (%(ids)s::bigint[]) RETURNING id
), live AS (
    DELETE FROM {schema}.jobs
    WHERE id = ANY (%(ids)s::bigint[]) AND status IN ('succeeded', 'dead', 'cancelled')
    RETURNING id
)
SELECT id FROM done UNION ALL SELECT id FROM live;

-- name: task_stats
-- Per task and queue, over the last %(window)s: attempts that ended, succeeded and failed
-- (failed, dead or lost), and the p50/p95 run time of the successes. Successes are the job rows
-- (the history's days in the window, by finished_at) and job_attempts' successes of jobs since
-- retried; failures are job_attempts' (its days in the window).
WITH ended AS (
    SELECT task, queue, true AS ok, extract(epoch FROM finished_at - started_at)::float8 AS secs
    FROM {schema}.jobs_all
    WHERE status = 'succeeded' AND finished_at > now() - %(window)s::interval
    UNION ALL
    SELECT j.task, j.queue, a.outcome = 'succeeded',
           extract(epoch FROM a.finished_at - a.started_at)::float8
    FROM {schema}.job_attempts_all a JOIN {schema}.jobs_all j ON j.id = a.job_id
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

-- name: schema_exists
-- For the CLI's message when a table is missing: is the schema itself there (a typo in
-- --schema otherwise reads as "no jobs")?
SELECT to_regnamespace(%(schema)s) IS NOT NULL AS found;

-- name: list_cronbase_schemas
-- The schemas of this database that hold cronbase's tables (a jobs table beside a migrations
-- table): named when --schema points at one that does not exist, or is new.
SELECT n.nspname AS name
FROM pg_namespace n JOIN pg_class c ON c.relnamespace = n.oid
WHERE c.relname = 'jobs' AND c.relkind = 'r'
  AND EXISTS (SELECT FROM pg_class m WHERE m.relnamespace = n.oid AND m.relname = 'migrations')
ORDER BY 1;

-- name: queue_demand
-- Per queue, the work in hand an autoscaler sizes the workers by: due jobs (queued or failed,
-- run_at reached), running jobs, the oldest due job's age, and over the last window the jobs
-- created (arrivals) and finished as succeeded or dead (completions). Pending, scheduled
-- (run_at ahead), event-waiting and finished jobs are not work in hand. The live table is read
-- once (it holds only unfinished jobs and those not yet moved); the history only by finished_at
-- inside the window (its day partitions and jobs_history_finished_idx), so a poll every 30 s
-- stays cheap however long the history. The queues parameter: NULL for every queue with rows.
-- With each queue its pause and its limit of running jobs (queues), which cap the figure.
WITH live AS (
    SELECT queue,
           count(*) FILTER (WHERE status IN ('queued', 'failed') AND run_at <= now()) AS due,
           count(*) FILTER (WHERE status = 'running') AS running,
           min(run_at) FILTER (WHERE status IN ('queued', 'failed') AND run_at <= now())
               AS oldest_due_at,
           count(*) FILTER (WHERE created_at > now() - %(window)s::interval) AS created,
           count(*) FILTER (WHERE status IN ('succeeded', 'dead')
                              AND finished_at > now() - %(window)s::interval) AS finished
    FROM {schema}.jobs
    WHERE %(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[])
    GROUP BY queue
), history AS (
    SELECT queue,
           count(*) FILTER (WHERE created_at > now() - %(window)s::interval) AS created,
           count(*) FILTER (WHERE status IN ('succeeded', 'dead')) AS finished
    FROM {schema}.jobs_history
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
LEFT JOIN {schema}.queues q ON q.name = queue
ORDER BY queue;
