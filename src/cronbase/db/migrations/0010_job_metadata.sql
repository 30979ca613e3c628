-- 0010: what integrations carry with a job beside its payload (the handler never sees it): the
-- trace context of the defer that created it (OpenTelemetry), and the like. NULL when nothing
-- was added, so the common insert stores nothing extra. River calls its column metadata, Oban
-- its meta.
ALTER TABLE {schema}.jobs ADD COLUMN metadata jsonb;

COMMENT ON COLUMN {schema}.jobs.metadata IS
    'What integrations store with a job beside its payload, such as the W3C trace context of the defer that created it (key "otel"); NULL when none. Handlers see it as current_job().metadata.';
