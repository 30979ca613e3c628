-- 0007: the insert statements send their own NOTIFY (db/sql/jobs.sql), so the AFTER INSERT
-- trigger goes. Its transition table cost ~10% of a bulk insert and ~5% of a single one. Jobs
-- inserted by other SQL than cronbase's are still run: workers poll (every second by default).
DROP TRIGGER jobs_notify_inserted ON {schema}.jobs;
DROP FUNCTION {schema}.notify_jobs_inserted();
