-- 0013: durable handlers (issue 15): steps, sleeps and events.
--
-- A step's result is an effect (the effects ledger, key 'step:<job>:<name>'): no table of its
-- own. A handler that sleeps or waits for an event suspends its job: the job goes back to
-- 'queued' with run_at at its wake-up time (the attempt is not counted, no lease is held, its
-- worker slot is free), and runs again from the top on any worker, where finished steps return
-- their stored results. A job waiting for an event carries its key in waiting_for; emitting
-- the event sets its run_at to now.
ALTER TABLE {schema}.jobs ADD COLUMN waiting_for text;
CREATE INDEX jobs_waiting_for_idx ON {schema}.jobs (waiting_for) WHERE waiting_for IS NOT NULL;

CREATE TABLE {schema}.events (
    key        text        PRIMARY KEY,
    payload    jsonb,
    emitted_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_emitted_idx ON {schema}.events (emitted_at);

ALTER TABLE {schema}.job_attempts DROP CONSTRAINT job_attempts_outcome_check;
ALTER TABLE {schema}.job_attempts ADD CONSTRAINT job_attempts_outcome_check
    CHECK (outcome IN ('succeeded', 'failed', 'dead', 'lost', 'released', 'cancelled', 'snoozed',
                       'suspended'));

-- The final state of a job someone waits for (app.jobs.wait sets wait_notify) is announced on
-- the schema's done channel by this trigger, whatever statement ended the job (a completion, a
-- reap, a cancel, a parent's failure, other SQL). It replaces a NOTIFY step in each of those
-- statements: the claim statement's share of it cost ~5-10% of a drain of no-op jobs, and
-- the trigger's WHEN, false for every job nobody waits for, costs nothing measurable.
CREATE FUNCTION {schema}.notify_done() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_done', NEW.id::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_notify_done
    AFTER UPDATE OF status ON {schema}.jobs
    FOR EACH ROW
    WHEN (NEW.wait_notify AND NEW.status IN ('succeeded', 'dead', 'cancelled')
          AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION {schema}.notify_done();
COMMENT ON FUNCTION {schema}.notify_done() IS
    'Trigger: a job someone waits for (wait_notify) reached a final state; NOTIFY <schema>_done with its id.';

COMMENT ON COLUMN {schema}.jobs.waiting_for IS
    'The event key a suspended job waits for (current_job().wait_for); emitting it wakes the job. NULL otherwise.';
COMMENT ON INDEX {schema}.jobs_waiting_for_idx IS 'The jobs an emitted event wakes.';
COMMENT ON TABLE {schema}.events IS
    'Events (app.events.emit): the first emission of a key is kept, later ones are ignored, so a handler waiting for it sees it once, whether it was emitted before, during or after the wait began. Pruned by retention.';
COMMENT ON COLUMN {schema}.events.key IS 'What happened, e.g. ''invoice_paid:812''.';
COMMENT ON COLUMN {schema}.events.payload IS 'What wait_for returns (JSON).';
COMMENT ON COLUMN {schema}.events.emitted_at IS 'When it was first emitted.';
COMMENT ON INDEX {schema}.events_emitted_idx IS 'Retention prunes old events by it.';
COMMENT ON COLUMN {schema}.job_attempts.outcome IS
    'failed: the handler raised, a retry follows; dead: failed and gave up; lost: lease expired (worker killed or stalled); released: handed back by a stopping worker, not counted; cancelled: cancelled while running, or the handler raised Cancel; snoozed: the handler raised Snooze, the job waits again and the attempt is not counted; suspended: the handler slept or waited for an event (current_job().sleep / wait_for), not counted; succeeded: copied from the job row when an operator retried a succeeded job.';
