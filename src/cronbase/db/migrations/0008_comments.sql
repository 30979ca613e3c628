-- 0008: the schema explains itself. A COMMENT on every table and column (and on each index whose
-- purpose is not obvious), written for an operator or DBA reading `\d+`. The meanings come from
-- db/sql/*.sql, which writes these columns; keep the two in step. tests/integration/
-- test_schema_comments.py fails for any column without a comment, so a migration that adds a
-- column comments it too. Quotes inside comments are doubled (SQL) and braces too (templates).

-- migrations (created by db/migrate.py itself, before the first migration runs)
COMMENT ON TABLE {schema}.migrations IS
    'Applied migrations, one row each, written by the migration runner (db/migrate.py, cronbase migrate) under an advisory lock; never edit by hand. The highest version is the schema version workers check at start.';
COMMENT ON COLUMN {schema}.migrations.version IS
    'The migration number NNNN of db/migrations/NNNN_name.sql; versions run 1, 2, 3... with no gaps.';
COMMENT ON COLUMN {schema}.migrations.name IS
    'The name part of the migration file (such as initial for 0001_initial.sql).';
COMMENT ON COLUMN {schema}.migrations.applied_at IS
    'When the migration was applied (in the same transaction as its changes).';

-- jobs
COMMENT ON TABLE {schema}.jobs IS
    'One row per job (a call of a task): waiting, running, or finished until retention deletes it. A succeeded job''s final attempt is recorded by this row itself (attempts, locked_by, started_at, finished_at), not by a job_attempts row (migration 0006).';
COMMENT ON COLUMN {schema}.jobs.id IS
    'Job id (identity). job_attempts.job_id references it; effects.job_id and audit_log targets name it without a foreign key.';
COMMENT ON COLUMN {schema}.jobs.task IS
    'Name of the registered task (the @app.task name) whose handler runs the job.';
COMMENT ON COLUMN {schema}.jobs.queue IS
    'Queue name (default ''default''). Workers started with a list of queues claim only from those; a queue paused in the queues table is skipped by every claim.';
COMMENT ON COLUMN {schema}.jobs.payload IS
    'The handler''s keyword arguments, a JSON object; jobs made by a schedule also carry scheduled_at, their slot time in ISO 8601.';
COMMENT ON COLUMN {schema}.jobs.status IS
    'queued: waiting for run_at (new, released by a stopping worker, or retried by an operator); running: leased by a worker (lease_token set); failed: an attempt failed, retried at run_at; succeeded; dead: gave up (attempts used up, or a failure retrying cannot fix, such as a payload the handler cannot take); cancelled: by an operator. Claims pick only queued and failed jobs whose run_at has come.';
COMMENT ON COLUMN {schema}.jobs.priority IS
    'Lower runs first: due jobs are claimed in (priority, run_at, id) order, so priority outranks age. Default 100, range -32768..32767.';
COMMENT ON COLUMN {schema}.jobs.run_at IS
    'When the job becomes due (claimable): set at insert (run_at, or now plus delay), moved to the retry time by a failed attempt, and to now when an attempt is released or reaped or an operator retries the job.';
COMMENT ON COLUMN {schema}.jobs.attempts IS
    'Attempts started so far: each claim adds 1; an attempt handed back by a stopping worker (release) is taken off again. Never negative.';
COMMENT ON COLUMN {schema}.jobs.max_attempts IS
    'Attempts allowed: a failure (or lost lease) with attempts >= max_attempts makes the job dead. An operator retry raises it to attempts + 1 when needed. At least 1, default 20.';
COMMENT ON COLUMN {schema}.jobs.lease IS
    'How long one claim holds the job without a heartbeat: a claim and each heartbeat set locked_until to now() + lease, and the worker renews at least every third of it. Default 60 seconds.';
COMMENT ON COLUMN {schema}.jobs.locked_by IS
    'While running: the id (workers.id) of the worker holding the lease. After a success: the worker that ran the final attempt. NULL in every other status.';
COMMENT ON COLUMN {schema}.jobs.locked_until IS
    'When the running attempt''s lease expires unless a heartbeat renews it; NULL unless running. Past it the lease reaper makes the job failed (or dead) and records a lost attempt.';
COMMENT ON COLUMN {schema}.jobs.lease_token IS
    'A random UUID made by each claim; set only while the job is running (CHECK jobs_lease_token_iff_running). Completion, heartbeat and release must present it: this fences out an attempt that lost its lease (reaped, cancelled, retried), so it can never overwrite a newer attempt.';
COMMENT ON COLUMN {schema}.jobs.idempotency_key IS
    'Caller''s key: at most one job ever per key (until the job is pruned); enqueueing again returns the existing job. Schedules use schedule:<key>@<slot UTC>.';
COMMENT ON COLUMN {schema}.jobs.dedupe_key IS
    'Caller''s key: at most one queued, failed or running job per key; once that job ends the key is free again. With on_duplicate=replace a waiting job gets the new payload, priority and run_at.';
COMMENT ON COLUMN {schema}.jobs.progress IS
    'Percent done (0 to 100) last reported by the handler, stored with the next heartbeat; 100 on success; NULL until reported. Not reset when a new attempt starts.';
COMMENT ON COLUMN {schema}.jobs.stage IS
    'Free-text label of what the handler is doing, reported with progress (set_progress(stage=...)) and stored with the next heartbeat; NULL until reported.';
COMMENT ON COLUMN {schema}.jobs.last_error IS
    'Message (Type: text, at most 2000 characters) of the latest attempt that failed or lost its lease; kept after a later success. The full history is in job_attempts.';
COMMENT ON COLUMN {schema}.jobs.error_type IS
    'Exception class of last_error (module.QualName; builtins without module), or LeaseExpired when the lease reaper ended the attempt.';
COMMENT ON COLUMN {schema}.jobs.started_at IS
    'When the latest attempt was claimed; NULL until the first claim.';
COMMENT ON COLUMN {schema}.jobs.created_at IS
    'When the job was inserted.';
COMMENT ON COLUMN {schema}.jobs.updated_at IS
    'When a cronbase statement last changed the row (claim, heartbeat, outcome, operator action).';
COMMENT ON COLUMN {schema}.jobs.finished_at IS
    'When the job reached a final status (succeeded, dead, cancelled); NULL while waiting or running, cleared by an operator retry. Retention deletes finished jobs by it.';

COMMENT ON INDEX {schema}.jobs_due_idx IS
    'The claim index: waiting (queued, failed) jobs in claim order, so a claim walks it and stops after LIMIT rows. Partial, so finished rows do not grow it.';
COMMENT ON INDEX {schema}.jobs_queue_due_idx IS
    'As jobs_due_idx, per queue: claims of workers restricted to some queues (claim_jobs_in_queues).';
COMMENT ON INDEX {schema}.jobs_running_lease_idx IS
    'Running jobs by lease expiry, for the lease reaper (reap_expired_jobs).';
COMMENT ON INDEX {schema}.jobs_idempotency_key_idx IS
    'Enforces at most one job per idempotency_key among the rows kept (a key is free again once its job is pruned); schedules rely on it for one job per slot.';
COMMENT ON INDEX {schema}.jobs_dedupe_key_idx IS
    'Enforces at most one queued, failed or running job per dedupe_key; the ON CONFLICT target of on_duplicate=replace.';
COMMENT ON INDEX {schema}.jobs_status_finished_idx IS
    'Finished jobs by status and end time: retention pruning, and the succeeded jobs counted in throughput per minute.';

-- job_attempts
COMMENT ON TABLE {schema}.job_attempts IS
    'History of ended attempts, one row each, written when the attempt ends (or is found lost) and never updated; deleted with its job. A success writes no row: the job row records its final attempt (migration 0006), and a succeeded row appears only when an operator retries a succeeded job.';
COMMENT ON COLUMN {schema}.job_attempts.id IS
    'Row id (identity).';
COMMENT ON COLUMN {schema}.job_attempts.job_id IS
    'The job (jobs.id); ON DELETE CASCADE, so pruning a job deletes its history.';
COMMENT ON COLUMN {schema}.job_attempts.attempt IS
    'Attempt number, from 1 (jobs.attempts when it ran). A released attempt is not counted, so the next attempt reuses its number.';
COMMENT ON COLUMN {schema}.job_attempts.worker IS
    'Id (workers.id) of the worker that ran the attempt; NULL when unknown.';
COMMENT ON COLUMN {schema}.job_attempts.started_at IS
    'When the attempt was claimed; NULL when unknown.';
COMMENT ON COLUMN {schema}.job_attempts.finished_at IS
    'When the attempt ended; for a lost attempt, when the lease reaper found its lease expired (the error says when it expired).';
COMMENT ON COLUMN {schema}.job_attempts.outcome IS
    'failed: the handler raised, a retry follows; dead: failed and gave up; lost: lease expired (worker killed or stalled); released: handed back by a stopping worker, not counted; cancelled: cancelled while running; succeeded: copied from the job row when an operator retried a succeeded job.';
COMMENT ON COLUMN {schema}.job_attempts.error IS
    'Error message (Type: text, at most 2000 characters); for lost, released and cancelled attempts, a sentence saying so.';
COMMENT ON COLUMN {schema}.job_attempts.error_type IS
    'Exception class (module.QualName; builtins without module), LeaseExpired for lost, Cancelled for cancelled; NULL for released and succeeded.';
COMMENT ON COLUMN {schema}.job_attempts.traceback IS
    'Python traceback of the failure, its last 8000 characters; NULL when the attempt did not end in the handler (lost, released, cancelled).';

COMMENT ON INDEX {schema}.job_attempts_job_idx IS
    'A job''s attempts in order (list_job_attempts), and the cascade when a job is deleted.';
COMMENT ON INDEX {schema}.job_attempts_finished_idx IS
    'Attempts by end time, for throughput per minute over the last hour.';

-- workers
COMMENT ON TABLE {schema}.workers IS
    'Worker processes, for operators: a row is inserted when a worker starts, renewed by its heartbeats, and deleted when it stops cleanly. A killed worker''s row stays, its last_seen_at growing old; leases live in jobs (locked_by), not here.';
COMMENT ON COLUMN {schema}.workers.id IS
    'Worker id, unique per process start (by default hostname:pid:random hex); jobs.locked_by and job_attempts.worker name it.';
COMMENT ON COLUMN {schema}.workers.hostname IS
    'Host the worker runs on.';
COMMENT ON COLUMN {schema}.workers.pid IS
    'Operating-system process id of the worker on its host.';
COMMENT ON COLUMN {schema}.workers.queues IS
    'The queues the worker claims from, sorted; NULL means every queue.';
COMMENT ON COLUMN {schema}.workers.concurrency IS
    'How many jobs the worker runs at once, at most.';
COMMENT ON COLUMN {schema}.workers.started_at IS
    'When the worker registered (started).';
COMMENT ON COLUMN {schema}.workers.last_seen_at IS
    'Time of the worker''s last heartbeat, by the database clock: every 10 seconds when idle, and at least every third of the shortest lease it holds when busy.';

-- schedules
COMMENT ON TABLE {schema}.schedules IS
    'Recurring jobs: one row per schedule, declared in code (@app.periodic, upserted at worker start) or added at run time. A scheduler tick turns each due slot into an ordinary job with idempotency_key schedule:<key>@<slot UTC>, so one job per slot exists however many processes tick.';
COMMENT ON COLUMN {schema}.schedules.key IS
    'Schedule name (by default the task name); part of every slot job''s idempotency_key.';
COMMENT ON COLUMN {schema}.schedules.task IS
    'Name of the task each slot runs; a ticker fires only schedules of tasks it has registered.';
COMMENT ON COLUMN {schema}.schedules.payload IS
    'JSON object given to each slot''s job, which also gets scheduled_at, the slot time.';
COMMENT ON COLUMN {schema}.schedules.queue IS
    'Queue of the slot jobs; NULL: the task''s own queue.';
COMMENT ON COLUMN {schema}.schedules.cron IS
    'Cron expression: five fields, or six with leading seconds, or an alias such as @daily; read in tz.';
COMMENT ON COLUMN {schema}.schedules.tz IS
    'IANA time zone the cron expression is read in (default UTC); across DST changes fire times follow Debian cron.';
COMMENT ON COLUMN {schema}.schedules.catch_up IS
    'Which due slots a tick fires after missing some (an outage): latest fires only the newest; all fires them all, at most max_catch_up; none fires a slot only when it is the one slot due.';
COMMENT ON COLUMN {schema}.schedules.max_catch_up IS
    'Most slots one tick fires under catch_up = all (the newest ones); at least 1, default 100.';
COMMENT ON COLUMN {schema}.schedules.is_paused IS
    'A paused schedule fires nothing; on resume next_fire_at moves to the first slot after now, so slots passed while paused never run.';
COMMENT ON COLUMN {schema}.schedules.source IS
    'code: declared with @app.periodic and upserted at each worker start; runtime: added with app.schedules.add.';
COMMENT ON COLUMN {schema}.schedules.last_fired_at IS
    'The newest slot fired (the slot time, not when the tick ran); NULL until a slot fires.';
COMMENT ON COLUMN {schema}.schedules.next_fire_at IS
    'The next slot not yet fired: a tick fires the slots from it to now (per catch_up) and moves it past now. Kept when a schedule is re-declared with the same cron and tz.';
COMMENT ON COLUMN {schema}.schedules.created_at IS
    'When the schedule was first written.';
COMMENT ON COLUMN {schema}.schedules.updated_at IS
    'When the schedule last changed (redefined, paused, resumed, or advanced by a tick).';

COMMENT ON INDEX {schema}.schedules_due_idx IS
    'Unpaused schedules by next slot: what a scheduler tick locks (lock_due_schedules).';

-- effects
COMMENT ON TABLE {schema}.effects IS
    'The effects ledger behind app.effects.once(): one row per side effect, keyed by its business meaning, so it happens once even when its job runs twice. Not pruned with jobs; app.effects.forget deletes a row so the effect can happen again.';
COMMENT ON COLUMN {schema}.effects.key IS
    'What the effect means, chosen by the caller (such as monthly_report:2026-10:ana@example.com).';
COMMENT ON COLUMN {schema}.effects.status IS
    'processing: an owner is performing it (stale, and open to takeover, after the caller''s stale_after); done: it happened, result says what; failed: the block raised, and the next caller takes it over.';
COMMENT ON COLUMN {schema}.effects.owner IS
    'Token of the current owner, fresh for each entry into once(); every write after the first is a compare-and-set on it, so two callers never both own the effect.';
COMMENT ON COLUMN {schema}.effects.job_id IS
    'The job (jobs.id) whose handler entered as the current owner; NULL outside a job. No foreign key: pruning the job must not forget that its effect happened.';
COMMENT ON COLUMN {schema}.effects.attempt IS
    'That job''s attempt number; NULL outside a job.';
COMMENT ON COLUMN {schema}.effects.started_at IS
    'When the current owner entered (a takeover resets it); a processing row older than the caller''s stale_after is stale.';
COMMENT ON COLUMN {schema}.effects.finished_at IS
    'When it became done or failed; NULL while processing.';
COMMENT ON COLUMN {schema}.effects.result IS
    'JSON object the owner recorded (empty when it recorded nothing), or what reconcile reported; NULL unless done.';
COMMENT ON COLUMN {schema}.effects.error IS
    'Type: message of the exception that made it fail (at most 2000 characters); NULL unless failed.';
COMMENT ON COLUMN {schema}.effects.takeovers IS
    'How many times a caller took it over from a failed or stale owner, or reconciled it.';
COMMENT ON COLUMN {schema}.effects.reconciled IS
    'True when a stale effect was marked done because reconcile said it had happened, rather than by its owner.';
COMMENT ON COLUMN {schema}.effects.created_at IS
    'When the effect was first entered.';
COMMENT ON COLUMN {schema}.effects.updated_at IS
    'When the row last changed.';

COMMENT ON INDEX {schema}.effects_status_idx IS
    'Effects of one status, most recently changed first (app.effects.list, cronbase effects).';

-- queues
COMMENT ON TABLE {schema}.queues IS
    'Queue pauses: a row exists once the queue was first paused (and stays when it is resumed). Every claim skips a queue whose row has is_paused; a queue with no row is not paused.';
COMMENT ON COLUMN {schema}.queues.name IS
    'Queue name, as in jobs.queue.';
COMMENT ON COLUMN {schema}.queues.is_paused IS
    'True: workers claim no jobs from the queue; running jobs finish, and new jobs can still be enqueued and wait.';
COMMENT ON COLUMN {schema}.queues.paused_at IS
    'When the queue was paused; NULL when not paused.';
COMMENT ON COLUMN {schema}.queues.paused_by IS
    'Who paused it (the actor, as in audit_log.actor; api from the library by default); NULL when not paused.';
COMMENT ON COLUMN {schema}.queues.updated_at IS
    'When the row last changed (paused or resumed).';

-- audit_log
COMMENT ON TABLE {schema}.audit_log IS
    'Operator actions, recorded by the dashboard and the command line (or app.audit.record): who did what to what, and when. Append-only: rows are never updated.';
COMMENT ON COLUMN {schema}.audit_log.id IS
    'Row id (identity); orders entries made at the same time.';
COMMENT ON COLUMN {schema}.audit_log.at IS
    'When the action was recorded (just after it was done).';
COMMENT ON COLUMN {schema}.audit_log.actor IS
    'Who: cli:user@host from the command line; from the dashboard, the basic-auth user, token@client ip, or dashboard@client ip.';
COMMENT ON COLUMN {schema}.audit_log.action IS
    'What was done: a short action name, such as a retry, a cancel or a queue pause.';
COMMENT ON COLUMN {schema}.audit_log.target IS
    'What it was done to: text naming a job, queue, schedule or task, or the scope of a bulk action.';
COMMENT ON COLUMN {schema}.audit_log.detail IS
    'JSON object of facts about the action, such as the job ids requeued or the rows pruned; empty when there are none.';

COMMENT ON INDEX {schema}.audit_log_at_idx IS
    'The audit log newest first (list_audit).';
