-- 0022: each queue's minute by minute: depth, running, attempts started and their pickup waits
-- (issue 37: the console's queue page, over the last hour and day).
--
-- Written once a minute for the whole fleet by whichever worker's reaper round first inserts
-- the minute's marker row (queue ''; roll_up_queue_minute in db/sql/queues.sql), from the live
-- table and the history's newest rows: no statement on the claim or the completion path. Waits
-- are kept as counts per bucket, so any window's percentiles come from summing its minutes.
CREATE TABLE {schema}.queue_minutes (
    queue   text        NOT NULL,
    minute  timestamptz NOT NULL,
    due     integer     NOT NULL DEFAULT 0,
    running integer     NOT NULL DEFAULT 0,
    started integer     NOT NULL DEFAULT 0,
    waits   integer[]   NOT NULL DEFAULT '{{}}',
    PRIMARY KEY (minute, queue)
);
-- A queue's page reads its minutes of the last hour or day.
CREATE INDEX queue_minutes_queue_idx ON {schema}.queue_minutes (queue, minute);

COMMENT ON TABLE {schema}.queue_minutes IS
    'Per queue and minute, written once a minute by one worker: depth, running jobs, attempts started and their pickup waits by bucket. Kept 8 days.';
COMMENT ON COLUMN {schema}.queue_minutes.queue IS
    'The queue; the empty string marks the minute as rolled up (the row whose insert elects the worker that rolls it up).';
COMMENT ON COLUMN {schema}.queue_minutes.minute IS
    'The minute the row covers, from its start (database time).';
COMMENT ON COLUMN {schema}.queue_minutes.due IS
    'Jobs due (queued or failed, run_at reached) when the minute was rolled up, seconds after its end.';
COMMENT ON COLUMN {schema}.queue_minutes.running IS
    'Jobs running when the minute was rolled up.';
COMMENT ON COLUMN {schema}.queue_minutes.started IS
    'Attempts started in the minute.';
COMMENT ON COLUMN {schema}.queue_minutes.waits IS
    'Those attempts by pickup wait (started_at - run_at), counted per bucket of the bounds in operations/queue_minutes.py: waits[1] below the first bound, the last at or above the last.';
