-- 0005: a lease token exists exactly while a job runs.
-- Completion, heartbeat and release are fenced by the token alone (one primary-key probe each,
-- see jobs.sql), which is right only if no statement ends an attempt and leaves its token behind.
-- This makes that a rule of the table, not a habit of the SQL. Adding it reads the jobs table
-- once under a lock that holds writers back for that time (retention keeps the table small).
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_lease_token_iff_running
    CHECK ((status = 'running') = (lease_token IS NOT NULL));
