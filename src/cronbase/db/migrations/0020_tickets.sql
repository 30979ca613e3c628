-- 0020: the hot path reads no row a held horizon keeps (issue 35; docs/design/storage.md).
--
-- While any transaction holds back the xmin horizon (pg_dump, a long report, an idle session),
-- vacuum removes nothing, and a claim that walks jobs_due_idx from its start walks every job
-- claimed since: each claim slower than the last, the queue falls behind. Here a claim no
-- longer walks jobs. A claim first *ticks* (one at a time): the jobs made ready since the last
-- tick, found by the transaction that made them ready (jobs.ready_xid, PgQ's two-snapshot rule),
-- and those that came due since, get a ticket in their lane (queue, priority, shard); then it
-- takes the next tickets past its lane's cursor (the last row of lane_claims) and leases their
-- jobs by primary key. Tickets, ticks and the cursor ledger are only ever inserted; what is
-- behind every cursor is deleted later, and no claim reads it.
--
-- Expand-only: the previous release's workers keep claiming through jobs_due_idx beside these
-- (a job leased by either is running for the other: its ticket finds it taken). jobs.ready_xid
-- is added without a value for the rows there (nothing is rewritten): a job with none is
-- *parked* (no ticket) until a worker that knows its task starts (register_worker).

-- The transaction that last made the job ready: its insert (the default), or the update that
-- made it wait again (the trigger below), or a worker that found it parked.
ALTER TABLE {schema}.jobs ADD COLUMN ready_xid xid8;
ALTER TABLE {schema}.jobs ALTER COLUMN ready_xid SET DEFAULT pg_current_xact_id();
-- Never set there (a move lists the columns it writes), but kept in step with jobs: statements
-- that read both as one (SELECT * ... UNION ALL SELECT * ...) see the same columns.
ALTER TABLE {schema}.jobs_history ADD COLUMN ready_xid xid8;
-- The tick reads the rows of the transactions since the last one: a range at the index's end,
-- never the rows claimed before it (their entries are behind it). Waiting jobs only: a claim's
-- update of a row (running) adds no entry here.
CREATE INDEX jobs_ready_xid_idx ON {schema}.jobs (ready_xid)
    WHERE ready_xid IS NOT NULL AND status IN ('queued', 'failed');
-- Jobs made ready to run later (scheduled, retried, snoozed): the tick's second read, the slice
-- of run_at that came due since the last tick. A job deferred to run now has run_at =
-- created_at and stays out of it (no index entry for the common case).
CREATE INDEX jobs_later_idx ON {schema}.jobs (run_at)
    WHERE status IN ('queued', 'failed') AND flow_key IS NULL AND run_at > created_at;
-- Parked jobs by task: a worker that knows the task makes them ready again (unpark_jobs, as it
-- starts and each reaper round). Small: the waiting jobs no live worker knew, and those from
-- before this migration until a worker has started.
CREATE INDEX jobs_parked_idx ON {schema}.jobs (task)
    WHERE ready_xid IS NULL AND status IN ('queued', 'failed') AND flow_key IS NULL;

-- Any update that makes a plain job wait again (a retry, a release, a snooze, an operator's
-- retry, a parent's success, aging, other SQL) makes it ready anew: ticketed by the next tick.
CREATE FUNCTION {schema}.jobs_ready_again() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.ready_xid := pg_current_xact_id();
    RETURN NEW;
END
$$;
CREATE TRIGGER jobs_ready_again BEFORE UPDATE ON {schema}.jobs FOR EACH ROW
    WHEN (NEW.status IN ('queued', 'failed') AND NEW.flow_key IS NULL
          AND (OLD.status NOT IN ('queued', 'failed')
               OR NEW.run_at IS DISTINCT FROM OLD.run_at
               OR NEW.priority IS DISTINCT FROM OLD.priority
               OR NEW.queue IS DISTINCT FROM OLD.queue))
    EXECUTE FUNCTION {schema}.jobs_ready_again();

-- A lane: the tickets of one queue and priority, spread over four shards (by job id, in runs
-- of 64) so that several claims run at once (a claim holds its lane, not the others).
CREATE TABLE {schema}.lanes (
    id       integer  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue    text     NOT NULL,
    priority smallint NOT NULL,
    shard    smallint NOT NULL,
    UNIQUE (queue, priority, shard)
);

-- Insert-only: a ticket is never updated. A claim reads a lane's tickets past its cursor in
-- seq order; one whose job is no longer waiting as it was (claimed by a worker of the previous
-- release, cancelled, made ready again: ready_xid moved on) is passed over.
CREATE TABLE {schema}.tickets (
    lane      integer NOT NULL,
    seq       bigint  NOT NULL,
    job_id    bigint  NOT NULL,
    ready_xid xid8    NOT NULL,
    PRIMARY KEY (lane, seq)
);

-- One row per tick: the snapshot it read jobs by and its time. Each names the tick it follows
-- (prev_id, unique): two claims that raced to tick after the same one make one tick, the other
-- writes nothing (its statement's snapshot may predate the tick that won).
CREATE TABLE {schema}.ticks (
    id      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    prev_id bigint      UNIQUE,
    snap    pg_snapshot NOT NULL,
    at      timestamptz NOT NULL
);
INSERT INTO {schema}.ticks (prev_id, snap, at) VALUES (NULL, pg_current_snapshot(), now());

-- The lanes' cursors: a claim appends the last seq it took; a lane's cursor is its greatest.
-- Appended, never updated: an updated cursor row would leave a version per claim for every
-- later claim to step over while the horizon is held.
CREATE TABLE {schema}.lane_claims (
    lane   integer NOT NULL,
    to_seq bigint  NOT NULL,
    PRIMARY KEY (lane, to_seq)
);

-- claim_jobs' claim (db/sql/jobs.sql calls it after writing the successes it carries). A
-- plpgsql function so that each step runs only when needed, and reads with a snapshot taken
-- after the lock it holds (READ COMMITTED: each statement of a function takes its own). Its
-- bounds are variables, parameters of its statements' cached plans: the planner reads a range
-- of a parameter as narrow (0.5% of rows) and probes the index, where bounds it could not see
-- from a join made it read all of jobs on a small table. Its plans are generic, made once per
-- session (a custom plan of the lease's UPDATE cost ~60 us of planning a claim), and never
-- read a table whole (a sequential scan of jobs on a table the planner thinks small reads
-- every dead row a held horizon keeps). tests/integration/test_claim_plan.py reads the plans
-- of its statements (auto_explain).
--   1. The tick, one claim at a time (an advisory lock to the end of the transaction; the
--      others take the tickets already there). The jobs made ready since the last tick: by the
--      transactions at or past its horizon (xmax), and by those still running at it (its xip)
--      and committed since: PgQ's two-snapshot rule, which never looks at a snapshot's xmin,
--      the very thing an idle transaction holds still. Those ready and due get a ticket, and
--      those made ready before the last tick (visible in its snapshot) that came due since
--      (jobs_later_idx's slice of run_at). What a statement sees beyond this tick's snapshot
--      (committed since) is left to the next tick. A tick is written only when it read
--      something (a row per claim for nothing otherwise), after the one it read (prev_id,
--      unique: a claim whose snapshot predates another's tick writes no tick and, joined to
--      it, no ticket). Its tickets take seq = tick id << 24 + their rank (a later tick commits
--      after this one: its id and seqs are larger): by priority, then run_at and id, in the
--      lanes of (queue, priority, shard: the job's id in runs of 64, modulo 4: a claim's jobs
--      stay on a few heap pages, where id modulo 4 spread them over four times as many), made
--      when new. Claims of one lane run one at a time; the shards let four run at once.
--   2. The lanes: of the worker's queues (p_queues; NULL: all), not paused nor limited (a
--      limited queue's jobs are claim_flow_jobs'), with tickets past their cursor (their last
--      lane_claims row), the best priority first, then the oldest next ticket; each not held by
--      another claim (an advisory lock; one held is passed over and counted), until p_limit.
--   3. In each, its next tickets, the cursor moved past them (a claim whose snapshot predates
--      the lane's last claim may append the same seq: nothing is written then); their jobs by
--      primary key, leased as the lease_picked fragment leases when waiting as their ticket
--      says (ready_xid: a job made ready again has a newer ticket; one another claim took is
--      running) and of the worker's tasks (p_tasks; NULL: any; "task@N" for version N >= 2).
--      One of a task the worker does not know is made ready again when a live worker knows its
--      task (ticketed anew, at its lane's end), and parked (ready_xid NULL) otherwise, until a
--      worker that knows it starts (unpark_jobs).
-- Returns the leased jobs (claimed_columns, worker/claim.py) and one last row, its job columns
-- NULL: whether it ticked, the tickets it took, those but the ones of other workers' tasks
-- (which come back), the lanes it wanted that another claim held.
CREATE FUNCTION {schema}.claim_tickets(
    p_worker text, p_limit integer, p_queues text[], p_tasks text[]
) RETURNS TABLE (
    id bigint, task text, queue text, payload text, priority smallint, attempts integer,
    max_attempts integer, lease_token uuid, lease float8, metadata text, flow_key text,
    task_version integer, ticked boolean, took integer, passed integer, held integer
)
LANGUAGE plpgsql
-- As the schema's owner: the tickets, ticks, lanes and cursors are written by this function
-- only, so the application role needs no INSERT on them (db/grants.py grants EXECUTE on it);
-- every name in it is schema-qualified, and the search path is pinned.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Large joins of jobs are what a bad plan would cost, so JIT compiling them would too.
SET jit = off
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_ticked boolean;
    v_prev_id bigint;
    v_prev_snap pg_snapshot;
    v_prev_at timestamptz;
    v_snap pg_snapshot;
    v_at timestamptz;
    v_from xid8;
    v_to xid8;
    v_xip xid8[];
    v_took integer := 0;
    v_strays integer := 0;
    v_held integer := 0;
    v_left integer := p_limit;
    v_ids bigint[];
    v_xids xid8[];
    v_lane_id integer;
    v_lanes integer[] := '{{}}';
    v_count integer;
BEGIN
    -- A claim of none (a completer writing successes) neither ticks nor takes (ticked NULL).
    v_ticked := CASE WHEN p_limit > 0
                     THEN pg_try_advisory_xact_lock(hashtext('cronbase-tick:' || {schema_name}), 0)
                END;
    IF v_ticked THEN
        -- The last tick (none in a table emptied by TRUNCATE: tick 0, before every
        -- transaction), and this one's snapshot and time, in one statement.
        SELECT coalesce(t.id, 0), coalesce(t.snap, '1:1:'), coalesce(t.at, '-infinity'),
               pg_current_snapshot(), greatest(clock_timestamp(), t.at),
               pg_snapshot_xmax(coalesce(t.snap, '1:1:')), pg_snapshot_xmax(pg_current_snapshot()),
               ARRAY(SELECT pg_snapshot_xip(t.snap))
        INTO v_prev_id, v_prev_snap, v_prev_at, v_snap, v_at, v_from, v_to, v_xip
        FROM (SELECT 1) one
        LEFT JOIN LATERAL (
            SELECT tk.id, tk.snap, tk.at FROM {schema}.ticks tk ORDER BY tk.id DESC LIMIT 1
        ) t ON true;
        -- Anything to read? Three index probes; the tick itself (three inserts) only if so.
        IF EXISTS (
            SELECT FROM {schema}.jobs j
            WHERE j.ready_xid >= v_from AND j.ready_xid < v_to
              AND j.status IN ('queued', 'failed')
            UNION ALL
            SELECT FROM {schema}.jobs j
            WHERE j.ready_xid = ANY (v_xip) AND j.status IN ('queued', 'failed')
            UNION ALL
            SELECT FROM {schema}.jobs j
            WHERE j.run_at > v_prev_at AND j.run_at <= v_at
              AND j.status IN ('queued', 'failed') AND j.flow_key IS NULL
              AND j.run_at > j.created_at
        ) THEN
            WITH seen AS MATERIALIZED (
                SELECT j.id, j.queue, j.priority, j.run_at, j.ready_xid,
                       j.flow_key IS NULL AND j.run_at <= v_at AS is_ready
                FROM {schema}.jobs j
                WHERE j.ready_xid >= v_from AND j.ready_xid < v_to
                  AND j.status IN ('queued', 'failed')
                  AND pg_visible_in_snapshot(j.ready_xid, v_snap)
                UNION ALL
                SELECT j.id, j.queue, j.priority, j.run_at, j.ready_xid,
                       j.flow_key IS NULL AND j.run_at <= v_at
                FROM {schema}.jobs j
                WHERE j.ready_xid = ANY (v_xip) AND j.status IN ('queued', 'failed')
                  AND pg_visible_in_snapshot(j.ready_xid, v_snap)
                UNION ALL
                SELECT j.id, j.queue, j.priority, j.run_at, j.ready_xid, true
                FROM {schema}.jobs j
                WHERE j.run_at > v_prev_at AND j.run_at <= v_at
                  AND j.status IN ('queued', 'failed') AND j.flow_key IS NULL
                  AND j.run_at > j.created_at
                  AND pg_visible_in_snapshot(j.ready_xid, v_prev_snap)
            ), ready AS MATERIALIZED (
                SELECT s.id, s.queue, s.priority, s.ready_xid, ((s.id >> 6) & 3)::smallint AS shard,
                       row_number() OVER (ORDER BY s.priority, s.run_at, s.id) AS rank
                FROM seen s WHERE s.is_ready
            ), tick AS (
                INSERT INTO {schema}.ticks (prev_id, snap, at) VALUES (v_prev_id, v_snap, v_at)
                ON CONFLICT (prev_id) DO NOTHING
                RETURNING ticks.id
            ), new_lanes AS (
                INSERT INTO {schema}.lanes (queue, priority, shard)
                SELECT DISTINCT r.queue, r.priority, r.shard FROM ready r, tick
                ON CONFLICT DO NOTHING
                RETURNING lanes.id, lanes.queue, lanes.priority, lanes.shard
            ), made AS (
                INSERT INTO {schema}.tickets (lane, seq, job_id, ready_xid)
                SELECT l.id, (t.id << 24) + r.rank, r.id, r.ready_xid
                FROM tick t CROSS JOIN ready r
                JOIN (SELECT ln.id, ln.queue, ln.priority, ln.shard FROM {schema}.lanes ln
                      UNION ALL SELECT nl.id, nl.queue, nl.priority, nl.shard FROM new_lanes nl) l
                  ON l.queue = r.queue AND l.priority = r.priority AND l.shard = r.shard
                RETURNING 1
            )
            SELECT count(*) INTO v_count FROM made;
        END IF;
    END IF;

    IF p_limit > 0 THEN
        LOOP
            EXIT WHEN v_left <= 0;
            -- The best lane with tickets past its cursor that no other claim holds (its lock
            -- taken as the sorted lanes are read: OFFSET 0 keeps the lock out of the scan, so
            -- no lane is locked but the one taken), its next tickets, its cursor moved past them.
            WITH lane AS MATERIALIZED (
                SELECT c.id, c.cursor FROM (
                    SELECT ln.id, k.cursor FROM {schema}.lanes ln
                    CROSS JOIN LATERAL (
                        SELECT coalesce(max(lc.to_seq), 0) AS cursor
                        FROM {schema}.lane_claims lc WHERE lc.lane = ln.id
                    ) k
                    CROSS JOIN LATERAL (
                        SELECT tk.seq FROM {schema}.tickets tk
                        WHERE tk.lane = ln.id AND tk.seq > k.cursor
                        ORDER BY tk.seq LIMIT 1
                    ) h
                    WHERE (p_queues IS NULL OR ln.queue = ANY (p_queues))
                      AND ln.id <> ALL (v_lanes)
                      AND NOT EXISTS (
                          SELECT FROM {schema}.queues q WHERE q.name = ln.queue AND q.holds_claims)
                    ORDER BY ln.priority, h.seq
                    OFFSET 0
                ) c
                WHERE pg_try_advisory_xact_lock(hashtext('cronbase-lanes:' || {schema_name}), c.id)
                LIMIT 1
            ), taken AS MATERIALIZED (
                SELECT t.seq, t.job_id, t.ready_xid FROM lane l
                CROSS JOIN LATERAL (
                    SELECT tk.seq, tk.job_id, tk.ready_xid FROM {schema}.tickets tk
                    WHERE tk.lane = l.id AND tk.seq > l.cursor
                    ORDER BY tk.seq LIMIT v_left
                ) t
            ), moved AS (
                INSERT INTO {schema}.lane_claims (lane, to_seq)
                SELECT l.id, k.last FROM lane l, (SELECT max(tk.seq) AS last FROM taken tk) k
                WHERE k.last IS NOT NULL
                ON CONFLICT DO NOTHING
            )
            SELECT (SELECT l.id FROM lane l), coalesce(array_agg(k.job_id ORDER BY k.seq), '{{}}'),
                   coalesce(array_agg(k.ready_xid ORDER BY k.seq), '{{}}')
            INTO v_lane_id, v_ids, v_xids
            FROM taken k;
            IF v_lane_id IS NULL THEN
                -- None left to take: the lanes with tickets that other claims hold, if any.
                SELECT count(*) INTO v_held FROM {schema}.lanes ln
                WHERE (p_queues IS NULL OR ln.queue = ANY (p_queues))
                  AND ln.id <> ALL (v_lanes)
                  AND EXISTS (
                      SELECT FROM {schema}.tickets tk
                      WHERE tk.lane = ln.id AND tk.seq > (
                          SELECT coalesce(max(lc.to_seq), 0)
                          FROM {schema}.lane_claims lc WHERE lc.lane = ln.id))
                  AND NOT EXISTS (
                      SELECT FROM {schema}.queues q WHERE q.name = ln.queue AND q.holds_claims);
                EXIT;
            END IF;
            v_lanes := v_lanes || v_lane_id;
            v_count := cardinality(v_ids);
            CONTINUE WHEN v_count = 0;
            v_took := v_took + v_count;
            -- By primary key (id = ANY), leased as the lease_picked fragment of db/sql/jobs.sql
            -- leases, when waiting as their ticket says and of the worker's tasks. The tests of the
            -- row are a CASE on purpose: a plain status test would let the planner walk a partial
            -- index of waiting jobs instead, the index a held horizon fills with dead entries.
            -- Returned in ticket order (an UPDATE returns its rows in no particular order).
            RETURN QUERY
            WITH leased AS (
                UPDATE {schema}.jobs j
                SET status = 'running', attempts = j.attempts + 1, locked_by = p_worker,
                    locked_until = now() + j.lease, lease_token = gen_random_uuid(),
                    started_at = now(), updated_at = now()
                WHERE j.id = ANY (v_ids)
                  AND CASE WHEN j.ready_xid = v_xids[array_position(v_ids, j.id)]
                                AND j.status IN ('queued', 'failed') AND j.flow_key IS NULL
                                AND (p_tasks IS NULL
                                     OR j.task = ANY (p_tasks)
                                        AND (j.task_version IS NULL
                                             OR j.task || '@' || j.task_version = ANY (p_tasks)))
                           THEN true ELSE false END
                RETURNING j.id AS l_id, j.task AS l_task, j.queue AS l_queue,
                          j.payload::text AS l_payload, j.priority AS l_priority,
                          j.attempts AS l_attempts, j.max_attempts AS l_max_attempts,
                          j.lease_token AS l_lease_token, extract(epoch FROM j.lease)::float8 AS l_lease,
                          j.metadata::text AS l_metadata, j.flow_key AS l_flow_key,
                          j.task_version AS l_task_version
            )
            SELECT lj.l_id, lj.l_task, lj.l_queue, lj.l_payload, lj.l_priority, lj.l_attempts,
                   lj.l_max_attempts, lj.l_lease_token, lj.l_lease, lj.l_metadata, lj.l_flow_key,
                   lj.l_task_version, NULL::boolean, NULL::integer, NULL::integer, NULL::integer
            FROM leased lj ORDER BY array_position(v_ids, lj.l_id);
            GET DIAGNOSTICS v_count = ROW_COUNT;
            v_left := v_left - v_count;
            CONTINUE WHEN v_count = cardinality(v_ids) OR p_tasks IS NULL;
            -- Some not leased: gone on (taken, cancelled, made ready again), or of a task this
            -- worker does not know: made ready again when a live worker knows it (ticketed anew, at
            -- its lane's end), parked (ready_xid NULL) otherwise.
            UPDATE {schema}.jobs j
            SET ready_xid = CASE WHEN EXISTS (
                    SELECT FROM {schema}.workers wk
                    WHERE wk.last_seen_at > now() - interval '1 minute'
                      AND (wk.tasks IS NULL
                           OR CASE WHEN j.task_version IS NULL THEN j.task
                                   ELSE j.task || '@' || j.task_version END = ANY (wk.tasks)))
                THEN pg_current_xact_id() END
            WHERE j.id = ANY (v_ids)
              AND CASE WHEN j.ready_xid = v_xids[array_position(v_ids, j.id)]
                            AND j.status IN ('queued', 'failed') AND j.flow_key IS NULL
                       THEN true ELSE false END;
            GET DIAGNOSTICS v_count = ROW_COUNT;
            v_strays := v_strays + v_count;
        END LOOP;
    END IF;

    id := NULL; task := NULL; queue := NULL; payload := NULL; priority := NULL;
    attempts := NULL; max_attempts := NULL; lease_token := NULL; lease := NULL;
    metadata := NULL; flow_key := NULL; task_version := NULL;
    ticked := v_ticked; took := v_took; passed := v_took - v_strays; held := v_held;
    RETURN NEXT;
END
$$;

-- The stable read interface (dashboards, reports, BI): the columns it always had, listed, so a
-- column of the engine's own (ready_xid) stays out of it.
CREATE OR REPLACE VIEW {schema}.jobs_all AS
    SELECT id, task, queue, payload, status, priority, run_at, attempts, max_attempts, lease,
           locked_by, locked_until, lease_token, idempotency_key, dedupe_key, progress, stage,
           last_error, error_type, started_at, created_at, updated_at, finished_at, metadata,
           flow_key, result, snoozes, wait_notify, unique_for_key, parents_left, has_dependents,
           on_parent_failure, receives, workflow_id, waiting_for, task_version, base_priority
    FROM {schema}.jobs
    UNION ALL
    SELECT id, task, queue, payload, status, priority, run_at, attempts, max_attempts, lease,
           locked_by, locked_until, lease_token, idempotency_key, dedupe_key, progress, stage,
           last_error, error_type, started_at, created_at, updated_at, finished_at, metadata,
           flow_key, result, snoozes, wait_notify, unique_for_key, parents_left, has_dependents,
           on_parent_failure, receives, workflow_id, waiting_for, task_version, base_priority
    FROM {schema}.jobs_history;

COMMENT ON COLUMN {schema}.jobs.ready_xid IS
    'The transaction that last made the job ready to run (insert, retry, release, snooze...): the next tick gives it a ticket. NULL: parked (no worker knew its task, or a job from before 0020) until a worker that knows its task starts.';
COMMENT ON INDEX {schema}.jobs_ready_xid_idx IS
    'The tick''s first read: waiting jobs made ready by the transactions since the last tick.';
COMMENT ON INDEX {schema}.jobs_parked_idx IS
    'Parked jobs (no ticket) by task: made ready again by a worker that knows the task.';
COMMENT ON INDEX {schema}.jobs_later_idx IS
    'The tick''s second read: jobs made ready to run later, by run_at.';
COMMENT ON TABLE {schema}.lanes IS
    'One lane of tickets per queue, priority and shard.';
COMMENT ON TABLE {schema}.tickets IS
    'Insert-only: the order in which a lane''s jobs are claimed (seq). Deleted once behind their lane''s cursor.';
COMMENT ON TABLE {schema}.ticks IS
    'Insert-only: each tick''s snapshot and time, which the next tick starts from.';
COMMENT ON TABLE {schema}.lane_claims IS
    'Insert-only: each claim''s last ticket; a lane''s cursor is its greatest to_seq.';
COMMENT ON COLUMN {schema}.jobs_history.ready_xid IS
    'Unused in the history (jobs.ready_xid is the engine''s own): kept so that jobs and jobs_history have the same columns.';
COMMENT ON COLUMN {schema}.lanes.id IS 'The lane''s number, as tickets and lane_claims name it.';
COMMENT ON COLUMN {schema}.lanes.queue IS 'The queue of the lane''s jobs.';
COMMENT ON COLUMN {schema}.lanes.priority IS 'The priority of the lane''s jobs: claims serve the lowest first.';
COMMENT ON COLUMN {schema}.lanes.shard IS 'Which of the queue and priority''s lanes (job id modulo their number).';
COMMENT ON COLUMN {schema}.tickets.lane IS 'The lane the ticket is in.';
COMMENT ON COLUMN {schema}.tickets.seq IS 'Its place in the lane: the tick''s id shifted left 24 bits, plus its rank in the tick.';
COMMENT ON COLUMN {schema}.tickets.job_id IS 'The job it is for.';
COMMENT ON COLUMN {schema}.tickets.ready_xid IS 'The job''s ready_xid when ticketed: a claim leases the job only if it is still that (a job made ready again has a newer ticket).';
COMMENT ON COLUMN {schema}.ticks.id IS 'The tick''s number: its tickets'' seqs start at id << 24.';
COMMENT ON COLUMN {schema}.ticks.prev_id IS 'The tick it follows (unique: one tick after each).';
COMMENT ON COLUMN {schema}.ticks.snap IS 'The snapshot the tick read jobs by: the next reads the transactions since.';
COMMENT ON COLUMN {schema}.ticks.at IS 'Its time: the next tick tickets the jobs come due after it.';
COMMENT ON COLUMN {schema}.lane_claims.lane IS 'The lane a claim took tickets from.';
COMMENT ON COLUMN {schema}.lane_claims.to_seq IS 'The last ticket it took: the lane''s cursor is the greatest.';
REVOKE EXECUTE ON FUNCTION {schema}.claim_tickets(text, integer, text[], text[]) FROM PUBLIC;
COMMENT ON FUNCTION {schema}.claim_tickets(text, integer, text[], text[]) IS
    'claim_jobs'' claim: a tick, then the lanes'' next tickets and their jobs, leased.';
COMMENT ON FUNCTION {schema}.jobs_ready_again() IS
    'Trigger: a job made to wait again (retry, release, snooze, operator) is made ready anew.';
