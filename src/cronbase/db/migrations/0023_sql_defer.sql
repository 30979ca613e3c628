-- 0023: defer from any language (issue 38; docs/reference/sql.md): cronbase.defer(), a job
-- inserted as Python's defer inserts it, with the same checks and the same NOTIFY.
--
-- Named arguments with the defaults a task gives its jobs unless told else (enqueue/options.py
-- JobBasics): a Rails or Node service calls
--     SELECT cronbase.defer('send_email', '{{"to": "a@example.com"}}', queue => 'emails');
-- What Python knows from the task's code and SQL cannot (its queue, retries, lease, limits, fair
-- key, unique_for) the caller passes, or the table's defaults apply; a task with flow limits or
-- a fair key gets no flow_key from here (the reference says so).
--
-- The checks are Python's (checks.py, payload/encode.py, enqueue/options.py), each refusing with
-- a message that names the bad value, SQLSTATE 22023 (invalid_parameter_value; a payload too
-- big: 54000, program_limit_exceeded);
-- tests/integration/test_sql_defer.py runs every refusal from both sides.

-- How deep a JSON value's containers nest, the value itself level 1, counting no deeper than
-- `most` + 1: MAX_JSON_DEPTH's rule (checks.py), which refuses a payload deeper than 100.
CREATE FUNCTION {schema}.json_depth(value jsonb, most integer) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    WITH RECURSIVE walk(v, depth) AS (
        SELECT value, 1
        UNION ALL
        SELECT c.v, w.depth + 1
        FROM walk w
        CROSS JOIN LATERAL (
            SELECT e.value AS v FROM jsonb_each(
                CASE WHEN jsonb_typeof(w.v) = 'object' THEN w.v END) e
            UNION ALL
            SELECT a.value FROM jsonb_array_elements(
                CASE WHEN jsonb_typeof(w.v) = 'array' THEN w.v END) a
        ) c
        WHERE w.depth <= most AND jsonb_typeof(c.v) IN ('object', 'array')
    )
    SELECT max(depth) FROM walk WHERE jsonb_typeof(v) IN ('object', 'array')
$$;

CREATE FUNCTION {schema}.defer(
    task text,
    args jsonb DEFAULT '{{}}',
    queue text DEFAULT 'default',
    priority integer DEFAULT 100,
    run_at timestamptz DEFAULT NULL,
    delay interval DEFAULT NULL,
    max_attempts integer DEFAULT 20,
    lease interval DEFAULT interval '1 minute',
    idempotency_key text DEFAULT NULL,
    dedupe_key text DEFAULT NULL,
    task_version integer DEFAULT 1
) RETURNS bigint
-- As the schema's owner: a role of another language needs EXECUTE on this and USAGE on the
-- schema, nothing on the tables (`cronbase grants ROLE --interface`). Every name is qualified,
-- and the search path is pinned, so a caller's objects cannot stand in for pg_catalog's.
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    -- checks.py: MAX_NAME_LENGTH, _NAME; MAX_KEY_LENGTH; DEFAULT_MAX_PAYLOAD_BYTES;
    -- MAX_JSON_DEPTH. enqueue/options.py: MAX_TASK_VERSION, MAX_LEASE.
    name_pattern CONSTANT text := '^[A-Za-z0-9_][A-Za-z0-9_.:\-]*$';
    channel CONSTANT text := {schema_name} || '_jobs';
    due timestamptz;
    size integer;
    kind text;
    key_name text;
    key_value text;
    new_id bigint;
BEGIN
    IF defer.task IS NULL OR length(defer.task) > 100 OR defer.task !~ name_pattern THEN
        RAISE EXCEPTION 'invalid task name %: use 1 to 100 letters, digits and _ - . : '
            '(starting with a letter, a digit or _)', coalesce(quote_literal(defer.task), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF defer.queue IS NULL OR length(defer.queue) > 100 OR defer.queue !~ name_pattern THEN
        RAISE EXCEPTION 'invalid queue name %: use 1 to 100 letters, digits and _ - . : '
            '(starting with a letter, a digit or _)', coalesce(quote_literal(defer.queue), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    kind := jsonb_typeof(defer.args);
    IF kind IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'args for task % must be a JSON object (the handler''s arguments by '
            'name), got %', quote_literal(defer.task),
            coalesce(left(defer.args::text, 60), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    size := octet_length(defer.args::text);
    IF size > 1048576 THEN
        RAISE EXCEPTION 'payload for task % is % bytes of JSON, more than the 1,048,576 allowed',
            quote_literal(defer.task), to_char(size, 'FM999,999,999,990')
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF {schema}.json_depth(defer.args, 100) > 100 THEN
        RAISE EXCEPTION 'payload for task % nests deeper than 100 levels',
            quote_literal(defer.task)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF defer.priority IS NULL OR defer.priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'priority must be within -32768..32767, got %',
            coalesce(defer.priority::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF defer.max_attempts IS NULL OR defer.max_attempts < 1 THEN
        RAISE EXCEPTION 'max_attempts must be an integer from 1 to 2147483647, got %',
            coalesce(defer.max_attempts::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF defer.lease IS NULL OR defer.lease <= interval '0'
       OR defer.lease > interval '36500 days' THEN
        RAISE EXCEPTION 'lease must be positive and at most 100 years, got %',
            coalesce(defer.lease::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF defer.task_version IS NULL OR defer.task_version NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'task_version must be a whole number from 1 to 1000, got %',
            coalesce(defer.task_version::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF defer.run_at IS NOT NULL AND defer.delay IS NOT NULL THEN
        RAISE EXCEPTION 'give run_at or delay, not both (run_at=%, delay=%)',
            defer.run_at, defer.delay
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF defer.delay < interval '0' THEN
        -- A negative delay would put the job ahead of others due now.
        RAISE EXCEPTION 'delay must be zero or more, got %', defer.delay
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR key_name, key_value IN
        VALUES ('idempotency_key', defer.idempotency_key), ('dedupe_key', defer.dedupe_key)
    LOOP
        IF key_value = '' OR length(key_value) > 1000 THEN
            RAISE EXCEPTION '% must be 1 to 1000 characters, got %', key_name,
                quote_literal(left(key_value, 60))
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;

    due := coalesce(defer.run_at, now() + coalesce(defer.delay, interval '0'));
    IF defer.idempotency_key IS NULL AND defer.dedupe_key IS NULL THEN
        -- insert_job's row (db/sql/jobs.sql), and its NOTIFY for a job due now.
        INSERT INTO {schema}.jobs AS j (task, queue, payload, priority, run_at, max_attempts,
                                        lease, task_version)
        VALUES (defer.task, defer.queue, defer.args, defer.priority::smallint, due,
                defer.max_attempts, defer.lease, nullif(defer.task_version, 1))
        RETURNING j.id INTO new_id;
        IF due <= now() THEN
            PERFORM pg_notify(channel, defer.queue);
        END IF;
        RETURN new_id;
    END IF;
    -- insert_job_unique's function: the keys in job_keys, across the live table and the
    -- history; a held key returns the job that holds it (NOTIFY only for one inserted and due).
    SELECT k.id INTO new_id
    FROM {schema}.insert_keyed_job(
        defer.task, defer.queue, defer.args, defer.priority::smallint, due,
        defer.max_attempts, defer.lease, NULL, NULL, defer.idempotency_key, defer.dedupe_key,
        NULL, NULL, channel, nullif(defer.task_version, 1)) k;
    IF new_id IS NULL THEN
        -- The job holding the key ended as this ran: Python's defer asks again; so does this.
        SELECT k.id INTO new_id
        FROM {schema}.insert_keyed_job(
            defer.task, defer.queue, defer.args, defer.priority::smallint, due,
            defer.max_attempts, defer.lease, NULL, NULL, defer.idempotency_key,
            defer.dedupe_key, NULL, NULL, channel, nullif(defer.task_version, 1)) k;
    END IF;
    RETURN new_id;
END
$$;

REVOKE EXECUTE ON FUNCTION {schema}.defer(text, jsonb, text, integer, timestamptz, interval,
    integer, interval, text, text, integer) FROM PUBLIC;

COMMENT ON FUNCTION {schema}.json_depth(jsonb, integer) IS
    'How deep a JSON value''s containers nest (the value itself level 1), counted up to most + 1: defer''s depth check.';
COMMENT ON FUNCTION {schema}.defer(text, jsonb, text, integer, timestamptz, interval, integer,
    interval, text, text, integer) IS
    'Defer a job from SQL, as Python''s defer does: the same checks and NOTIFY; its id (an idempotency or dedupe key held: the holder''s). docs/reference/sql.md.';
