-- 0003: the effects ledger. One row per side effect, keyed by its business meaning
-- ('monthly_report:2026-10:ana@example.com'), so an effect happens once even when its job runs
-- twice. 'processing' rows older than the caller's stale_after may be taken over.

CREATE TABLE {schema}.effects (
    key         text        PRIMARY KEY,
    status      text        NOT NULL CHECK (status IN ('processing', 'done', 'failed')),
    -- Who holds it: a fresh token per entry into once(); every later write is fenced by it.
    owner       uuid        NOT NULL,
    -- The job and attempt that entered (NULL outside a job); no foreign key: pruning a job
    -- must not forget that its effect happened.
    job_id      bigint,
    attempt     integer,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    result      jsonb,
    error       text,
    takeovers   integer     NOT NULL DEFAULT 0,
    reconciled  boolean     NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX effects_status_idx ON {schema}.effects (status, updated_at);
