-- 0016: worker processes run by a supervisor (`cronbase worker --processes N`), and the code
-- each worker runs (rolling deploys), issue 24.
--
-- Each process a supervisor runs is a worker with a row of its own; `supervisor` names the
-- supervisor (host:pid), so the Workers page and `cronbase workers` group its processes.
-- `version` and `schema_version` say which code a worker runs, so an operator sees a deploy's
-- progress and `cronbase migrate` can refuse a contract migration while a worker older than it
-- needs is alive (db/migrate.py). Nullable without a default: adding them rewrites nothing, and
-- workers of the previous version (which do not name the columns) leave them NULL, read as
-- "older than any contract migration".
-- migrations.contract_from records, for a contract migration, the lowest migration a worker's
-- code must know: a worker whose code is older than the schema starts (a restart mid-deploy)
-- unless a newer migration is a contract one it is too old for (migrate.require_current).
ALTER TABLE {schema}.workers
    ADD COLUMN supervisor text,
    ADD COLUMN version text,
    ADD COLUMN schema_version integer;

ALTER TABLE {schema}.migrations ADD COLUMN contract_from integer;

COMMENT ON COLUMN {schema}.migrations.contract_from IS
    'For a contract migration (its file says -- contract: workers from NNNN), the lowest migration a worker''s code must know to run against this schema; NULL for an expand migration, which code of any earlier version lives with.';
COMMENT ON COLUMN {schema}.workers.supervisor IS
    'The supervisor (cronbase worker --processes) that runs this worker process, as host:pid; NULL for a worker started on its own.';
COMMENT ON COLUMN {schema}.workers.version IS
    'The cronbase package version this worker runs, written at registration; NULL for a worker of a release before 0016.';
COMMENT ON COLUMN {schema}.workers.schema_version IS
    'The newest migration this worker''s code knows, written at registration; cronbase migrate refuses a contract migration while a live worker is below what it needs. NULL: a release before 0016.';
