-- 0021: what each worker has done since it started, for the Workers page (issue 37).
--
-- A worker counts in memory the jobs it finished (succeeded) and its attempts that failed
-- (to be retried, or dead), and writes both totals with the heartbeat it already sends: one
-- row it updates anyway, no statement more. The history cannot say it cheaply: it is pruned
-- by age, and counting a long-lived worker's rows on every poll of the page reads weeks of it.
-- Nullable without a default: adding them rewrites nothing, and a worker of the previous
-- release (which does not name them) leaves them NULL, shown as "not counted".
ALTER TABLE {schema}.workers
    ADD COLUMN succeeded_jobs bigint,
    ADD COLUMN failed_attempts bigint;

COMMENT ON COLUMN {schema}.workers.succeeded_jobs IS
    'Jobs this worker finished successfully since it started, as of its last heartbeat; NULL for a worker of a release before 0021.';
COMMENT ON COLUMN {schema}.workers.failed_attempts IS
    'Attempts this worker ran that failed (to be retried, or dead) since it started, as of its last heartbeat; NULL for a worker of a release before 0021.';
