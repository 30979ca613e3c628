-- 0019: priority aging (issue 26), and no truncation of the hot table by autovacuum.
--
-- Aging: app.queues.set_aging(queue, every, step) makes a waiting job of the queue gain `step`
-- priority (lower runs first) for each `every` it has been due, down to 0 at most, so a
-- low-priority job is never passed over forever by a stream of higher-priority ones. The
-- workers' reaper round writes the aged priority into jobs.priority (age_priorities in
-- db/sql/jobs.sql), so every claim orders by it unchanged and a queue without aging pays
-- nothing. jobs.base_priority keeps the priority the job was deferred with once aging changed it.
--
-- Expand-only: nullable columns without defaults (nothing is rewritten); code of 0018 ignores
-- them and never ages.
ALTER TABLE {schema}.queues
    ADD COLUMN aging_every interval CHECK (aging_every > interval '0'),
    ADD COLUMN aging_step integer CHECK (aging_step > 0),
    ADD COLUMN aged_at timestamptz;
ALTER TABLE {schema}.jobs ADD COLUMN base_priority smallint;
ALTER TABLE {schema}.jobs_history ADD COLUMN base_priority smallint;

-- The view's * was expanded when it was made: make it again to carry the new column.
CREATE OR REPLACE VIEW {schema}.jobs_all AS
    SELECT * FROM {schema}.jobs UNION ALL SELECT * FROM {schema}.jobs_history;

-- Autovacuum ends a run by truncating the empty pages at the table's end, under an ACCESS
-- EXCLUSIVE lock that stops every claim, completion and defer until it is done. The hot table's
-- tail empties and fills all day, so it was truncated again and again: a 20-minute soak at 10%
-- of capacity saw pickup p99 of 0.4-1.2 s at moments with nothing else going on, and none once
-- truncation was off (bench/README.md, the soak). The pages stay and are reused.
ALTER TABLE {schema}.jobs SET (vacuum_truncate = false);

COMMENT ON COLUMN {schema}.queues.aging_every IS
    'Priority aging: a waiting job of the queue gains aging_step priority for each aging_every it has been due, down to 0 at most; NULL: no aging.';
COMMENT ON COLUMN {schema}.queues.aging_step IS
    'How much priority a job gains for each aging_every it waits.';
COMMENT ON COLUMN {schema}.queues.aged_at IS
    'When a worker last aged the queue''s jobs (age_priorities): a queue is aged at most every min(aging_every / 4, 30 s).';
COMMENT ON COLUMN {schema}.jobs.base_priority IS
    'The priority the job was deferred with, once priority aging lowered its priority; NULL: never aged.';
COMMENT ON COLUMN {schema}.jobs_history.base_priority IS
    'The priority the job was deferred with, once priority aging lowered its priority; NULL: never aged.';
