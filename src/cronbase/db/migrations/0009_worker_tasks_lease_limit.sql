-- 0009: each worker records the tasks it registers. Claims take only jobs of those tasks, so
-- `stats`, `check` and the dashboard can show jobs that wait for a task no live worker runs.
ALTER TABLE {schema}.workers ADD COLUMN tasks text[];

COMMENT ON COLUMN {schema}.workers.tasks IS
    'Names of the tasks this worker registers and claims (sorted); NULL for a worker of code older than migration 0009, which claims any task.';

-- A lease the claim cannot add to now() (a row written by other SQL, say 100,000,000 years) made
-- every claim statement fail with "timestamp out of range" while the row waited: one row stopped
-- all work. The API refuses leases over 36,500 days (100 years); so does the table now. NOT VALID: rows already
-- there are not checked (a full scan under lock), new and updated ones are.
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_lease_range
    CHECK (lease > interval '0' AND lease <= interval '36500 days') NOT VALID;
