-- 0017: fair share between keys (issue 26): @app.task(fair_key="{{tenant_id}}").
--
-- A fair job carries its key in flow_key as 'fair:<queue>|<key>', so the plain claim's indexes
-- leave it out (tasks without fair_key pay nothing) and claim_fair_jobs (db/sql/fair.sql) finds
-- the keys with waiting jobs from jobs_flow_due_idx. This table holds each key's place in the
-- schedule (stride scheduling: claiming n jobs of a key advances its pass by n / weight; a claim
-- serves the keys with the lowest pass) and the weight an operator gave it. The jobs, not this
-- table, say which keys have work: a row missing or stale never strands a job.
CREATE TABLE {schema}.fair_keys (
    scope      text        PRIMARY KEY,
    weight     float8      NOT NULL DEFAULT 1
                           CHECK (weight > 0 AND weight < 'Infinity'::float8),
    pass       float8      NOT NULL DEFAULT 0,
    next_pass  float8      NOT NULL GENERATED ALWAYS AS (pass + 1 / weight) STORED,
    claimed    bigint      NOT NULL DEFAULT 0,
    is_idle    boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The order a claim serves busy keys in (the next pass each would reach) and the clock (their
-- lowest pass): read from two partial indexes, so a claim reads a few rows however many keys
-- have ever been seen.
CREATE INDEX fair_keys_next_idx ON {schema}.fair_keys (next_pass) WHERE NOT is_idle;
CREATE INDEX fair_keys_pass_idx ON {schema}.fair_keys (pass) WHERE NOT is_idle;

COMMENT ON TABLE {schema}.fair_keys IS
    'Fair share (fair_key tasks): each key''s place in the round robin and its weight. Written by claim_fair_jobs (pass, claimed, is_idle) and by operators (weight: app.queues.set_weight).';
COMMENT ON COLUMN {schema}.fair_keys.scope IS
    '''fair:<queue>|<key>'', as in jobs.flow_key.';
COMMENT ON COLUMN {schema}.fair_keys.weight IS
    'The key''s share relative to other keys of its queue (default 1): a key of weight 2 gets twice the claims of a key of weight 1 while both have due jobs.';
COMMENT ON COLUMN {schema}.fair_keys.pass IS
    'Virtual time: advanced by n / weight for n jobs claimed; a claim serves the keys with the lowest pass. A key that comes back from idle starts at the lowest pass of the busy keys (no credit banked while idle).';
COMMENT ON COLUMN {schema}.fair_keys.claimed IS
    'Jobs of the key claimed so far (the dashboard shows each key''s share from it).';
COMMENT ON COLUMN {schema}.fair_keys.is_idle IS
    'True once a claim found no due job of the key: when a claim finds it again with jobs, it starts at the busy keys'' lowest pass.';
COMMENT ON COLUMN {schema}.fair_keys.updated_at IS
    'When a claim or an operator last wrote the row.';
COMMENT ON COLUMN {schema}.fair_keys.next_pass IS
    'pass + 1 / weight (generated): where one more claim would put the key; claims serve the lowest first.';
COMMENT ON INDEX {schema}.fair_keys_next_idx IS
    'Busy keys by next_pass: the keys a claim looks at first.';
COMMENT ON INDEX {schema}.fair_keys_pass_idx IS
    'Busy keys by pass: the clock (their lowest pass), where a fresh key starts.';
COMMENT ON COLUMN {schema}.jobs.flow_key IS
    'The claim scope of a limited or fair job: ''key:<task>|<key>'' (concurrency_key), ''task:<task>'' (global_concurrency, rate_limit) or ''fair:<queue>|<key>'' (fair_key: claim_fair_jobs); NULL for any other job, which the plain claim takes. Set at defer.';
COMMENT ON INDEX {schema}.jobs_flow_due_idx IS
    'Waiting limited and fair jobs by scope, then claim order: claim_flow_jobs and claim_fair_jobs skip from scope to scope.';
