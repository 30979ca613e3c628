-- 0024: work a queue from any language (issue 38, part 3; docs/reference/sql.md): a Node, Go or
-- Rails process registers as a worker, claims jobs of its own tasks, renews their leases, and
-- writes each outcome as Python's worker writes it:
--     register_worker; then, in a loop: claim, run each job (renew meanwhile), complete or
--     fail; as it stops: release what it still holds, unregister_worker
-- Each function is the Python worker's statement for one worker (db/sql/jobs.sql, workers.sql),
-- with the same claim (claim_tickets: leases, tickets, fencing), the same rows written, and the
-- same lease token as the fence: an attempt that lost its lease (reaped, retried or cancelled by
-- an operator) writes nothing. tests/integration/test_sql_worker.py runs twins, one job ended by
-- Python's statements and one by these, and compares what they leave.
--
-- What these do not do, and a Python worker does: reap expired leases (reap_expired_jobs, each
-- Python worker's reaper; a killed Node worker's jobs wait for it), retention, schedules, and the
-- claims of flow-limited queues and fair keys (claim_flow_jobs, claim_fair_jobs: claim_tickets
-- passes a queue that holds_claims, so these never take such a job).
--
-- Checks refuse with a message naming the bad value, SQLSTATE 22023 (invalid_parameter_value), as
-- defer's (0023) do; a result too big, 54000 (program_limit_exceeded).

-- The worker's names: a task, optionally "task@N" (the jobs of version N >= 2 of it, as claims and
-- the workers table name them); NULL when every name is good, else the first bad one quoted.
CREATE FUNCTION {schema}.bad_name(names text[], versioned boolean) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(quote_literal(n), 'NULL')
    FROM unnest(names) WITH ORDINALITY AS u(n, i)
    WHERE n IS NULL OR length(split_part(n, '@', 1)) > 100
       OR n !~ CASE WHEN versioned THEN '^[A-Za-z0-9_][A-Za-z0-9_.:\-]*(@([2-9]|[1-9][0-9]{{1,2}}|1000))?$'
                    ELSE '^[A-Za-z0-9_][A-Za-z0-9_.:\-]*$' END
    ORDER BY i LIMIT 1
$$;

CREATE FUNCTION {schema}.register_worker(
    worker text,
    queues text[],
    tasks text[],
    hostname text DEFAULT NULL,
    pid integer DEFAULT NULL,
    concurrency integer DEFAULT 1
) RETURNS void
-- As the schema's owner, as defer (0023): a role of another language has EXECUTE on these
-- functions and no right on any table (`cronbase grants ROLE --interface`).
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    bad text;
BEGIN
    IF register_worker.worker IS NULL OR register_worker.worker !~ '^[[:print:]]{{1,200}}$' THEN
        RAISE EXCEPTION 'invalid worker id %: use 1 to 200 printable characters, unique per '
            'process start (e.g. host:pid:random)',
            coalesce(quote_literal(left(register_worker.worker, 60)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Tasks are required, where Python's NULL means "any task" (a worker of older code): a
    -- process of another language runs only the handlers it has, and claim_tickets' stray rule
    -- (a job of a task no live worker knows is parked) must know which those are, or a
    -- registered NULL would keep Python's orphaned jobs from ever being reported as unserved.
    IF cardinality(register_worker.tasks) IS NULL OR cardinality(register_worker.tasks) = 0 THEN
        RAISE EXCEPTION 'worker % must name its tasks (the handlers it has), got %',
            quote_literal(register_worker.worker), coalesce(register_worker.tasks::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    bad := {schema}.bad_name(register_worker.tasks, true);
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'invalid task name % for worker %: use 1 to 100 letters, digits and '
            '_ - . : (starting with a letter, a digit or _), "@N" for version N from 2 to 1000',
            bad, quote_literal(register_worker.worker)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Queues: NULL is every queue, as for a Python worker.
    bad := {schema}.bad_name(register_worker.queues, false);
    IF bad IS NOT NULL OR cardinality(register_worker.queues) = 0 THEN
        RAISE EXCEPTION 'invalid queue name % for worker %: use 1 to 100 letters, digits and '
            '_ - . : (starting with a letter, a digit or _); NULL for every queue',
            coalesce(bad, '(none given)'), quote_literal(register_worker.worker)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF register_worker.concurrency IS NULL OR register_worker.concurrency NOT BETWEEN 1 AND 1000
    THEN
        RAISE EXCEPTION 'concurrency of worker % must be from 1 to 1000, got %',
            quote_literal(register_worker.worker),
            coalesce(register_worker.concurrency::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- register_worker's row (db/sql/workers.sql): the Workers page shows it, and the stray rule
    -- reads its tasks. version 'sql' says what runs it; schema_version the newest migration whose
    -- functions it calls (a contract migration reads it). hostname: the client's address when not
    -- given; pid 0: unknown. Registered again under the same id (a restart that kept its id), the
    -- row is the new process's.
    INSERT INTO {schema}.workers AS w (id, hostname, pid, queues, concurrency, tasks, supervisor,
                                       version, schema_version, succeeded_jobs, failed_attempts)
    VALUES (register_worker.worker,
            coalesce(register_worker.hostname, host(inet_client_addr()), 'local'),
            coalesce(register_worker.pid, 0), register_worker.queues,
            register_worker.concurrency, register_worker.tasks, NULL, 'sql', 24, 0, 0)
    ON CONFLICT (id) DO UPDATE
    SET hostname = excluded.hostname, pid = excluded.pid, queues = excluded.queues,
        concurrency = excluded.concurrency, tasks = excluded.tasks, version = excluded.version,
        schema_version = excluded.schema_version, started_at = now(), last_seen_at = now(),
        succeeded_jobs = 0, failed_attempts = 0, overruns = NULL;
    -- unpark_jobs (db/sql/tickets.sql), as a Python worker does as it starts: jobs of its tasks
    -- that a claim parked while no live worker knew them are ready again.
    UPDATE {schema}.jobs j SET ready_xid = pg_current_xact_id()
    WHERE j.ready_xid IS NULL AND j.status IN ('queued', 'failed') AND j.flow_key IS NULL
      AND CASE WHEN j.task_version IS NULL THEN j.task ELSE j.task || '@' || j.task_version END
          = ANY (register_worker.tasks);
END
$$;

CREATE FUNCTION {schema}.unregister_worker(worker text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    -- unregister_worker: a clean stop removes the row (release what it holds first).
    DELETE FROM {schema}.workers w WHERE w.id = unregister_worker.worker
$$;

CREATE FUNCTION {schema}.claim(
    worker text,
    max_jobs integer,
    queues text[] DEFAULT NULL,
    tasks text[] DEFAULT NULL
) RETURNS TABLE (
    id bigint, task text, queue text, args jsonb, attempt integer, max_attempts integer,
    lease_token uuid, lease_expires_at timestamptz, metadata jsonb, task_version integer
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- As claim_tickets: the unpark below must probe jobs_parked_idx, never read jobs whole (a
-- sequential scan of a table the planner thinks small reads every dead row a held horizon keeps).
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    registered {schema}.workers;
    wanted_queues text[];
    wanted_tasks text[];
    bad text;
BEGIN
    IF claim.max_jobs IS NULL OR claim.max_jobs NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'max_jobs must be from 1 to 1000, got %',
            coalesce(claim.max_jobs::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO registered FROM {schema}.workers w WHERE w.id = claim.worker;
    IF NOT FOUND OR registered.tasks IS NULL THEN
        RAISE EXCEPTION 'worker % is not registered: call %.register_worker(worker, queues, '
            'tasks) first (a worker unregistered or pruned as gone registers again)',
            coalesce(quote_literal(claim.worker), 'NULL'), {schema_name}
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- NULL: what the worker registered. Given: some of those; a task it did not register would
    -- be parked by other claims' stray rule while it runs here, so it is refused.
    wanted_queues := coalesce(claim.queues, registered.queues);
    wanted_tasks := coalesce(claim.tasks, registered.tasks);
    bad := {schema}.bad_name(claim.queues, false);
    IF bad IS NOT NULL OR cardinality(claim.queues) = 0 THEN
        RAISE EXCEPTION 'invalid queue name % for worker %: use 1 to 100 letters, digits and '
            '_ - . : (starting with a letter, a digit or _); NULL for its registered queues',
            coalesce(bad, '(none given)'), quote_literal(claim.worker)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT coalesce(quote_literal(t), 'NULL') INTO bad
    FROM unnest(wanted_tasks) AS u(t) WHERE t IS NULL OR t <> ALL (registered.tasks) LIMIT 1;
    IF bad IS NOT NULL OR cardinality(wanted_tasks) = 0 THEN
        RAISE EXCEPTION 'worker % did not register task %: it registered %; register again '
            'with every task it runs', quote_literal(claim.worker),
            coalesce(bad, '(none given)'), array_to_string(registered.tasks, ', ')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Seen: a claim loop keeps its worker live for the stray rule and the Workers page, as a
    -- Python worker's heartbeat does; and, as that worker's reaper round does, the parked jobs of
    -- its tasks are made ready again (one probe of jobs_parked_idx when there are none).
    UPDATE {schema}.workers w SET last_seen_at = now() WHERE w.id = claim.worker;
    UPDATE {schema}.jobs j SET ready_xid = pg_current_xact_id()
    WHERE j.ready_xid IS NULL AND j.status IN ('queued', 'failed') AND j.flow_key IS NULL
      AND CASE WHEN j.task_version IS NULL THEN j.task ELSE j.task || '@' || j.task_version END
          = ANY (wanted_tasks);
    -- Python's claim (claim_jobs without successes to carry), its account row left out. The
    -- lease runs out at the claim's now() + the job's lease (locked_until); task_version 1 for a
    -- job deferred without one.
    RETURN QUERY
    SELECT c.id, c.task, c.queue, c.payload::jsonb, c.attempts, c.max_attempts, c.lease_token,
           now() + make_interval(secs => c.lease), c.metadata::jsonb, coalesce(c.task_version, 1)
    FROM {schema}.claim_tickets(claim.worker, claim.max_jobs, wanted_queues, wanted_tasks) c
    WHERE c.id IS NOT NULL;
END
$$;

CREATE FUNCTION {schema}.renew(worker text, ids bigint[], tokens uuid[])
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    IF cardinality(renew.ids) IS DISTINCT FROM cardinality(renew.tokens) THEN
        RAISE EXCEPTION 'renew needs one token per id: % ids, % tokens',
            coalesce(cardinality(renew.ids)::text, 'NULL'),
            coalesce(cardinality(renew.tokens)::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- heartbeat_jobs (db/sql/jobs.sql): the lease extended by the job's lease, fenced by the
    -- token; the worker seen.
    UPDATE {schema}.workers w SET last_seen_at = now() WHERE w.id = renew.worker;
    RETURN QUERY
    WITH renewed AS (
        UPDATE {schema}.jobs j SET locked_until = now() + j.lease, updated_at = now()
        FROM unnest(renew.ids, renew.tokens) AS b(id, token)
        WHERE j.id = b.id AND j.lease_token = b.token
        RETURNING j.id
    )
    SELECT rn.id FROM renewed rn;
END
$$;

CREATE FUNCTION {schema}.complete(worker text, id bigint, token uuid, result jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    -- checks.py DEFAULT_MAX_RESULT_BYTES: what Python stores of a handler's return value.
    most CONSTANT integer := 65536;
    size integer := octet_length(complete.result::text);
    r {schema}.jobs;
BEGIN
    IF size > most THEN
        RAISE EXCEPTION 'result of job % is % bytes of JSON, more than the 65,536 allowed; store '
            'large data elsewhere and return its key', complete.id,
            to_char(size, 'FM999,999,999,990')
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    -- The complete_jobs fragment for one job: moved to the history, succeeded, fenced by the
    -- token. A whole row, so no column list is kept here: the history's columns are the live
    -- table's, in its order (0015 made it LIKE jobs; every later column was added to both).
    DELETE FROM {schema}.jobs j
    WHERE j.id = complete.id AND j.lease_token = complete.token
    RETURNING j.* INTO r;
    IF NOT FOUND THEN
        RETURN false;  -- the lease was lost: another attempt owns the job, or it ended
    END IF;
    r.status := 'succeeded';
    r.finished_at := now();
    r.progress := 100;
    r.result := complete.result;
    r.locked_until := NULL;
    r.lease_token := NULL;
    r.updated_at := now();
    r.ready_xid := NULL;  -- never set in the history (Python's move does not write it)
    -- Its triggers fire as for Python's move: dependents settled, a waiter notified.
    INSERT INTO {schema}.jobs_history SELECT (r).*;
    -- The Workers page's total (Python's heartbeat writes its own).
    UPDATE {schema}.workers w
    SET succeeded_jobs = coalesce(w.succeeded_jobs, 0) + 1, last_seen_at = now()
    WHERE w.id = complete.worker;
    RETURN true;
END
$$;

CREATE FUNCTION {schema}.fail(
    worker text,
    id bigint,
    token uuid,
    error text,
    retry_in interval DEFAULT NULL,
    error_type text DEFAULT NULL,
    give_up boolean DEFAULT false,
    traceback text DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    r {schema}.jobs;
    new_status text;
    message text;
    raw float8;
    delay interval;
BEGIN
    IF fail.retry_in < interval '0' THEN
        RAISE EXCEPTION 'retry_in must be zero or more, got %', fail.retry_in
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- finish_jobs' target: the fenced row, locked for the outcome.
    SELECT * INTO r FROM {schema}.jobs j
    WHERE j.id = fail.id AND j.lease_token = fail.token
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;  -- the lease was lost: nothing written
    END IF;
    -- outcomes.py error_line and trim: the message, or the type's name when it has none, cut at
    -- ERROR_LIMIT (2,000) characters; the traceback keeps its last TRACEBACK_LIMIT (8,000).
    message := coalesce(nullif(fail.error, ''), fail.error_type, 'error');
    IF length(message) > 2000 THEN
        message := left(message, 2000) || '…';
    END IF;
    new_status := CASE WHEN fail.give_up OR r.attempts >= r.max_attempts THEN 'dead'
                       ELSE 'failed' END;
    IF new_status = 'failed' THEN
        -- retry.py Backoff(): min(1 h, 5 s * 2^(attempt - 1)), moved by up to 20% either way
        -- (never past the hour), as Python's default policy waits.
        raw := least(3600, 5 * power(2::float8, least(r.attempts - 1, 30)));
        delay := coalesce(
            fail.retry_in,
            make_interval(secs => raw * 0.8 + random() * (least(3600, raw * 1.2) - raw * 0.8)));
        UPDATE {schema}.jobs j
        SET status = 'failed', run_at = now() + delay, finished_at = NULL,
            last_error = message, error_type = fail.error_type,
            locked_by = NULL, locked_until = NULL, lease_token = NULL, updated_at = now()
        WHERE j.id = r.id;
    ELSE
        -- Attempts used up, or given up: dead, moved to the history (finish_jobs' gone, ended).
        DELETE FROM {schema}.jobs j WHERE j.id = r.id RETURNING j.* INTO r;
        r.status := 'dead';
        r.finished_at := now();
        r.last_error := message;
        r.error_type := fail.error_type;
        r.locked_by := NULL;
        r.locked_until := NULL;
        r.lease_token := NULL;
        r.updated_at := now();
        r.ready_xid := NULL;
        INSERT INTO {schema}.jobs_history SELECT (r).*;
    END IF;
    -- finish_jobs' history row.
    INSERT INTO {schema}.job_attempts
        (job_id, attempt, worker, started_at, outcome, error, error_type, traceback)
    VALUES (r.id, r.attempts, fail.worker, r.started_at, new_status, message, fail.error_type,
            CASE WHEN length(fail.traceback) > 8000
                 THEN '…' || right(fail.traceback, 8000) ELSE fail.traceback END);
    UPDATE {schema}.workers w
    SET failed_attempts = coalesce(w.failed_attempts, 0) + 1, last_seen_at = now()
    WHERE w.id = fail.worker;
    RETURN new_status;
END
$$;

CREATE FUNCTION {schema}.release(worker text, ids bigint[], tokens uuid[])
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    channel CONSTANT text := {schema_name} || '_jobs';
BEGIN
    IF cardinality(release.ids) IS DISTINCT FROM cardinality(release.tokens) THEN
        RAISE EXCEPTION 'release needs one token per id: % ids, % tokens',
            coalesce(cardinality(release.ids)::text, 'NULL'),
            coalesce(cardinality(release.tokens)::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- release_jobs (db/sql/jobs.sql): queued again now, the attempt not counted, a history row,
    -- and a NOTIFY per queue so that an idle worker takes them at once.
    RETURN QUERY
    WITH released AS (
        UPDATE {schema}.jobs j
        SET status = 'queued', attempts = j.attempts - 1, run_at = now(),
            locked_by = NULL, locked_until = NULL, lease_token = NULL, updated_at = now()
        FROM unnest(release.ids, release.tokens) AS r(id, token)
        WHERE j.id = r.id AND j.lease_token = r.token
        RETURNING j.id, j.queue, j.attempts, j.started_at
    ), history AS (
        INSERT INTO {schema}.job_attempts (job_id, attempt, worker, started_at, outcome, error)
        SELECT rl.id, rl.attempts + 1, release.worker, rl.started_at, 'released',
               'worker shut down before it finished'
        FROM released rl
    ), notified AS (
        SELECT pg_notify(channel, q.queue) FROM (SELECT DISTINCT rl.queue FROM released rl) q
    )
    SELECT rl.id FROM released rl, (SELECT count(*) FROM notified) n;
END
$$;

REVOKE EXECUTE ON FUNCTION {schema}.register_worker(text, text[], text[], text, integer, integer)
    FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}.unregister_worker(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}.claim(text, integer, text[], text[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}.renew(text, bigint[], uuid[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}.complete(text, bigint, uuid, jsonb) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}.fail(text, bigint, uuid, text, interval, text, boolean, text)
    FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {schema}.release(text, bigint[], uuid[]) FROM PUBLIC;

COMMENT ON FUNCTION {schema}.bad_name(text[], boolean) IS
    'The first of names that is not a task (versioned: or task@N) or queue name, quoted; NULL when all are good: the SQL worker''s checks.';
COMMENT ON FUNCTION {schema}.register_worker(text, text[], text[], text, integer, integer) IS
    'Register a worker of another language (its queues, NULL: all; its tasks, required), as a Python worker registers: the Workers page shows it and claims know its tasks. docs/reference/sql.md.';
COMMENT ON FUNCTION {schema}.unregister_worker(text) IS
    'A worker of another language stops cleanly: its row removed (release its jobs first). docs/reference/sql.md.';
COMMENT ON FUNCTION {schema}.claim(text, integer, text[], text[]) IS
    'Lease up to max_jobs due jobs of a registered worker''s tasks (NULL: those it registered), as Python''s claim does; each with its lease token, the fence of renew, complete and fail. docs/reference/sql.md.';
COMMENT ON FUNCTION {schema}.renew(text, bigint[], uuid[]) IS
    'Extend the leases of the attempts held (ids with their tokens) by each job''s lease: the ids still held; one missing lost its lease and must stop. docs/reference/sql.md.';
COMMENT ON FUNCTION {schema}.complete(text, bigint, uuid, jsonb) IS
    'Write an attempt''s success (moved to the history, with its result), fenced by its lease token: false when the lease was lost (roll back the handler''s writes made in the same transaction). docs/reference/sql.md.';
COMMENT ON FUNCTION {schema}.fail(text, bigint, uuid, text, interval, text, boolean, text) IS
    'Write an attempt''s failure, as Python''s worker does: retried after retry_in (NULL: Python''s default backoff) or dead when its attempts are used up or give_up; the new status, NULL when the lease was lost. docs/reference/sql.md.';
COMMENT ON FUNCTION {schema}.release(text, bigint[], uuid[]) IS
    'Hand back attempts not finished (a stopping worker): queued again now, the attempt not counted; the ids released. docs/reference/sql.md.';
