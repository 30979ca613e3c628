-- Schedules: definitions, and the statements a tick runs. Slots are computed in Python (cronsim)
-- from the row's next_fire_at and the database clock, never the app server's.

-- name: database_now
SELECT now();

-- name: upsert_schedule
-- Create or redefine a schedule. The next slot is recomputed only when the timing changed, so a
-- worker restart that re-declares the same schedule does not skip or repeat a slot; a paused
-- schedule stays paused.
INSERT INTO {schema}.schedules AS s (key, task, payload, queue, cron, tz, catch_up, max_catch_up,
                                     source, next_fire_at)
VALUES (%(key)s, %(task)s, %(payload)s::jsonb, %(queue)s, %(cron)s, %(tz)s, %(catch_up)s,
        %(max_catch_up)s, %(source)s, %(next_fire_at)s)
ON CONFLICT (key) DO UPDATE
SET task = excluded.task,
    payload = excluded.payload,
    queue = excluded.queue,
    cron = excluded.cron,
    tz = excluded.tz,
    catch_up = excluded.catch_up,
    max_catch_up = excluded.max_catch_up,
    source = excluded.source,
    next_fire_at = CASE WHEN (s.cron, s.tz) IS DISTINCT FROM (excluded.cron, excluded.tz)
                        THEN excluded.next_fire_at ELSE s.next_fire_at END,
    updated_at = now()
RETURNING *;

-- name: list_schedules
SELECT * FROM {schema}.schedules ORDER BY key;

-- name: schedule_lateness
-- The metrics' view of each schedule: how long ago its next slot came without being fired, by
-- the database's clock (0 while the slot is ahead, and for a paused schedule, whose slots are
-- skipped on purpose). A running scheduler fires a slot within a tick, so lateness that keeps
-- growing means no worker with schedule=True and no `cronbase tick` runs.
SELECT key, CASE WHEN is_paused THEN 0
                 ELSE greatest(0, extract(epoch FROM now() - next_fire_at)) END::float8
            AS late_seconds
FROM {schema}.schedules
ORDER BY key;

-- name: get_schedule
SELECT * FROM {schema}.schedules WHERE key = %(key)s;

-- name: pause_schedule
UPDATE {schema}.schedules SET is_paused = true, updated_at = now()
WHERE key = %(key)s
RETURNING *;

-- name: resume_schedule
-- Slots that passed while paused are not run: the next slot is the first one after now.
UPDATE {schema}.schedules
SET is_paused = false, next_fire_at = %(next_fire_at)s, updated_at = now()
WHERE key = %(key)s
RETURNING *;

-- name: remove_schedule
-- Every column back: the audit row of the removal keeps what the schedule was.
DELETE FROM {schema}.schedules WHERE key = %(key)s RETURNING *;

-- name: lock_due_schedules
-- SKIP LOCKED shares due schedules out among concurrent tickers; a ticker that waits for none
-- sees, once the other commits, the moved next_fire_at and leaves the row alone. A ticker takes
-- only schedules of tasks it knows: a process with part of the registry leaves the rest due for
-- one that can fire them with the task's options.
SELECT * FROM {schema}.schedules
WHERE NOT is_paused AND next_fire_at <= %(now)s AND task = ANY(%(tasks)s)
ORDER BY next_fire_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: advance_schedule
UPDATE {schema}.schedules
SET last_fired_at = COALESCE(%(last_fired_at)s, last_fired_at),
    next_fire_at = %(next_fire_at)s,
    updated_at = now()
WHERE key = %(key)s;
