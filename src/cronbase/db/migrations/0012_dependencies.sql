-- 0012: dependencies between jobs (issue 15): a job deferred with after=[parents] waits as
-- 'pending' until every parent succeeded; chains and groups are graphs of such jobs.
--
-- The database resolves dependents itself, in a trigger on the parent's change of state: every
-- way a job ends (a worker's completion, a reap, an operator's cancel, other SQL) releases or
-- cancels its dependents in the same transaction, and a crash between the two cannot happen.
-- Jobs nobody depends on pay nothing: the trigger's WHEN tests has_dependents, a column of the
-- row being written, so it is never called for them (no function call, no event queued).
-- A child counts its unresolved parents (parents_left): the update that takes it to zero is
-- the one that releases it, so a fan-in fires once however many workers finish the last
-- parents at the same moment (they queue on the child's row lock). Counting parents on each
-- finish instead would cost O(parents) per parent: O(n^2) for a fan-in of n.
ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('pending', 'queued', 'running', 'succeeded', 'failed', 'dead', 'cancelled'));

ALTER TABLE {schema}.jobs
    ADD COLUMN parents_left integer NOT NULL DEFAULT 0 CHECK (parents_left >= 0),
    ADD COLUMN has_dependents boolean NOT NULL DEFAULT false,
    ADD COLUMN on_parent_failure text CHECK (on_parent_failure IN ('cancel', 'run')),
    ADD COLUMN receives text,
    ADD COLUMN workflow_id bigint;

CREATE TABLE {schema}.job_deps (
    child    bigint  NOT NULL REFERENCES {schema}.jobs (id) ON DELETE CASCADE,
    parent   bigint  NOT NULL REFERENCES {schema}.jobs (id) ON DELETE CASCADE,
    -- The parent's place in the list of results the child receives; NULL: the child receives
    -- this one parent's result as it is (a chain's link).
    position integer,
    PRIMARY KEY (parent, child)
);
CREATE INDEX job_deps_child_idx ON {schema}.job_deps (child, position);
CREATE INDEX jobs_workflow_idx ON {schema}.jobs (workflow_id, id) WHERE workflow_id IS NOT NULL;

-- The value a released child receives under its receives key: its parent's result, or the
-- list of its parents' results in order (a dead or cancelled parent gives null).
CREATE FUNCTION {schema}.parents_results(child_id bigint) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN count(*) = 1 AND bool_and(d.position IS NULL) THEN (array_agg(p.result))[1]
                ELSE COALESCE(jsonb_agg(p.result ORDER BY d.position), '[]'::jsonb) END
    FROM {schema}.job_deps d JOIN {schema}.jobs p ON p.id = d.parent
    WHERE d.child = child_id
$$;

CREATE FUNCTION {schema}.resolve_dependents() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    final constant text[] := ARRAY['succeeded', 'dead', 'cancelled'];
    channel constant text := TG_TABLE_SCHEMA || '_jobs';
    released text[];
BEGIN
    IF NEW.status = ANY (final) AND NOT OLD.status = ANY (final) THEN
        -- Lock the waiting children in id order first: two transactions finishing parents of
        -- the same children then wait for each other instead of deadlocking. Each statement
        -- below reads a fresh snapshot, so it sees what the transaction we waited for wrote.
        PERFORM FROM {schema}.jobs c JOIN {schema}.job_deps d ON d.child = c.id
        WHERE d.parent = NEW.id AND c.status = 'pending'
        ORDER BY c.id FOR NO KEY UPDATE OF c;
        IF NEW.status <> 'succeeded' THEN
            -- Their own dependents follow: this update fires this trigger for each of them.
            UPDATE {schema}.jobs c
            SET status = 'cancelled', finished_at = now(), updated_at = now(),
                last_error = format('parent job %s (%s) is %s', NEW.id, NEW.task, NEW.status),
                error_type = 'ParentFailed'
            FROM {schema}.job_deps d
            WHERE d.parent = NEW.id AND c.id = d.child AND c.status = 'pending'
              AND c.on_parent_failure IS DISTINCT FROM 'run';
        END IF;
        WITH counted AS (
            UPDATE {schema}.jobs c
            SET parents_left = c.parents_left - 1, updated_at = now(),
                status = CASE WHEN c.parents_left = 1 THEN 'queued' ELSE 'pending' END,
                payload = CASE WHEN c.parents_left = 1 AND c.receives IS NOT NULL
                    THEN c.payload || jsonb_build_object(c.receives, {schema}.parents_results(c.id))
                    ELSE c.payload END
            FROM {schema}.job_deps d
            WHERE d.parent = NEW.id AND c.id = d.child AND c.status = 'pending'
            RETURNING c.status, c.queue, c.run_at
        )
        SELECT array_agg(DISTINCT queue) INTO released FROM counted
        WHERE status = 'queued' AND run_at <= now();
        PERFORM pg_notify(channel, q) FROM unnest(released) q;  -- a due release wakes workers
    ELSIF OLD.status = ANY (final) AND NOT NEW.status = ANY (final) THEN
        -- Retried: the children its failure cancelled wait for it again, unless another of
        -- their parents failed too. Their own dependents follow through this trigger.
        UPDATE {schema}.jobs c
        SET status = 'pending', finished_at = NULL, last_error = NULL, error_type = NULL,
            updated_at = now(),
            parents_left = (
                SELECT count(*) FROM {schema}.job_deps d2 JOIN {schema}.jobs p ON p.id = d2.parent
                WHERE d2.child = c.id AND p.status <> 'succeeded')
        FROM {schema}.job_deps d
        WHERE d.parent = NEW.id AND c.id = d.child AND c.status = 'cancelled'
          AND c.error_type = 'ParentFailed'
          AND NOT EXISTS (
              SELECT FROM {schema}.job_deps d3 JOIN {schema}.jobs p3 ON p3.id = d3.parent
              WHERE d3.child = c.id AND p3.id <> NEW.id AND p3.status IN ('dead', 'cancelled'));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_resolve_dependents
    AFTER UPDATE OF status ON {schema}.jobs
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION {schema}.resolve_dependents();

COMMENT ON COLUMN {schema}.jobs.status IS
    'pending: waiting for its parents (after=, a chain, a group), released to queued when they succeeded; queued: waiting for run_at (new, released by a stopping worker, snoozed, or retried by an operator); running: leased by a worker (lease_token set); failed: an attempt failed, retried at run_at; succeeded; dead: gave up (attempts used up, or a failure retrying cannot fix, such as a payload the handler cannot take); cancelled: by an operator, its handler (Cancel), or a parent''s failure (error_type ParentFailed). Claims pick only queued and failed jobs whose run_at has come.';
COMMENT ON COLUMN {schema}.jobs.parents_left IS
    'How many of a pending job''s parents have not yet succeeded (or ended, for on_parent_failure=''run''); the change that takes it to 0 queues the job.';
COMMENT ON COLUMN {schema}.jobs.has_dependents IS
    'True when other jobs depend on this one: only then does its change of state run resolve_dependents.';
COMMENT ON COLUMN {schema}.jobs.on_parent_failure IS
    'What a parent''s death or cancellation does to this job: ''cancel'' (it is cancelled, error_type ParentFailed) or ''run'' (it counts as done); NULL for a job without parents.';
COMMENT ON COLUMN {schema}.jobs.receives IS
    'The payload key under which the job, once released, receives its parents'' results (a chain link: the one result; a group''s callback: the list in order); NULL: it receives nothing.';
COMMENT ON COLUMN {schema}.jobs.workflow_id IS
    'The workflow (chain or group) the job belongs to: the id it was deferred under, which follows it; NULL outside a workflow.';
COMMENT ON TABLE {schema}.job_deps IS
    'Dependencies: the child waits (pending) until its parents succeeded. Resolved by resolve_dependents when a parent changes state.';
COMMENT ON COLUMN {schema}.job_deps.child IS 'The job that waits.';
COMMENT ON COLUMN {schema}.job_deps.parent IS 'A job it waits for.';
COMMENT ON COLUMN {schema}.job_deps.position IS
    'The parent''s place in the list of results the child receives; NULL: the child receives this parent''s result alone.';
COMMENT ON INDEX {schema}.job_deps_child_idx IS
    'A child''s parents in order: the results it receives, the graph jobs show draws.';
COMMENT ON INDEX {schema}.jobs_workflow_idx IS 'The jobs of a workflow, for jobs show and the dashboard.';
COMMENT ON FUNCTION {schema}.parents_results(bigint) IS
    'The value a released child receives: its one parent''s result, or its parents'' results as a list in position order.';
COMMENT ON FUNCTION {schema}.resolve_dependents() IS
    'Trigger: a parent ended, so its pending children count it off (released at 0) or are cancelled; a parent retried, so the children its failure cancelled wait again.';
