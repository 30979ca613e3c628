-- Named statements on cronbase.jobs and its history. Loaded by db/queries.py; {schema} is the
-- quoted schema name, %(name)s are psycopg parameters, SQL braces are doubled.

-- name: insert_job
-- Insert one job with no uniqueness keys: the common, fastest path. A due job wakes listening
-- workers: one NOTIFY on %(channel)s naming its queue, sent at commit. Each insert statement
-- notifies itself (as River's and Oban's clients do) rather than through an AFTER INSERT
-- trigger: the trigger's transition table cost ~10% of a bulk insert (migration 0007). The
-- NOTIFY is called in RETURNING, once per row inserted (`notified` is NULL for a job not yet
-- due): the same statement as a CTE feeding a SELECT took ~16 us more per insert (330 vs 314;
-- a bare INSERT of two columns 311; bench/HISTORY.md "Fast at the settings people use").
INSERT INTO {schema}.jobs (task, queue, payload, priority, run_at, max_attempts, lease, metadata,
                           flow_key, task_version)
VALUES (%(task)s, %(queue)s, %(payload)s::jsonb, %(priority)s,
        COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
        %(lease)s, %(metadata)s::jsonb, %(flow_key)s, %(task_version)s::integer)
RETURNING id, true AS created,
          CASE WHEN run_at <= now() THEN pg_notify(%(channel)s, queue)::text END AS notified;

-- name: insert_job_unique
-- Insert one job with an idempotency and/or dedupe key, or of a unique_for task; when a key is
-- held, return the job that holds it (insert_keyed_job, migration 0015: the keys live in
-- job_keys, across the live table and the history). A unique_for job's key is its task and
-- rendered key (%(unique_prefix)s) and the number of its window: run_at (database time) over the
-- period, in whole %(unique_seconds)s since the epoch, so windows are aligned in UTC and the same
-- for every enqueuer, whatever its clock (River's by-period uniqueness, PR #734); the key is free
-- again when the window ends. Only a job inserted (and due) notifies. No row: the job that held
-- the key ended meanwhile; the caller asks again. %(task_version)s: NULL for version 1 (the
-- 15-argument insert_keyed_job of migration 0018 writes it on the new row).
SELECT k.id, k.created
FROM (SELECT COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval) AS run_at) r
CROSS JOIN LATERAL (
    SELECT floor(extract(epoch FROM r.run_at) / %(unique_seconds)s::float8)::bigint AS window
) w
CROSS JOIN LATERAL {schema}.insert_keyed_job(
    %(task)s, %(queue)s, %(payload)s::jsonb, %(priority)s::smallint, r.run_at,
    %(max_attempts)s, %(lease)s, %(metadata)s::jsonb, %(flow_key)s, %(idempotency_key)s,
    %(dedupe_key)s, %(unique_prefix)s::text || w.window,
    to_timestamp((w.window + 1) * %(unique_seconds)s::float8), %(channel)s,
    %(task_version)s::integer
) k;

-- name: upsert_job_replace
-- Debounce: a waiting job with the same dedupe key gets the new payload, priority and run_at.
-- A running one is left alone and its id returned (it already started with the old payload).
-- A job inserted or replaced that is due notifies.
WITH up AS (
    INSERT INTO {schema}.jobs (task, queue, payload, priority, run_at, max_attempts, lease,
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
        WHERE {schema}.jobs.status IN ('queued', 'failed')
    RETURNING id, (xmax = 0) AS created, queue, run_at
), notified AS (
    SELECT pg_notify(%(channel)s, queue) FROM up WHERE run_at <= now()
)
SELECT id, created FROM up, (SELECT count(*) FROM notified) n
UNION ALL
SELECT id, false AS created FROM {schema}.jobs
WHERE NOT EXISTS (SELECT FROM up)
  AND dedupe_key = %(dedupe_key)s AND status IN ('queued', 'failed', 'running')
LIMIT 1;

-- name: insert_jobs
-- Bulk insert in one statement; ids come back in input order (rows are inserted, and returned,
-- in the ORDER BY's order, which the CTE scan keeps). One NOTIFY per queue, not per row: a bulk
-- insert of 20,000 jobs wakes listeners once (all rows share one queue and run_at here).
-- The payloads (JSON text) are sent as a binary text[]: psycopg's text dump of a list runs a
-- regex per element to decide on quoting; binary made defer_many of 1,000 ~25% faster.
-- %(flow_keys)s: each job's limit scope (a limited task's); NULL for an unlimited task (unnest
-- pads the shorter array with NULLs).
WITH ins AS (
    INSERT INTO {schema}.jobs (task, queue, payload, priority, run_at, max_attempts, lease,
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

-- name: claim_jobs
-- Record this worker's waiting successes and lease up to %(limit)s due jobs, in one statement:
-- one round trip and one commit where a completion and a claim would take two (a drain of no-op
-- jobs does half the commits, ~1.5x the jobs/s of claim and finish apart: bench/README.md).
-- The jobs come from tickets (claim_tickets, migration 0020; docs/design/storage.md): nothing
-- walks an index of jobs over rows claimed before, so a horizon held for minutes (pg_dump, a
-- long report, an idle session) leaves a claim as fast as it was. %(queues)s: the worker's
-- queues (NULL: all); %(tasks)s: its tasks as it registers them ("task@N" for version N >= 2;
-- NULL: any).
-- Rows: the claimed jobs (claimed_columns: worker/claim.py reads them by name), and one row whose
-- job columns are NULL carrying in `written` the ids of the successes written, and claim_tickets'
-- account: `ticked` (no: another claim was ticking, and a job committed after its snapshot waits
-- for the next tick), `took` (tickets), `passed` (those but the ones of other workers' tasks,
-- which come back), `held` (lanes it wanted that another claim held).
-- The payload and metadata come as text and the lease as seconds, decoded per job by
-- worker/claim.py: a row written by other SQL that Python cannot decode fails that job alone.
-- The worker sends the ids, lease tokens, task and queue names as array literals (db/arrays.py);
-- %(done_results)b, each success's result as JSON text, goes as a binary array, or NULL when none
-- returned anything (unnest pads it). A success someone waits for (wait_notify) is announced by
-- the jobs_notify_done trigger (migration 0013).
WITH /* include: complete_jobs */
SELECT c.*, CASE WHEN c.id IS NULL THEN (SELECT array_agg(f.id) FROM finished f) END AS written
FROM {schema}.claim_tickets(%(worker)s, %(limit)s, %(queues)s::text[], %(tasks)s::text[]) c;

-- fragment: complete_jobs
-- The one place a job is written succeeded: the successes %(done_ids)s with their lease tokens
-- and results (claim_jobs carries them; complete_jobs writes them alone), moved from the live
-- table to the history in this statement (`done`, then `finished`). Fenced by the token: an
-- attempt that lost its lease (reaped, cancelled, retried by an operator) matches nothing and
-- moves nothing. No history row in job_attempts: the job's row records its final attempt.
done AS (
    DELETE FROM {schema}.jobs j
    USING unnest(%(done_ids)s::bigint[], %(done_tokens)s::uuid[], %(done_results)b::text[])
        AS o(id, token, result)
    WHERE j.id = o.id AND j.lease_token = o.token
    RETURNING j.*, o.result AS new_result
), finished AS (
    /* archive done: status = 'succeeded'; finished_at = now(); progress = 100;
       result = done.new_result::jsonb; locked_until = NULL; lease_token = NULL;
       updated_at = now() */
    RETURNING id
)

-- fragment: job_columns
-- Every column of jobs (and of jobs_history, made LIKE it), in their order: what a move writes
-- (db/queries.py's archive and restore; tests/integration/test_history.py checks the list).
id, task, queue, payload, status, priority, run_at, attempts, max_attempts, lease, locked_by,
locked_until, lease_token, idempotency_key, dedupe_key, progress, stage, last_error, error_type,
started_at, created_at, updated_at, finished_at, metadata, flow_key, result, snoozes,
wait_notify, unique_for_key, parents_left, has_dependents, on_parent_failure, receives,
workflow_id, waiting_for, task_version, base_priority

-- fragment: lease_picked
-- Lease the rows of the `picked` CTE (claim_jobs, claim_flow_jobs): running, attempt counted, a
-- fresh lease token. The columns returned are claimed_columns, read by name (worker/claim.py).
UPDATE {schema}.jobs j
SET status = 'running', attempts = j.attempts + 1, locked_by = %(worker)s,
    locked_until = now() + j.lease, lease_token = gen_random_uuid(),
    started_at = now(), updated_at = now()
FROM picked
WHERE j.id = picked.id
RETURNING j.id, j.task, j.queue, j.payload::text AS payload, j.priority, j.attempts,
          j.max_attempts, j.lease_token, extract(epoch FROM j.lease)::float8 AS lease,
          j.metadata::text AS metadata, j.flow_key, j.task_version

-- name: complete_jobs
-- Write successes that no claim carries (a worker claiming nothing; a handler's transaction(),
-- in its own transaction): the ids written in `written`.
WITH /* include: complete_jobs */
SELECT array_agg(id) AS written FROM finished;

-- name: finish_jobs
-- Record the outcomes of many attempts that did not succeed in one statement, with a history row
-- each (successes are written by the complete_jobs fragment, which claim_jobs carries). A job
-- that ends (dead, cancelled) moves to jobs_history in this statement; one that waits again
-- (failed with attempts left, snoozed) stays, updated. `target` locks the fenced rows and decides
-- where each goes; `retried` and `gone` then write them, each row once.
-- Fenced by the lease token: an attempt that lost its lease (reaped, cancelled, retried by an
-- operator) matches nothing, so it can never overwrite what a newer attempt wrote.
-- outcome 'failed' retries after retry_in seconds unless attempts are used up; 'dead' gives up;
-- 'cancelled' (the handler raised Cancel) ends the job; 'snoozed' (Snooze) puts it back after
-- retry_in seconds without counting the attempt, unless it has already been snoozed
-- snooze_cap times: then it is dead (SnoozeLimit); a snooze_cap below 0 is a snooze that is not
-- counted (the handler waited for another attempt's effect).
-- No `status = 'running'` test: a token is set only by a claim and cleared by every statement
-- that ends the attempt, so a matching token means running. With the test the planner started
-- from jobs_running_lease_idx (statistics say few rows run), which a busy worker fills with dead
-- entries between vacuums, and nested-looped it against every outcome: 60-500 ms a batch in a
-- drain. Without it each outcome is one primary-key probe (so in heartbeat_jobs, release_jobs).
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
    FROM {schema}.jobs j JOIN outcome o ON j.id = o.id AND j.lease_token = o.token
    WHERE o.outcome IN ('failed', 'dead', 'cancelled', 'snoozed')
    FOR NO KEY UPDATE OF j
), retried AS (
    UPDATE {schema}.jobs j
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
    DELETE FROM {schema}.jobs j USING target t
    WHERE j.id = t.id AND t.status IN ('dead', 'cancelled')
    RETURNING j.*, t.status AS new_status, t.snoozing AS was_snoozing, t.error AS new_error,
              t.error_type AS new_error_type, t.snooze_cap AS given_cap
), ended AS (
    /* archive gone: status = gone.new_status; finished_at = now();
       last_error = CASE WHEN gone.was_snoozing AND gone.new_status = 'dead'
           THEN format('snoozed %%s times: the task allows %%s (max_snoozes)', gone.snoozes + 1,
                       gone.given_cap)
           ELSE gone.new_error END;
       error_type = CASE WHEN gone.was_snoozing AND gone.new_status = 'dead' THEN 'SnoozeLimit'
           ELSE gone.new_error_type END;
       locked_by = NULL; locked_until = NULL; lease_token = NULL; updated_at = now() */
    RETURNING id, status, attempts, started_at, run_at, last_error, error_type
), finished AS (
    SELECT * FROM retried UNION ALL SELECT * FROM ended
), history AS (
    INSERT INTO {schema}.job_attempts
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

-- name: heartbeat_jobs
-- Extend the leases of the attempts a worker still holds, store their progress, and mark the
-- worker seen, with the handlers it runs past their timeout (%(overruns)s, NULL: none) and its
-- totals since it started: jobs succeeded, attempts failed (the Workers page; totals, not
-- increments, so a renewal that fails and is sent again counts nothing twice).
-- Attempts (tokens) missing from the result have lost their lease. A row with no id says the
-- worker's own row is gone (pruned while the worker was cut off for a day, or by an operator):
-- the worker registers again (heartbeat.py), or no page would show it until it restarts. The
-- check is the one-row update's RETURNING, so a beat costs what it did.
WITH beat AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(progress)s::real[],
                         %(stages)s::text[])
        AS b(id, token, progress, stage)
), renewed AS (
    UPDATE {schema}.jobs j
    SET locked_until = now() + j.lease,
        progress = COALESCE(b.progress, j.progress),
        stage = COALESCE(b.stage, j.stage),
        updated_at = now()
    FROM beat b
    WHERE j.id = b.id AND j.lease_token = b.token
    RETURNING j.id, j.lease_token
), seen AS (
    UPDATE {schema}.workers
    SET last_seen_at = now(), overruns = %(overruns)s::jsonb,
        succeeded_jobs = %(succeeded)s, failed_attempts = %(failed)s
    WHERE id = %(worker)s
    RETURNING 1
)
SELECT id, lease_token FROM renewed
UNION ALL
SELECT NULL, NULL WHERE NOT EXISTS (SELECT FROM seen);

-- name: release_jobs
-- Hand back attempts not finished (a stopping worker; the database lost under a transaction()):
-- queued again, now, attempt not counted; %(reason)s goes into the history row.
WITH released AS (
    UPDATE {schema}.jobs j
    SET status = 'queued', attempts = j.attempts - 1, run_at = now(),
        locked_by = NULL, locked_until = NULL, lease_token = NULL, updated_at = now()
    FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS r(id, token)
    WHERE j.id = r.id AND j.lease_token = r.token
    RETURNING j.id, j.queue, j.attempts, j.started_at
), history AS (
    INSERT INTO {schema}.job_attempts (job_id, attempt, worker, started_at, outcome, error)
    SELECT id, attempts + 1, %(worker)s, started_at, 'released', %(reason)s
    FROM released
), notified AS (
    SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM released) q
)
SELECT r.id FROM released r, (SELECT count(*) FROM notified) n;

-- name: release_orphaned_jobs
-- After a claim whose reply was lost (the connection dropped as it committed: a restart, a
-- failover), this worker holds leases it does not know of. Hand back every running job leased to
-- it whose token it does not hold, attempt not counted, rather than let those leases run out and
-- count an attempt. Rare (only after such a failure); running rows come from
-- jobs_running_lease_idx.
WITH released AS (
    UPDATE {schema}.jobs j
    SET status = 'queued', attempts = j.attempts - 1, run_at = now(),
        locked_by = NULL, locked_until = NULL, lease_token = NULL, updated_at = now()
    WHERE j.status = 'running' AND j.locked_by = %(worker)s
      AND NOT (j.lease_token = ANY (%(tokens)s::uuid[]))
    RETURNING j.id, j.queue, j.attempts, j.started_at
), history AS (
    INSERT INTO {schema}.job_attempts (job_id, attempt, worker, started_at, outcome, error)
    SELECT id, attempts + 1, %(worker)s, started_at, 'released',
           'claimed by a statement whose reply was lost; handed back by its worker'
    FROM released
), notified AS (
    SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM released) q
)
SELECT r.id FROM released r, (SELECT count(*) FROM notified) n;

-- name: age_priorities
-- Priority aging (app.queues.set_aging), run in every worker's reaper round. A waiting job of an
-- aging queue that has been due for n * aging_every gets priority base - n * aging_step, never
-- below 0 (a job deferred at 0 or below does not age), where base is the priority it was
-- deferred with (kept in base_priority from the first step on). Writing the aged priority into
-- the row keeps every claim's order and indexes as they are. A queue is aged by one worker at
-- a time (SKIP LOCKED on its row) and at most every min(aging_every / 4, 30 s); up to
-- %(limit)s jobs of a queue a round, those due longest first, skipping any a claim holds.
WITH aging AS MATERIALIZED (
    SELECT name, aging_every, aging_step FROM {schema}.queues
    WHERE aging_every IS NOT NULL
      AND (aged_at IS NULL
           OR aged_at <= now() - least(aging_every / 4, interval '30 seconds'))
    FOR UPDATE SKIP LOCKED
), stamped AS (
    UPDATE {schema}.queues q SET aged_at = now() FROM aging a WHERE q.name = a.name
), aged AS MATERIALIZED (
    -- Per aging queue (LATERAL: with none due, the jobs table is not read at all).
    SELECT c.id, c.priority
    FROM aging a
    CROSS JOIN LATERAL (
        SELECT j.id, t.priority
        FROM {schema}.jobs j
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
UPDATE {schema}.jobs j
SET base_priority = coalesce(j.base_priority, j.priority), priority = g.priority,
    updated_at = now()
FROM aged g
-- EXISTS: a one-time filter, so with no job to age the join is not run, whichever way the
-- planner joins (a hash join, chosen on a small table, would scan jobs for nothing).
WHERE j.id = g.id AND EXISTS (SELECT FROM aged)
RETURNING j.id, j.queue, j.priority;

-- name: reap_expired_jobs
-- Make jobs whose lease ran out (worker killed, host gone) claimable again, or dead (moved to
-- the history) when their attempts are used up. SKIP LOCKED lets every worker run this without
-- queueing behind another. reap_recently_expired_jobs is this statement for the leases that ran
-- out since %(since)s: a reaper's rounds between its full ones (worker/reaper.py). The walk of
-- jobs_running_lease_idx up to now() passes an entry for every job that ran, until vacuum
-- removes it: while a horizon is held, every job run since, each round a longer walk.
WITH expired AS MATERIALIZED (
    SELECT id, locked_by, locked_until, attempts >= max_attempts AS used_up FROM {schema}.jobs
    WHERE status = 'running' AND locked_until < now() /* recently */
    ORDER BY locked_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), reaped AS (
    UPDATE {schema}.jobs j
    SET status = 'failed', run_at = now(),
        last_error = format('lease expired at %%s: worker %%s stopped renewing it',
                            e.locked_until, e.locked_by),
        error_type = 'LeaseExpired',
        locked_by = NULL, locked_until = NULL, lease_token = NULL, updated_at = now()
    FROM expired e
    WHERE j.id = e.id AND NOT e.used_up
    RETURNING j.id, j.queue, j.status, j.attempts, j.started_at, j.last_error, e.locked_by
), gone AS (
    DELETE FROM {schema}.jobs j USING expired e
    WHERE j.id = e.id AND e.used_up
    RETURNING j.*, e.locked_by AS lost_by,
              format('lease expired at %%s: worker %%s stopped renewing it', e.locked_until,
                     e.locked_by) AS lost_error
), dead AS (
    /* archive gone: status = 'dead'; finished_at = now(); last_error = gone.lost_error;
       error_type = 'LeaseExpired'; locked_by = NULL; locked_until = NULL; lease_token = NULL;
       updated_at = now() */
    RETURNING id, queue, status, attempts, started_at, last_error
), ended AS (
    SELECT id, queue, status, attempts, started_at, last_error, locked_by FROM reaped
    UNION ALL
    SELECT d.id, d.queue, d.status, d.attempts, d.started_at, d.last_error, g.lost_by
    FROM dead d JOIN gone g ON g.id = d.id
), history AS (
    INSERT INTO {schema}.job_attempts
        (job_id, attempt, worker, started_at, outcome, error, error_type)
    SELECT id, attempts, locked_by, started_at, 'lost', last_error, 'LeaseExpired' FROM ended
), notified AS (
    SELECT pg_notify(%(channel)s, queue)
    FROM (SELECT DISTINCT queue FROM reaped) q
)
SELECT e.id, e.status FROM ended e, (SELECT count(*) FROM notified) n;

-- name: oldest_expired_lease
-- Where a reaper's next recent round starts: the oldest lease that ran out since %(since)s (NULL:
-- ever) and is still running (its row was locked by a frozen attempt's transaction, which the
-- round's SKIP LOCKED passed, or it was past the round's batch), else now().
SELECT coalesce(
    (SELECT locked_until FROM {schema}.jobs
     WHERE status = 'running' AND locked_until < now()
       AND locked_until >= coalesce(%(since)s::timestamptz, '-infinity')
     ORDER BY locked_until LIMIT 1),
    now()) AS since;

-- name: limit_idle_transaction
-- In transaction(), just before finish_jobs: from then until COMMIT the job's row is locked, out
-- of the reapers' reach (SKIP LOCKED). A worker frozen there (SIGSTOP, a VM pause, a partition)
-- would hold its job past its lease; with this the server ends the session once it has idled a
-- lease, rolling back: the job is reaped and runs elsewhere, the frozen attempt's COMMIT fails.
-- Local to the transaction (so through a transaction pooler too). A scheduler tick takes it too,
-- for the schedules it locks (schedule/scheduler.py, IDLE_LIMIT).
SELECT set_config('idle_in_transaction_session_timeout', %(milliseconds)s, true);

-- name: holds_lease
-- Whether this attempt still holds its job's lease (one primary-key probe): an effect or a
-- transaction() must not start for an attempt whose job another attempt may own by now.
SELECT EXISTS (SELECT FROM {schema}.jobs WHERE id = %(id)s AND lease_token = %(token)s) AS held;

-- name: get_job
-- One job by id, live or finished (one probe per day of history).
SELECT * FROM {schema}.jobs_all WHERE id = %(id)s;

-- name: list_jobs
-- Newest first, optionally filtered, live and finished; for operators, not the hot path.
SELECT * FROM {schema}.jobs_all
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: list_job_attempts
-- Every ended attempt of one job, oldest first: the history rows, and a succeeded job's final
-- attempt, which its own row records (claim_jobs writes no history row for a success).
SELECT job_id, attempt, worker, started_at, finished_at, outcome, error, error_type, traceback
FROM {schema}.job_attempts_all WHERE job_id = %(id)s
UNION ALL
SELECT id, attempts, locked_by, started_at, finished_at, 'succeeded', NULL, NULL, NULL
FROM {schema}.jobs_all WHERE id = %(id)s AND status = 'succeeded'
ORDER BY attempt, finished_at;

-- name: retry_job
-- Run a job again now: any state but running or pending (a pending job waits for its parents).
-- A waiting job (queued, failed) is updated in place; a finished one moves back from the history
-- (a row a previous release finished in place is updated), and the dependents its failure
-- cancelled wait for it again (repend_dependents). max_attempts grows so the retry is not
-- immediately dead. A succeeded job's final attempt, recorded by its row until now, is written to
-- job_attempts first. Notifies so an idle worker picks it up at once.
WITH live AS MATERIALIZED (
    SELECT id, status, attempts, locked_by, started_at, finished_at FROM {schema}.jobs
    WHERE id = %(id)s AND status NOT IN ('running', 'pending')
    FOR UPDATE
), back AS (
    DELETE FROM {schema}.jobs_history h
    WHERE h.id = %(id)s AND NOT EXISTS (SELECT FROM {schema}.jobs WHERE id = %(id)s)
    RETURNING h.*
), history AS (
    INSERT INTO {schema}.job_attempts (job_id, attempt, worker, started_at, finished_at, outcome)
    SELECT id, attempts, locked_by, started_at, finished_at, 'succeeded' FROM live
    WHERE status = 'succeeded'
    UNION ALL
    SELECT id, attempts, locked_by, started_at, finished_at, 'succeeded' FROM back
    WHERE status = 'succeeded'
), in_place AS (
    UPDATE {schema}.jobs j
    SET status = 'queued', run_at = now(),
        max_attempts = GREATEST(j.max_attempts, j.attempts + 1),
        finished_at = NULL, locked_by = NULL, locked_until = NULL, lease_token = NULL,
        updated_at = now()
    FROM live t
    WHERE j.id = t.id
    RETURNING j.*
), moved AS (
    /* restore back: status = 'queued'; run_at = now();
       max_attempts = GREATEST(back.max_attempts, back.attempts + 1); finished_at = NULL;
       locked_by = NULL; locked_until = NULL; lease_token = NULL; updated_at = now() */
    RETURNING *
), repended AS (
    SELECT {schema}.repend_dependents(id) FROM back
    WHERE has_dependents AND status IN ('dead', 'cancelled')
), retried AS (
    SELECT * FROM in_place UNION ALL SELECT * FROM moved
), notified AS (
    SELECT pg_notify(%(channel)s, queue) FROM retried
)
SELECT r.* FROM retried r, (SELECT count(*) FROM notified) n, (SELECT count(*) FROM repended) p;

-- name: cancel_job
-- Cancel a waiting or running job: it moves to the history. A running attempt's later completion
-- is fenced out; its worker notices at the next heartbeat (current_job().is_cancelled()). A
-- unique_for window it held is free again (job_keys: a cancelled job's u: key is taken over).
WITH target AS (
    SELECT id, status, attempts, locked_by, started_at FROM {schema}.jobs
    WHERE id = %(id)s
    FOR UPDATE
), gone AS (
    DELETE FROM {schema}.jobs j USING target t
    WHERE j.id = t.id AND t.status IN ('pending', 'queued', 'failed', 'running')
    RETURNING j.*
), cancelled AS (
    /* archive gone: status = 'cancelled'; finished_at = now(); locked_by = NULL;
       locked_until = NULL; lease_token = NULL; updated_at = now() */
    RETURNING *
), history AS (
    INSERT INTO {schema}.job_attempts
        (job_id, attempt, worker, started_at, outcome, error, error_type)
    SELECT t.id, t.attempts, t.locked_by, t.started_at, 'cancelled', 'cancelled while running',
           'Cancelled'
    FROM target t JOIN cancelled c ON c.id = t.id
    WHERE t.status = 'running'
)
SELECT c.* FROM cancelled c;

-- name: count_jobs_by_status
-- Counts per queue and status, live and finished, for the CLI and the demo.
SELECT queue, status, count(*) AS count FROM {schema}.jobs_all GROUP BY queue, status
ORDER BY queue, status;

-- name: watch_job
-- A caller of app.jobs.wait: mark the job so that its final state is announced on
-- {done_channel}, and read it (a job already final, in the history, is the answer).
WITH marked AS (
    UPDATE {schema}.jobs SET wait_notify = true WHERE id = %(id)s
    RETURNING *
)
SELECT * FROM marked
UNION ALL
SELECT * FROM {schema}.jobs_history WHERE id = %(id)s AND NOT EXISTS (SELECT FROM marked);

