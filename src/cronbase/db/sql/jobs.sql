-- Named statements on cronbase.jobs and its history. Loaded by db/queries.py; {schema} is the
-- quoted schema name, %(name)s are psycopg parameters, SQL braces are doubled.

-- name: insert_job
-- Insert one job with no uniqueness keys: the common, fastest path. A due job wakes listening
-- workers: one NOTIFY on %(channel)s naming its queue, sent at commit. Each insert statement
-- notifies itself (as River's and Oban's clients do) rather than through an AFTER INSERT
-- trigger: the trigger's transition table cost ~10% of a bulk insert (migration 0007).
WITH ins AS (
    INSERT INTO {schema}.jobs (task, queue, payload, priority, run_at, max_attempts, lease,
                               metadata, flow_key)
    VALUES (%(task)s, %(queue)s, %(payload)s::jsonb, %(priority)s,
            COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
            %(lease)s, %(metadata)s::jsonb, %(flow_key)s)
    RETURNING id, queue, run_at
), notified AS (
    SELECT pg_notify(%(channel)s, queue) FROM ins WHERE run_at <= now()
)
SELECT id, true AS created FROM ins, (SELECT count(*) FROM notified) n;

-- name: insert_job_unique
-- Insert one job with an idempotency and/or dedupe key, or of a unique_for task; on conflict
-- return the existing job. A unique_for job's key is its task and rendered key
-- (%(unique_prefix)s) and the number of its window: run_at (database time) over the period, in
-- whole %(unique_seconds)s since the epoch, so windows are aligned in UTC and the same for every
-- enqueuer, whatever its clock (River's by-period uniqueness, PR #734).
-- The second branch runs only when the insert did nothing. It can miss a row committed after this
-- statement's snapshot was taken (the conflicting insert we waited on); the caller then runs the
-- statement again, which takes a fresh snapshot. Only a job inserted (and due) notifies.
WITH ins AS (
    INSERT INTO {schema}.jobs (task, queue, payload, priority, run_at, max_attempts, lease,
                               idempotency_key, dedupe_key, metadata, flow_key, unique_for_key)
    VALUES (%(task)s, %(queue)s, %(payload)s::jsonb, %(priority)s,
            COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
            %(lease)s, %(idempotency_key)s, %(dedupe_key)s, %(metadata)s::jsonb, %(flow_key)s,
            %(unique_prefix)s::text || floor(extract(epoch FROM COALESCE(
                %(run_at)s::timestamptz, now() + %(delay)s::interval)) / %(unique_seconds)s::float8)::bigint)
    ON CONFLICT DO NOTHING
    RETURNING id, queue, run_at
), notified AS (
    SELECT pg_notify(%(channel)s, queue) FROM ins WHERE run_at <= now()
)
SELECT id, true AS created FROM ins, (SELECT count(*) FROM notified) n
UNION ALL
SELECT id, false AS created FROM (
    -- When the keys match different jobs, the idempotency key's job is the answer.
    SELECT id, idempotency_key IS NOT DISTINCT FROM %(idempotency_key)s AS by_key
    FROM {schema}.jobs
    WHERE NOT EXISTS (SELECT FROM ins)
      AND (idempotency_key = %(idempotency_key)s
           OR (dedupe_key = %(dedupe_key)s AND status IN ('queued', 'failed', 'running'))
           OR (unique_for_key = %(unique_prefix)s::text || floor(extract(epoch FROM COALESCE(
                   %(run_at)s::timestamptz, now() + %(delay)s::interval))
                   / %(unique_seconds)s::float8)::bigint
               AND status <> 'cancelled'))
    ORDER BY by_key DESC
    LIMIT 1
) existing;

-- name: upsert_job_replace
-- Debounce: a waiting job with the same dedupe key gets the new payload, priority and run_at.
-- A running one is left alone and its id returned (it already started with the old payload).
-- A job inserted or replaced that is due notifies.
WITH up AS (
    INSERT INTO {schema}.jobs (task, queue, payload, priority, run_at, max_attempts, lease,
                               dedupe_key, metadata, flow_key)
    VALUES (%(task)s, %(queue)s, %(payload)s::jsonb, %(priority)s,
            COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
            %(lease)s, %(dedupe_key)s, %(metadata)s::jsonb, %(flow_key)s)
    ON CONFLICT (dedupe_key)
        WHERE dedupe_key IS NOT NULL AND status IN ('queued', 'failed', 'running')
    DO UPDATE SET payload = EXCLUDED.payload, priority = EXCLUDED.priority,
                  run_at = EXCLUDED.run_at, metadata = EXCLUDED.metadata,
                  flow_key = EXCLUDED.flow_key, updated_at = now()
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
                               metadata, flow_key)
    SELECT %(task)s, %(queue)s, p.payload, %(priority)s,
           COALESCE(%(run_at)s::timestamptz, now() + %(delay)s::interval), %(max_attempts)s,
           %(lease)s, %(metadata)s::jsonb, p.flow_key
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
-- Record this worker's waiting successes and lease up to %(limit)s due jobs from any queue, in one
-- statement: one round trip and one commit where a completion and a claim would take two. A drain
-- of no-op jobs does half the commits, ~1.5x the jobs/s of claim and finish apart (bench/README.md).
-- `finished` is fenced by the lease token, as finish_jobs is: an attempt that lost its lease
-- (reaped, cancelled, retried by an operator) matches nothing and overwrites nothing. A success
-- writes no history row: the job row itself records its final attempt (attempts, locked_by,
-- started_at, finished_at; list_job_attempts shows it), as Oban and River keep theirs; a history
-- row per success cost ~20% of a drain. With %(limit)s = 0 only the successes are written.
-- The MATERIALIZED CTE is a planner fence: without it PostgreSQL may fold the sub-select into the
-- UPDATE's join and evaluate LIMIT and SKIP LOCKED in an order that locks, and claims, more rows
-- than asked (Oban's basic engine says the same). Paused queues are skipped with NOT EXISTS, an
-- anti-join the planner estimates well: `queue <> ALL (ARRAY(SELECT ...))` was estimated to keep
-- one row, so the planner sorted every waiting job on each claim instead of walking jobs_due_idx
-- in order and stopping after %(limit)s rows: O(n^2) for a drain (bench/README.md: ~1,500 ->
-- ~15,000 jobs/s; tests/integration/test_claim_plan.py checks the plan). A job being finished is
-- running in this statement's snapshot, so `due` cannot pick it.
-- Limited jobs (flow_key set) and the jobs of a limited queue are left to claim_flow_jobs
-- (flow.sql); the partial indexes leave the first out, the queue test beside the paused one the
-- second. claim_jobs_in_queues is this statement with the queue filter below filled in
-- (db/queries.py renders both from this text): a worker of some queues walks jobs_queue_due_idx.
-- Only jobs of %(tasks)s (the worker's registered tasks; NULL: any) are claimed: a job no worker
-- knows waits for one that does (a rolling deploy, two projects on one database) instead of
-- burning an attempt. A filter on the same index walk: no sort, and no cost while every waiting
-- job is known; jobs of an unknown task at the head of the queue are stepped over on each claim
-- (`cronbase stats` and `check` show them).
-- Rows: the claimed jobs (claimed_columns: worker/claim.py reads them by name), and one row whose
-- job columns are NULL carrying in `written` the ids of the successes written (a FULL JOIN on
-- false: the claimed rows and that one row, with no column listed twice).
-- The payload and metadata come as text and the lease as seconds, decoded per job by
-- worker/claim.py: a row written by other SQL that Python cannot decode (JSON nested 10,000 deep,
-- a 5,000-digit number) fails that job alone, where psycopg's loaders would fail the fetch of the
-- whole batch after the claim committed.
-- The arrays are sent in binary (%(name)b): psycopg's text dump of a list runs a regex per
-- element, ~8% of a drain's worker CPU; binary is 4x cheaper. %(done_results)s holds each
-- success's result as JSON text, or is NULL when none returned anything (unnest pads it).
-- A success someone waits for (wait_notify, set by app.jobs.wait) is announced by the
-- jobs_notify_done trigger (migration 0013); a drain nobody waits on sends no NOTIFY.
WITH finished AS (
    /* include: complete_jobs */
), picked AS MATERIALIZED (
    SELECT id FROM {schema}.jobs j
    WHERE status IN ('queued', 'failed') AND run_at <= now() /* in_queues */
      AND flow_key IS NULL
      AND (%(tasks)s::text[] IS NULL OR task = ANY (%(tasks)s::text[]))
      AND NOT EXISTS (SELECT FROM {schema}.queues q WHERE q.name = j.queue AND q.holds_claims)
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), claimed AS (
    /* include: lease_picked */
)
SELECT * FROM claimed FULL JOIN (SELECT array_agg(id) AS written FROM finished) w ON false;

-- fragment: complete_jobs
-- The one place a job is written succeeded: the successes %(done_ids)b with their lease tokens
-- and results (claim_jobs carries them; complete_jobs writes them alone). Fenced by the token:
-- an attempt that lost its lease (reaped, cancelled, retried by an operator) matches nothing and
-- overwrites nothing. No history row: the job row records its final attempt.
UPDATE {schema}.jobs j
SET status = 'succeeded', finished_at = now(), progress = 100, result = o.result::jsonb,
    locked_until = NULL, lease_token = NULL, updated_at = now()
FROM unnest(%(done_ids)b::bigint[], %(done_tokens)b::uuid[], %(done_results)b::text[])
    AS o(id, token, result)
WHERE j.id = o.id AND j.lease_token = o.token
RETURNING j.id

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
          j.metadata::text AS metadata, j.flow_key

-- name: complete_jobs
-- Write successes that no claim carries (a worker claiming nothing; a handler's transaction(),
-- in its own transaction): the ids written in `written`.
WITH finished AS (
    /* include: complete_jobs */
)
SELECT array_agg(id) AS written FROM finished;

-- name: finish_jobs
-- Record the outcomes of many attempts that did not succeed in one statement, with a history row
-- each (successes are written by the complete_jobs fragment, which claim_jobs carries).
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
), finished AS (
    UPDATE {schema}.jobs j
    SET status = CASE
            WHEN o.outcome = 'cancelled' THEN 'cancelled'
            WHEN o.snoozing AND j.snoozes < o.cap THEN 'queued'
            WHEN o.outcome IN ('dead', 'snoozed') OR j.attempts >= j.max_attempts THEN 'dead'
            ELSE 'failed' END,
        attempts = CASE WHEN o.snoozing AND j.snoozes < o.cap
                        THEN j.attempts - 1 ELSE j.attempts END,
        snoozes = CASE WHEN o.snoozing AND NOT o.uncounted AND j.snoozes < o.cap
                       THEN j.snoozes + 1 ELSE j.snoozes END,
        run_at = CASE
            WHEN (o.outcome = 'failed' AND j.attempts < j.max_attempts)
                 OR (o.snoozing AND j.snoozes < o.cap)
            THEN now() + make_interval(secs => o.retry_in)
            ELSE j.run_at END,
        finished_at = CASE
            WHEN (o.outcome = 'failed' AND j.attempts < j.max_attempts)
                 OR (o.snoozing AND j.snoozes < o.cap) THEN NULL
            ELSE now() END,
        last_error = CASE
            WHEN o.snoozing AND j.snoozes < o.cap THEN j.last_error
            WHEN o.snoozing
                THEN format('snoozed %%s times: the task allows %%s (max_snoozes)',
                            j.snoozes + 1, o.snooze_cap)
            ELSE o.error END,
        error_type = CASE
            WHEN o.snoozing AND j.snoozes < o.cap THEN j.error_type
            WHEN o.snoozing THEN 'SnoozeLimit'
            ELSE o.error_type END,
        locked_by = NULL,
        locked_until = NULL, lease_token = NULL, updated_at = now()
    FROM outcome o
    WHERE j.id = o.id AND j.lease_token = o.token
    RETURNING j.id, j.status, j.attempts, j.started_at, j.run_at, j.last_error,
              j.error_type, o.snoozing, o.error, o.error_type AS given_type, o.traceback
), history AS (
    INSERT INTO {schema}.job_attempts
        (job_id, attempt, worker, started_at, outcome, error, error_type, traceback)
    SELECT id,
           CASE WHEN status = 'queued' THEN attempts + 1 ELSE attempts END,
           %(worker)s, started_at,
           CASE WHEN status = 'queued' THEN 'snoozed' ELSE status END,
           CASE WHEN snoozing AND status = 'dead' THEN last_error ELSE error END,
           CASE WHEN snoozing AND status = 'dead' THEN error_type ELSE given_type END,
           traceback
    FROM finished
)
SELECT id, status, run_at FROM finished;

-- name: heartbeat_jobs
-- Extend the leases of the attempts a worker still holds, store their progress, and mark the
-- worker seen, with the handlers it runs past their timeout (%(overruns)s, NULL: none).
-- Attempts (tokens) missing from the result have lost their lease.
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
    UPDATE {schema}.workers SET last_seen_at = now(), overruns = %(overruns)s::jsonb
    WHERE id = %(worker)s
)
SELECT id, lease_token FROM renewed;

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

-- name: reap_expired_jobs
-- Make jobs whose lease ran out (worker killed, host gone) claimable again, or dead when their
-- attempts are used up. SKIP LOCKED lets every worker run this without queueing behind another.
WITH expired AS MATERIALIZED (
    SELECT id, locked_by, locked_until FROM {schema}.jobs
    WHERE status = 'running' AND locked_until < now()
    ORDER BY locked_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), reaped AS (
    UPDATE {schema}.jobs j
    SET status = CASE WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'failed' END,
        run_at = now(),
        finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
        last_error = format('lease expired at %%s: worker %%s stopped renewing it',
                            e.locked_until, e.locked_by),
        error_type = 'LeaseExpired',
        locked_by = NULL, locked_until = NULL, lease_token = NULL, updated_at = now()
    FROM expired e
    WHERE j.id = e.id
    RETURNING j.id, j.queue, j.status, j.attempts, j.started_at, j.last_error, e.locked_by
), history AS (
    INSERT INTO {schema}.job_attempts
        (job_id, attempt, worker, started_at, outcome, error, error_type)
    SELECT id, attempts, locked_by, started_at, 'lost', last_error, 'LeaseExpired' FROM reaped
), notified AS (
    SELECT pg_notify(%(channel)s, queue)
    FROM (SELECT DISTINCT queue FROM reaped WHERE status = 'failed') q
)
SELECT r.id, r.status FROM reaped r, (SELECT count(*) FROM notified) n;

-- name: limit_idle_transaction
-- In transaction(), just before finish_jobs: from then until COMMIT the job's row is locked, out
-- of the reapers' reach (SKIP LOCKED). A worker frozen there (SIGSTOP, a VM pause, a partition)
-- would hold its job past its lease; with this the server ends the session once it has idled a
-- lease, rolling back: the job is reaped and runs elsewhere, the frozen attempt's COMMIT fails.
-- Local to the transaction (so through a transaction pooler too).
SELECT set_config('idle_in_transaction_session_timeout', %(milliseconds)s, true);

-- name: holds_lease
-- Whether this attempt still holds its job's lease (one primary-key probe): an effect or a
-- transaction() must not start for an attempt whose job another attempt may own by now.
SELECT EXISTS (SELECT FROM {schema}.jobs WHERE id = %(id)s AND lease_token = %(token)s) AS held;

-- name: get_job
-- One job by id.
SELECT * FROM {schema}.jobs WHERE id = %(id)s;

-- name: list_jobs
-- Newest first, optionally filtered; for operators, not the hot path.
SELECT * FROM {schema}.jobs
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: list_job_attempts
-- Every ended attempt of one job, oldest first: the history rows, and a succeeded job's final
-- attempt, which its own row records (claim_jobs writes no history row for a success).
SELECT job_id, attempt, worker, started_at, finished_at, outcome, error, error_type, traceback
FROM {schema}.job_attempts WHERE job_id = %(id)s
UNION ALL
SELECT id, attempts, locked_by, started_at, finished_at, 'succeeded', NULL, NULL, NULL
FROM {schema}.jobs WHERE id = %(id)s AND status = 'succeeded'
ORDER BY attempt, finished_at;

-- name: retry_job
-- Run a job again now: any state but running or pending (a pending job waits for its parents;
-- resolve_dependents, migration 0012, puts back the dependents a failed job's end cancelled).
-- max_attempts grows so the retry is not immediately dead. A succeeded job's final attempt, recorded by its row until now, is written to
-- the history first. Notifies so an idle worker picks it up at once.
WITH target AS (
    SELECT id, status, attempts, locked_by, started_at, finished_at FROM {schema}.jobs
    WHERE id = %(id)s AND status NOT IN ('running', 'pending')
    FOR UPDATE
), history AS (
    INSERT INTO {schema}.job_attempts (job_id, attempt, worker, started_at, finished_at, outcome)
    SELECT id, attempts, locked_by, started_at, finished_at, 'succeeded' FROM target
    WHERE status = 'succeeded'
), retried AS (
    UPDATE {schema}.jobs j
    SET status = 'queued', run_at = now(),
        max_attempts = GREATEST(j.max_attempts, j.attempts + 1),
        finished_at = NULL, locked_by = NULL, locked_until = NULL, lease_token = NULL,
        updated_at = now()
    FROM target t
    WHERE j.id = t.id
    RETURNING j.*
), notified AS (
    SELECT pg_notify(%(channel)s, queue) FROM retried
)
SELECT r.* FROM retried r, (SELECT count(*) FROM notified) n;

-- name: cancel_job
-- Cancel a waiting or running job. A running attempt's later completion is fenced out; its
-- worker notices at the next heartbeat (current_job().is_cancelled() turns true).
WITH target AS (
    SELECT id, status, attempts, locked_by, started_at FROM {schema}.jobs
    WHERE id = %(id)s
    FOR UPDATE
), cancelled AS (
    UPDATE {schema}.jobs j
    SET status = 'cancelled', finished_at = now(), locked_by = NULL, locked_until = NULL,
        lease_token = NULL, updated_at = now()
    FROM target t
    WHERE j.id = t.id AND t.status IN ('pending', 'queued', 'failed', 'running')
    RETURNING j.*
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
-- Counts per queue and status, for the CLI and the demo.
SELECT queue, status, count(*) AS count FROM {schema}.jobs GROUP BY queue, status
ORDER BY queue, status;

-- name: watch_job
-- A caller of app.jobs.wait: mark the job so that its final state is announced on
-- {done_channel}, and read it (a job already final is the answer).
UPDATE {schema}.jobs SET wait_notify = true WHERE id = %(id)s
RETURNING *;
