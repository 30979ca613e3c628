-- 0006: a succeeded job's final attempt is recorded by the job row, not by a history row.
-- From this version on, claim_jobs and finish_jobs write no job_attempts row for a success (it
-- cost ~20% of a drain); the row keeps locked_by (the worker that ran the attempt), attempts,
-- started_at and finished_at, and list_job_attempts shows it as the last attempt. History rows
-- written for such attempts before this version would be shown twice: their worker moves to the
-- job row and they go.
UPDATE {schema}.jobs j
SET locked_by = a.worker
FROM {schema}.job_attempts a
WHERE a.job_id = j.id AND a.attempt = j.attempts AND a.outcome = 'succeeded'
  AND j.status = 'succeeded';

DELETE FROM {schema}.job_attempts a
USING {schema}.jobs j
WHERE a.job_id = j.id AND a.attempt = j.attempts AND a.outcome = 'succeeded'
  AND j.status = 'succeeded';
