-- Each queue's minute by minute (migration 0022): written once a minute for the whole fleet by
-- the worker whose reaper round marks the minute first (worker/rollup.py), read by the console's
-- queue page and app.queues.minutes() (operations/queue_minutes.py).

-- name: mark_queue_minute
-- Elect the worker that rolls up the last whole minute ended ten seconds ago (so the claims
-- that started attempts in it have committed): the first insert of its marker row (queue '')
-- wins; every other worker's conflicts, returns nothing, and writes nothing. In the roll-up's
-- transaction: a roll-up that fails takes its marker with it, and the next round tries again.
-- The advisory lock (%(key)s, held to the transaction's end) keeps a second worker from waiting
-- on the winner's uncommitted marker: it finds the lock taken and returns at once.
INSERT INTO {schema}.queue_minutes (queue, minute)
SELECT '', date_trunc('minute', now() - interval '70 seconds')
WHERE pg_try_advisory_xact_lock(%(key)s)
ON CONFLICT DO NOTHING
RETURNING minute;

-- name: roll_up_queue_minute
-- Per queue, the minute %(minute)s: the jobs due and running now, and the attempts started in
-- it with their pickup waits (started_at - run_at) counted per bucket of %(bounds)s
-- (width_bucket: 0 below the first bound, n at or above the last of n). Attempts come from the
-- live table (running; failed or snoozed to run again) and from the history's rows finished
-- since the minute began (its finished_at index and day partitions). One read of the live
-- table a minute for the fleet. An attempt whose job started again before the roll-up counts
-- by its latest start.
WITH started AS (
    SELECT queue, started_at - run_at AS waited
    FROM {schema}.jobs
    WHERE started_at >= %(minute)s AND started_at < %(minute)s + interval '1 minute'
    UNION ALL
    SELECT queue, started_at - run_at
    FROM {schema}.jobs_history
    WHERE finished_at >= %(minute)s
      AND started_at >= %(minute)s AND started_at < %(minute)s + interval '1 minute'
), counted AS (
    SELECT queue, width_bucket(extract(epoch FROM waited)::float8, %(bounds)s::float8[]) AS bucket,
           count(*)::integer AS n
    FROM started
    GROUP BY 1, 2
), waits AS (
    SELECT q.queue, sum(c.n)::integer AS started,
           array_agg(COALESCE(c.n, 0) ORDER BY b.bucket) AS waits
    FROM (SELECT DISTINCT queue FROM counted) q
    CROSS JOIN generate_series(0, cardinality(%(bounds)s::float8[])) AS b(bucket)
    LEFT JOIN counted c ON c.queue = q.queue AND c.bucket = b.bucket
    GROUP BY q.queue
), live AS (
    SELECT queue,
           count(*) FILTER (WHERE status IN ('queued', 'failed') AND run_at <= now())::integer
               AS due,
           count(*) FILTER (WHERE status = 'running')::integer AS running
    FROM {schema}.jobs
    WHERE status IN ('queued', 'failed', 'running')
    GROUP BY queue
)
INSERT INTO {schema}.queue_minutes (queue, minute, due, running, started, waits)
SELECT queue, %(minute)s, COALESCE(l.due, 0), COALESCE(l.running, 0),
       COALESCE(w.started, 0), COALESCE(w.waits, '{{}}')
FROM live l FULL JOIN waits w USING (queue)
WHERE COALESCE(l.due, 0) + COALESCE(l.running, 0) + COALESCE(w.started, 0) > 0
ON CONFLICT (minute, queue) DO NOTHING;

-- name: prune_queue_minutes
-- The minutes older than %(keep)s: by the roll-up's winner, once a minute, a minute's rows at a
-- time (the primary key's range).
DELETE FROM {schema}.queue_minutes WHERE minute < now() - %(keep)s::interval;

-- name: queue_minutes
-- The minutes of the last %(window)s of the queues %(queues)s (NULL: all), oldest first, with
-- the markers (queue ''): a marked minute with no row for a queue had nothing of it.
SELECT queue, minute, due, running, started, waits
FROM {schema}.queue_minutes
WHERE minute >= date_trunc('minute', now() - %(window)s::interval)
  AND (%(queues)s::text[] IS NULL OR queue = '' OR queue = ANY(%(queues)s::text[]))
ORDER BY minute, queue;
