-- Dependencies and workflows (issue 15): jobs that wait for other jobs. Migration 0012 holds the
-- trigger that releases or cancels a waiting job when its parents end; these statements insert
-- the graphs and read them back.

-- name: insert_graph
-- Insert a graph of jobs in one statement: nodes (arrays in node order, 1-based ordinals) and
-- edges (child ordinal -> a parent that is a node of this graph, or an existing job's id).
-- Existing parents are marked has_dependents first: that UPDATE takes their row locks, so a
-- worker finishing one waits for this transaction and its trigger then sees the new children
-- (an AFTER trigger's statements read a snapshot taken after the lock). A node waits
-- ('pending') for each parent not yet succeeded; a parent already dead or cancelled cancels it
-- at once (or counts as done for on_parent_failure 'run'), as the trigger would have; only a
-- graph without edges between its own nodes may name existing parents (graph.py), so such a
-- node has no children here to cancel in turn.
-- Ids are drawn from the table's sequence up front, so edges and workflow_id can name them in
-- the same statement. When an existing parent is not found, nothing is inserted: one row with
-- a NULL id carries the missing parents' ids.
WITH existing_live AS (
    UPDATE {schema}.jobs SET has_dependents = true
    WHERE id = ANY (%(after)s::bigint[])
    RETURNING id, task, status
), existing_done AS (
    -- A parent that finished already: its row in the history notes its dependents too (a retry
    -- of it puts back the ones its failure cancels). Read in this statement's snapshot: a parent
    -- finishing at this moment may be in neither; the caller asks again once (graph.py).
    UPDATE {schema}.jobs_history SET has_dependents = true
    WHERE id = ANY (%(after)s::bigint[])
    RETURNING id, task, status
), existing AS (
    SELECT * FROM existing_live UNION ALL SELECT * FROM existing_done
), missing AS (
    SELECT array_agg(a.id ORDER BY a.id) AS ids
    FROM unnest(%(after)s::bigint[]) AS a(id)
    WHERE NOT EXISTS (SELECT FROM existing e WHERE e.id = a.id)
), node AS MATERIALIZED (
    SELECT n.ord, nextval(pg_get_serial_sequence('{schema}.jobs', 'id')) AS id, n.task, n.queue,
           n.payload, n.priority, n.run_at, n.delay, n.max_attempts, n.lease, n.metadata,
           n.flow_key, n.receives, n.on_parent_failure, n.task_version
    FROM unnest(%(tasks)s::text[], %(queues)s::text[], %(payloads)b::text[]::jsonb[],
                %(priorities)s::smallint[], %(run_ats)s::timestamptz[], %(delays)s::interval[],
                %(max_attempts)s::integer[], %(leases)s::interval[], %(metadata)s::text[]::jsonb[],
                %(flow_keys)s::text[], %(receives)s::text[], %(on_parent_failure)s::text[],
                %(task_versions)s::integer[])
        WITH ORDINALITY AS n(task, queue, payload, priority, run_at, delay, max_attempts, lease,
                             metadata, flow_key, receives, on_parent_failure, task_version, ord)
    WHERE (SELECT ids FROM missing) IS NULL
), edge AS MATERIALIZED (
    SELECT e.child_ord, COALESCE(p.id, e.parent_id) AS parent, e.position,
           COALESCE(x.status, 'new') AS parent_status,
           x.id AS failed_id, x.task AS failed_task
    FROM unnest(%(edge_child)s::integer[], %(edge_parent)s::integer[],
                %(edge_parent_id)s::bigint[], %(edge_position)s::integer[])
        AS e(child_ord, parent_ord, parent_id, position)
    LEFT JOIN node p ON p.ord = e.parent_ord
    LEFT JOIN existing x ON x.id = e.parent_id
    WHERE (SELECT ids FROM missing) IS NULL
), parent_node AS (
    SELECT DISTINCT parent FROM edge
), tally AS (
    SELECT n.ord,
           count(*) FILTER (
               WHERE e.parent_status <> 'succeeded'
                 AND NOT (e.parent_status IN ('dead', 'cancelled') AND n.on_parent_failure = 'run')
           ) AS waiting,
           min(format('parent job %%s (%%s) is %%s', e.failed_id, e.failed_task, e.parent_status))
               FILTER (WHERE e.parent_status IN ('dead', 'cancelled')
                         AND n.on_parent_failure = 'cancel') AS failure
    FROM node n LEFT JOIN edge e ON e.child_ord = n.ord
    GROUP BY n.ord
), ins AS (
    INSERT INTO {schema}.jobs (id, task, queue, payload, priority, run_at, max_attempts, lease,
                               metadata, flow_key, status, parents_left, has_dependents,
                               on_parent_failure, receives, workflow_id, finished_at, last_error,
                               error_type, task_version)
    SELECT n.id, n.task, n.queue, n.payload, n.priority,
           COALESCE(n.run_at, now() + n.delay), n.max_attempts, n.lease, n.metadata, n.flow_key,
           CASE WHEN t.failure IS NOT NULL THEN 'cancelled'
                WHEN t.waiting > 0 THEN 'pending' ELSE 'queued' END,
           CASE WHEN t.failure IS NOT NULL THEN 0 ELSE t.waiting END,
           pn.parent IS NOT NULL,
           n.on_parent_failure, n.receives,
           (SELECT w.id FROM node w WHERE w.ord = %(workflow)s),
           CASE WHEN t.failure IS NOT NULL THEN now() END,
           t.failure,
           CASE WHEN t.failure IS NOT NULL THEN 'ParentFailed' END,
           n.task_version
    FROM node n JOIN tally t ON t.ord = n.ord LEFT JOIN parent_node pn ON pn.parent = n.id
    ORDER BY n.ord
    RETURNING id, status, queue, run_at
), deps AS (
    INSERT INTO {schema}.job_deps (child, parent, position)
    SELECT c.id, e.parent, e.position FROM edge e JOIN node c ON c.ord = e.child_ord
), notified AS (
    SELECT pg_notify(%(channel)s, q.queue)
    FROM (SELECT DISTINCT queue FROM ins WHERE status = 'queued' AND run_at <= now()) q
)
SELECT n.ord, n.id, i.status, NULL::bigint[] AS missing
FROM node n JOIN ins i ON i.id = n.id, (SELECT count(*) FROM notified) c
UNION ALL
SELECT NULL, NULL, NULL, ids FROM missing WHERE ids IS NOT NULL
ORDER BY 1;

-- name: job_graph
-- The graph a job belongs to, for jobs show and the dashboard: every job of its workflow (by
-- jobs_workflow_idx and jobs_history_workflow_idx), or for a job outside one, the job with its
-- parents and children; each with its parents in order. At most %(limit)s jobs, the first by id.
WITH start AS (
    SELECT id, workflow_id FROM {schema}.jobs_all WHERE id = %(id)s
), members AS (
    SELECT j.id FROM {schema}.jobs_all j JOIN start s ON j.workflow_id = s.workflow_id
    UNION
    SELECT id FROM start
    UNION
    SELECT d.parent FROM {schema}.job_deps d JOIN start s ON d.child = s.id
    UNION
    SELECT d.child FROM {schema}.job_deps d JOIN start s ON d.parent = s.id
)
SELECT j.id, j.task, j.status, j.result, j.parents_left, j.workflow_id, j.last_error,
       ARRAY(SELECT d.parent FROM {schema}.job_deps d WHERE d.child = j.id
             ORDER BY d.position NULLS FIRST, d.parent) AS parents,
       (SELECT count(*) FROM members) AS total
FROM (SELECT id FROM members ORDER BY id LIMIT %(limit)s) m
JOIN {schema}.jobs_all j ON j.id = m.id
ORDER BY j.id;

-- name: lock_event_keys
-- Before suspend_jobs, in its transaction: try the advisory lock of each event key the jobs
-- will wait for. emit_event holds the same lock while it records the event and wakes the
-- waiters, so either it committed before our next statement reads the events (which then sees
-- the event), or it waits for our commit (and its wake-up then sees our waiting job). A key
-- being emitted right now (not locked here) is looked at again a second later.
SELECT k AS key,
       pg_try_advisory_xact_lock(hashtextextended('cronbase:' || %(schema)s || ':event:' || k, 0))
           AS locked
FROM unnest(%(keys)s::text[]) AS k;

-- name: suspend_jobs
-- Suspend attempts that slept or waited for an event: queued again at the wake-up time (the
-- attempt not counted, the lease and slot given back), fenced by the lease token. A job waiting
-- for an event already emitted is due at once; one with no timeout waits until 9999 (psycopg
-- cannot read 'infinity' as a datetime). A history row says what it waits for.
WITH o AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(wake_in)s::float8[],
                         %(waiting_for)s::text[], %(locked)s::boolean[])
        AS o(id, token, wake_in, waiting_for, locked)
), suspended AS (
    UPDATE {schema}.jobs j
    SET status = 'queued', attempts = j.attempts - 1, waiting_for = o.waiting_for,
        run_at = CASE
            WHEN o.waiting_for IS NOT NULL
                 AND EXISTS (SELECT FROM {schema}.events e WHERE e.key = o.waiting_for)
                THEN now()
            WHEN o.waiting_for IS NOT NULL AND NOT o.locked
                THEN now() + least(interval '1 second',
                                   COALESCE(make_interval(secs => o.wake_in), interval '1 second'))
            WHEN o.wake_in IS NULL THEN timestamptz '9999-12-31 00:00:00+00'
            ELSE now() + make_interval(secs => greatest(o.wake_in, 0)) END,
        locked_by = NULL, locked_until = NULL, lease_token = NULL, updated_at = now()
    FROM o
    WHERE j.id = o.id AND j.lease_token = o.token
    RETURNING j.id, j.attempts, j.started_at, j.run_at, j.queue, j.waiting_for
), history AS (
    INSERT INTO {schema}.job_attempts (job_id, attempt, worker, started_at, outcome, error)
    SELECT id, attempts + 1, %(worker)s, started_at, 'suspended',
           CASE WHEN waiting_for IS NOT NULL THEN format('waiting for event %%s', waiting_for)
                ELSE format('sleeping until %%s', run_at) END
    FROM suspended
), notified AS (
    SELECT pg_notify(%(channel)s, q.queue)
    FROM (SELECT DISTINCT queue FROM suspended WHERE run_at <= now()) q
)
SELECT s.id, 'queued' AS status FROM suspended s, (SELECT count(*) FROM notified) n;

-- name: lock_event_key
-- emit_event's first statement (see lock_event_keys), held until the emitting transaction ends.
SELECT pg_advisory_xact_lock(hashtextextended('cronbase:' || %(schema)s || ':event:' || %(key)s, 0));

-- name: emit_event
-- Record an event (the first emission of a key is kept; later ones change nothing) and wake the
-- jobs suspended waiting for it: due now, and a NOTIFY per queue.
WITH ins AS (
    INSERT INTO {schema}.events (key, payload) VALUES (%(key)s, %(payload)s::jsonb)
    ON CONFLICT (key) DO NOTHING
    RETURNING key
), woken AS (
    UPDATE {schema}.jobs j
    SET run_at = now(), waiting_for = NULL, updated_at = now()
    WHERE j.waiting_for = %(key)s AND j.status = 'queued'
    RETURNING j.id, j.queue
), notified AS (
    SELECT pg_notify(%(channel)s, q.queue) FROM (SELECT DISTINCT queue FROM woken) q
)
SELECT (SELECT count(*) FROM ins) AS emitted, (SELECT count(*) FROM woken) AS woken,
       (SELECT count(*) FROM notified) AS notified;

-- name: get_event
SELECT key, payload, emitted_at FROM {schema}.events WHERE key = %(key)s;
