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
-- never the rows claimed before it (their entries are behind it).
CREATE INDEX jobs_ready_xid_idx ON {schema}.jobs (ready_xid) WHERE ready_xid IS NOT NULL;
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

-- What a tick reads of jobs (the tick fragment, db/sql/tickets.sql): the jobs made ready by the
-- transactions at or past the last tick's horizon (xmax) and by those still running at the last
-- tick (its xip): PgQ's two-snapshot rule, which never looks at a snapshot's xmin, the very thing
-- an idle transaction holds still; is_ready says which of them are waiting, plain and due by
-- `p_at`. And the jobs made ready before the last tick (visible in its snapshot) that came due
-- since (jobs_later_idx's slice of run_at). A function for one reason: to plan these reads with
-- seq scans off. The planner cannot see how narrow the ranges are (bounds from snapshots), and
-- on a small table it read all of jobs instead: every dead row a held horizon keeps. STABLE: it
-- reads with the snapshot of the claim that calls it, the one p_snap is.
CREATE FUNCTION {schema}.ready_since(
    p_prev_snap pg_snapshot, p_snap pg_snapshot, p_prev_at timestamptz, p_at timestamptz
) RETURNS TABLE (
    id bigint, queue text, priority smallint, run_at timestamptz, ready_xid xid8,
    is_ready boolean
)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
AS $$
BEGIN
    RETURN QUERY
    SELECT j.id, j.queue, j.priority, j.run_at, j.ready_xid,
           j.status IN ('queued', 'failed') AND j.flow_key IS NULL AND j.run_at <= p_at
    FROM {schema}.jobs j
    WHERE j.ready_xid >= pg_snapshot_xmax(p_prev_snap) AND j.ready_xid < pg_snapshot_xmax(p_snap)
    UNION ALL
    SELECT j.id, j.queue, j.priority, j.run_at, j.ready_xid,
           j.status IN ('queued', 'failed') AND j.flow_key IS NULL AND j.run_at <= p_at
    FROM {schema}.jobs j
    WHERE j.ready_xid = ANY (ARRAY(SELECT pg_snapshot_xip(p_prev_snap)))
    UNION ALL
    SELECT j.id, j.queue, j.priority, j.run_at, j.ready_xid, true
    FROM {schema}.jobs j
    WHERE j.run_at > p_prev_at AND j.run_at <= p_at
      AND j.status IN ('queued', 'failed') AND j.flow_key IS NULL AND j.run_at > j.created_at
      AND pg_visible_in_snapshot(j.ready_xid, p_prev_snap);
END
$$;

-- A lane's first tickets past its cursor, in order: an ordered walk of tickets_pkey that stops
-- after p_limit, however many tickets wait behind them (a backlog). A function, planned with
-- bitmap scans and sorts off, for the same reason as ready_since: on a small table the planner
-- chose a bitmap scan of every ticket past the cursor and a sort, and a prepared claim keeps the
-- plan it settled on while the lane fills.
CREATE FUNCTION {schema}.next_tickets(p_lane integer, p_after bigint, p_limit integer)
RETURNS TABLE (seq bigint, job_id bigint, ready_xid xid8)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
AS $$
BEGIN
    RETURN QUERY
    SELECT t.seq, t.job_id, t.ready_xid FROM {schema}.tickets t
    WHERE t.lane = p_lane AND t.seq > p_after
    ORDER BY t.seq LIMIT p_limit;
END
$$;

-- A lane: the tickets of one queue and priority, spread over a few shards so that several
-- claims run at once (a claim holds its lane, not the others).
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
    'The tick''s first read: jobs made ready by the transactions since the last tick.';
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
COMMENT ON FUNCTION {schema}.ready_since(pg_snapshot, pg_snapshot, timestamptz, timestamptz) IS
    'What a tick reads of jobs: those made ready since the last tick, and those come due since.';
COMMENT ON FUNCTION {schema}.next_tickets(integer, bigint, integer) IS
    'A lane''s first tickets past its cursor, in order.';
COMMENT ON FUNCTION {schema}.jobs_ready_again() IS
    'Trigger: a job made to wait again (retry, release, snooze, operator) is made ready anew.';
