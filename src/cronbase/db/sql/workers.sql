-- Named statements on cronbase.workers: who is alive and holding leases.

-- name: register_worker
-- A worker announces itself when it starts (ids are unique per process start), with the queues
-- it serves (NULL: all), the tasks it registers, and the supervisor that runs it (host:pid of
-- `cronbase worker --processes N`; NULL for a worker started on its own), and the code it runs:
-- the package version and the newest migration it knows (`cronbase migrate` reads the latter
-- before a contract migration). Its counts of jobs and failed attempts start at zero (its
-- heartbeats write them).
INSERT INTO {schema}.workers (id, hostname, pid, queues, concurrency, tasks, supervisor, version,
                              schema_version, succeeded_jobs, failed_attempts)
VALUES (%(id)s, %(hostname)s, %(pid)s, %(queues)s, %(concurrency)s, %(tasks)s, %(supervisor)s,
        %(version)s, %(schema_version)s, 0, 0)
ON CONFLICT (id) DO UPDATE SET last_seen_at = now();

-- name: unregister_worker
-- A worker that stops cleanly removes itself; a killed one's row stays, gone, until retention
-- prunes it (prune_gone_workers) or an operator does (delete_gone_workers).
DELETE FROM {schema}.workers WHERE id = %(id)s;

-- fragment: gone_worker
-- A worker row `w` not seen for %(older_than)s (never less than %(live_within)s: an alive worker
-- is never gone) whose worker holds no job: a row whose worker still has a running job is kept
-- while the job is in its hands (until the reaper takes the expired lease back), so the Workers
-- page can say whose it was. Running jobs only, as worker_overview counts them; their partial
-- index (jobs_running_lease_idx) holds only running rows.
w.last_seen_at < now() - greatest(%(older_than)s::interval, %(live_within)s::interval)
AND NOT EXISTS (SELECT FROM {schema}.jobs j WHERE j.status = 'running' AND j.locked_by = w.id)

-- name: prune_gone_workers
-- One retention batch of gone workers' rows (operations/retention.py), under the maintenance
-- lock (one pruner at a time). FOR UPDATE re-checks a row a heartbeat updated meanwhile (a
-- worker back from a long pause is alive again, and kept); SKIP LOCKED leaves one it is
-- updating now for the next round. Rows: whether the lock was had, how many went.
WITH /* include: pruner_lock */, doomed AS (
    SELECT w.id FROM {schema}.workers w
    WHERE (SELECT got FROM lock) AND /* include: gone_worker */
    ORDER BY w.last_seen_at
    LIMIT %(limit)s
    FOR UPDATE OF w SKIP LOCKED
), gone AS (
    DELETE FROM {schema}.workers w USING doomed d WHERE w.id = d.id RETURNING 1
)
SELECT (SELECT got FROM lock) AS locked, (SELECT count(*) FROM gone) AS deleted;

-- name: delete_gone_workers
-- `cronbase workers prune`: every gone worker's row at once (an operator's action, audited; a
-- fleet leaves few). A row a heartbeat updates meanwhile is checked again, and kept. Rows: the
-- ids deleted, for the audit row.
DELETE FROM {schema}.workers w
WHERE /* include: gone_worker */
RETURNING w.id;

-- name: list_workers
-- Live (or lately live) workers, with the age of their last heartbeat by the database's clock.
SELECT id, hostname, pid, queues, concurrency, tasks, started_at, last_seen_at,
       extract(epoch FROM now() - last_seen_at)::float8 AS heartbeat_age,
       COALESCE(jsonb_array_length(overruns), 0) AS overrunning
FROM {schema}.workers
ORDER BY started_at;

-- name: list_unserved_jobs
-- Due waiting jobs that no live worker will claim: no worker seen within %(live_within)s serves
-- both their queue and their task (a worker with NULL tasks, older code, claims any task). They
-- wait for a worker that knows the task (a deploy not finished, a task renamed, a typo), or, when
-- live workers know it, for one that serves their queue: task_queues names the queues those
-- workers serve (NULL: no live worker knows the task), so the operator is told which it is.
-- A job of version N >= 2 of its task (migration 0018) is named "task@N", as claims match it: it
-- is unserved while no live worker has that version of the task.
SELECT v.task, j.queue, count(*) AS waiting, min(j.run_at) AS oldest_run_at,
       (SELECT array_agg(DISTINCT q.queue ORDER BY q.queue)
        FROM {schema}.workers w CROSS JOIN unnest(w.queues) AS q(queue)
        WHERE w.last_seen_at > now() - %(live_within)s::interval
          AND (w.tasks IS NULL OR v.task = ANY (w.tasks))) AS task_queues
FROM {schema}.jobs j
CROSS JOIN LATERAL (SELECT CASE WHEN j.task_version IS NULL THEN j.task ELSE j.task || '@' || j.task_version END AS task) v
WHERE j.status IN ('queued', 'failed') AND j.run_at <= now()
  AND NOT EXISTS (
      SELECT FROM {schema}.workers w
      WHERE w.last_seen_at > now() - %(live_within)s::interval
        AND (w.tasks IS NULL OR v.task = ANY (w.tasks))
        AND (w.queues IS NULL OR j.queue = ANY (w.queues)))
GROUP BY v.task, j.queue
ORDER BY v.task, j.queue;

-- name: worker_overview
-- Every registered worker with what an operator asks of it: alive (seen within
-- %(live_within)s), busy slots (its running jobs), the first %(jobs_shown)s jobs in its hands,
-- the handlers it runs past their timeout, and its jobs succeeded and attempts failed since it
-- started (those three as of its last heartbeat; the counts NULL: a release before 0021).
-- A killed worker's row stays, gone, until pruned (prune_gone_workers); its running jobs show
-- here until reaped.
-- Grouped by host and supervisor (the processes of one `cronbase worker --processes N` side by
-- side; workers started on their own form their host's group): groups with a live worker first,
-- then by host and supervisor; in a group, live workers first, oldest first.
WITH running AS (
    SELECT locked_by, count(*) AS busy,
           (array_agg(id ORDER BY started_at, id))[1:%(jobs_shown)s] AS job_ids,
           (array_agg(task ORDER BY started_at, id))[1:%(jobs_shown)s] AS job_tasks
    FROM {schema}.jobs
    WHERE status = 'running'
    GROUP BY locked_by
)
SELECT w.id, w.hostname, w.pid, w.supervisor, w.version, w.schema_version, w.queues,
       w.concurrency, w.tasks, w.started_at,
       w.last_seen_at, extract(epoch FROM now() - w.last_seen_at)::float8 AS heartbeat_age,
       w.last_seen_at > now() - %(live_within)s::interval AS alive,
       COALESCE(r.busy, 0) AS busy,
       COALESCE(r.job_ids, '{{}}') AS job_ids, COALESCE(r.job_tasks, '{{}}') AS job_tasks,
       w.overruns, w.succeeded_jobs, w.failed_attempts
FROM {schema}.workers w
LEFT JOIN running r ON r.locked_by = w.id
ORDER BY bool_or(w.last_seen_at > now() - %(live_within)s::interval)
             OVER (PARTITION BY w.hostname, w.supervisor) DESC,
         w.hostname, w.supervisor NULLS FIRST,
         w.last_seen_at > now() - %(live_within)s::interval DESC, w.started_at;

-- name: connection_room
-- What a worker command weighs its connections against before it starts (worker/capacity.py):
-- the server's max_connections, the slots kept for superusers (and, on PostgreSQL 16+, for
-- roles with pg_use_reserved_connections), and the client backends connected now. Settings
-- and pg_stat_activity only; current_setting(.., true) is NULL where a setting does not exist.
SELECT current_setting('max_connections')::int AS max_connections,
       current_setting('superuser_reserved_connections')::int
         + COALESCE(current_setting('reserved_connections', true)::int, 0) AS reserved,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int AS in_use;
