-- 0015: worker processes run by a supervisor (`cronbase worker --processes N`, issue 24).
--
-- Each process a supervisor runs is a worker with a row of its own; this column names the
-- supervisor (host:pid), so the Workers page and `cronbase workers` group its processes. Nullable
-- without a default: adding it rewrites nothing, and workers of the previous version (which do
-- not name the column) leave it NULL, as does a worker started on its own.
ALTER TABLE {schema}.workers ADD COLUMN supervisor text;

COMMENT ON COLUMN {schema}.workers.supervisor IS
    'The supervisor (cronbase worker --processes) that runs this worker process, as host:pid; NULL for a worker started on its own.';
