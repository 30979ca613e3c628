-- 0011: flow control (issue 14): global concurrency and rate limits per task, key and queue;
-- handlers that snooze, cancel or give up on their job; results; unique per period.
--
-- A limited job carries its scope in flow_key and is claimed only by claim_flow_jobs
-- (db/sql/flow.sql), which holds a transaction-level advisory lock per scope while it counts the
-- scope's running jobs on a fresh snapshot: no counter to keep in step, so nothing to release
-- when an attempt ends and nothing to drift when a worker dies. The unlimited claim keeps its
-- statement and its index walk: its indexes leave limited jobs out.
ALTER TABLE {schema}.jobs
    ADD COLUMN flow_key text,
    ADD COLUMN result jsonb,
    ADD COLUMN snoozes integer NOT NULL DEFAULT 0 CHECK (snoozes >= 0),
    ADD COLUMN wait_notify boolean NOT NULL DEFAULT false,
    ADD COLUMN unique_for_key text;

-- The claim indexes again, without limited jobs: a backlog of one full key is never walked by
-- the unlimited claim. Rebuilt in the migration's transaction (writes wait for it, as for any
-- migration); an empty or small table takes milliseconds.
DROP INDEX {schema}.jobs_due_idx;
CREATE INDEX jobs_due_idx ON {schema}.jobs (priority, run_at, id)
    WHERE status IN ('queued', 'failed') AND flow_key IS NULL;
DROP INDEX {schema}.jobs_queue_due_idx;
CREATE INDEX jobs_queue_due_idx ON {schema}.jobs (queue, priority, run_at, id)
    WHERE status IN ('queued', 'failed') AND flow_key IS NULL;

-- Limited jobs by scope: claim_flow_jobs steps from one scope to the next (a skip scan) and
-- takes each one's first due jobs, so a full scope's backlog costs one probe, not a walk.
CREATE INDEX jobs_flow_due_idx ON {schema}.jobs (flow_key, priority, run_at, id)
    WHERE status IN ('queued', 'failed') AND flow_key IS NOT NULL;

-- One job per task, key and period window, in any state but cancelled (cancelling frees it).
CREATE UNIQUE INDEX jobs_unique_for_idx ON {schema}.jobs (unique_for_key)
    WHERE unique_for_key IS NOT NULL AND status <> 'cancelled';

-- A snoozed attempt is recorded in the history too.
ALTER TABLE {schema}.job_attempts DROP CONSTRAINT job_attempts_outcome_check;
ALTER TABLE {schema}.job_attempts ADD CONSTRAINT job_attempts_outcome_check
    CHECK (outcome IN ('succeeded', 'failed', 'dead', 'lost', 'released', 'cancelled', 'snoozed'));

-- Limits of queues, set by operators (app.queues.set_limit / set_rate, the CLI, the dashboard).
ALTER TABLE {schema}.queues
    ADD COLUMN max_running integer CHECK (max_running >= 0),
    ADD COLUMN rate_n integer CHECK (rate_n > 0),
    ADD COLUMN rate_period interval CHECK (rate_period > interval '0');
-- What the plain claim tests, in one column: `q.is_paused OR q.max_running IS NOT NULL OR ...`
-- in its anti-join made the planner (which knows nothing of this small table) expect almost
-- every job to be filtered out, and sort the waiting jobs instead of walking jobs_due_idx.
ALTER TABLE {schema}.queues ADD COLUMN holds_claims boolean NOT NULL
    GENERATED ALWAYS AS (is_paused OR max_running IS NOT NULL OR rate_n IS NOT NULL) STORED;

-- Limits of tasks (written by each worker at start from its code: the last one started wins) and
-- the start log of every rate-limited scope.
CREATE TABLE {schema}.flow_limits (
    scope           text        PRIMARY KEY,
    max_running     integer     CHECK (max_running >= 0),
    rate_n          integer     CHECK (rate_n > 0),
    rate_period     interval    CHECK (rate_period > interval '0'),
    key_max_running integer     CHECK (key_max_running >= 0),
    key_rate_n      integer     CHECK (key_rate_n > 0),
    key_rate_period interval    CHECK (key_rate_period > interval '0'),
    starts          timestamptz[] NOT NULL DEFAULT '{{}}',
    updated_at      timestamptz NOT NULL DEFAULT now()
);

COMMENT ON COLUMN {schema}.jobs.flow_key IS
    'The limit scope of a limited job: ''key:<task>|<key>'' (concurrency_key) or ''task:<task>'' (global_concurrency, rate_limit); NULL for an unlimited job, which the plain claim takes. Set at defer.';
COMMENT ON COLUMN {schema}.jobs.result IS
    'What the handler returned (JSON), NULL for None; shown by jobs show and the dashboard, returned by app.jobs.wait.';
COMMENT ON COLUMN {schema}.jobs.snoozes IS
    'How many times the handler raised Snooze: each one put the job back without counting an attempt.';
COMMENT ON COLUMN {schema}.jobs.wait_notify IS
    'True once someone waits for the job (app.jobs.wait): its final state is announced with NOTIFY; other jobs finish without one.';
COMMENT ON COLUMN {schema}.jobs.unique_for_key IS
    'Task, key and period window of a unique_for job (one per window, jobs_unique_for_idx); NULL otherwise.';
COMMENT ON INDEX {schema}.jobs_due_idx IS
    'The claim index: waiting (queued, failed) unlimited jobs in claim order, so a claim walks it and stops after LIMIT rows. Partial, so finished and limited rows do not grow it.';
COMMENT ON INDEX {schema}.jobs_queue_due_idx IS
    'As jobs_due_idx, per queue: claims of workers restricted to some queues (claim_jobs_in_queues), and the jobs of a limited queue (claim_flow_jobs).';
COMMENT ON INDEX {schema}.jobs_flow_due_idx IS
    'Waiting limited jobs by scope, then claim order: claim_flow_jobs skips from scope to scope.';
COMMENT ON INDEX {schema}.jobs_unique_for_idx IS
    'Enforces one job per task, key and period window (unique_for) in any state but cancelled.';
COMMENT ON COLUMN {schema}.queues.max_running IS
    'At most this many running jobs of the queue across all workers; NULL: no limit.';
COMMENT ON COLUMN {schema}.queues.rate_n IS
    'At most rate_n starts of the queue''s jobs in any window of rate_period; NULL: no rate limit.';
COMMENT ON COLUMN {schema}.queues.rate_period IS
    'The window of rate_n.';
COMMENT ON COLUMN {schema}.queues.holds_claims IS
    'Paused or limited (generated): the plain claim skips the queue; claim_flow_jobs takes a limited queue''s jobs.';
COMMENT ON TABLE {schema}.flow_limits IS
    'Limits of tasks (scope ''task:<name>'', written by workers at start from their code) and the start log of each rate-limited scope (''task:'', ''queue:'', ''key:''). Read and written by claim_flow_jobs under the scope''s advisory lock.';
COMMENT ON COLUMN {schema}.flow_limits.scope IS
    '''task:<task>'', ''queue:<queue>'' or ''key:<task>|<key>''.';
COMMENT ON COLUMN {schema}.flow_limits.max_running IS
    'A task''s global_concurrency: at most this many of its jobs running across all workers.';
COMMENT ON COLUMN {schema}.flow_limits.rate_n IS
    'A task''s rate_limit (when it has no concurrency_key): at most rate_n starts in any window of rate_period.';
COMMENT ON COLUMN {schema}.flow_limits.rate_period IS
    'The window of rate_n.';
COMMENT ON COLUMN {schema}.flow_limits.key_max_running IS
    'A task''s key_concurrency: at most this many running jobs per concurrency key.';
COMMENT ON COLUMN {schema}.flow_limits.key_rate_n IS
    'A task''s rate_limit per concurrency key: at most key_rate_n starts per key in any window of key_rate_period.';
COMMENT ON COLUMN {schema}.flow_limits.key_rate_period IS
    'The window of key_rate_n.';
COMMENT ON COLUMN {schema}.flow_limits.starts IS
    'The scope''s most recent start times, newest first, at most its rate''s n: a claim admits a job only while fewer than n of them fall in the last period.';
COMMENT ON COLUMN {schema}.flow_limits.updated_at IS
    'When a worker or a claim last wrote the row; idle key rows are pruned by it.';
COMMENT ON COLUMN {schema}.job_attempts.outcome IS
    'failed: the handler raised, a retry follows; dead: failed and gave up; lost: lease expired (worker killed or stalled); released: handed back by a stopping worker, not counted; cancelled: cancelled while running, or the handler raised Cancel; snoozed: the handler raised Snooze, the job waits again and the attempt is not counted; succeeded: copied from the job row when an operator retried a succeeded job.';
