-- 0002: schedules. Each due slot becomes an ordinary job in {schema}.jobs whose idempotency key
-- names the schedule and the slot, so however many processes tick, one job per slot exists.

CREATE TABLE {schema}.schedules (
    key           text        PRIMARY KEY,
    task          text        NOT NULL,
    payload       jsonb       NOT NULL DEFAULT '{{}}'::jsonb,
    -- NULL: the task's own queue.
    queue         text,
    cron          text        NOT NULL,
    tz            text        NOT NULL DEFAULT 'UTC',
    catch_up      text        NOT NULL DEFAULT 'latest'
        CHECK (catch_up IN ('latest', 'all', 'none')),
    max_catch_up  integer     NOT NULL DEFAULT 100 CHECK (max_catch_up >= 1),
    is_paused     boolean     NOT NULL DEFAULT false,
    -- 'code': declared with @app.periodic and upserted at start; 'runtime': app.schedules.add.
    source        text        NOT NULL DEFAULT 'runtime' CHECK (source IN ('code', 'runtime')),
    last_fired_at timestamptz,
    next_fire_at  timestamptz NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- A tick looks only at unpaused schedules whose next slot has come.
CREATE INDEX schedules_due_idx ON {schema}.schedules (next_fire_at) WHERE NOT is_paused;
