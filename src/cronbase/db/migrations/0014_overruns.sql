-- 0014: handlers that ignore their timeout (issue 21).
--
-- A timed-out attempt is cancelled, but a sync handler in a thread cannot be stopped: its worker
-- keeps the slot and renews the lease until the handler returns, so the retry never runs beside
-- it. Such handlers, once past their timeout by a second, are listed by their worker with each
-- heartbeat, for the Workers page. A column on the worker's row, not the job's: it changes with
-- every beat of that worker, and the jobs table stays as narrow as it was. Nullable without a
-- default: adding it rewrites nothing, and workers of the previous version leave it NULL.
ALTER TABLE {schema}.workers ADD COLUMN overruns jsonb;

COMMENT ON COLUMN {schema}.workers.overruns IS
    'Attempts whose handler still runs past its timeout (cancelled, not yet returned), as of the last heartbeat: a JSON array of objects with job_id, task, attempt, seconds_past; NULL when none.';
