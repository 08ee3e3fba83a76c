-- Live progress of a run's Spark stage (the task log prints the same lines): records read so far
-- of the planned offsets, rate and ETA, written by the job at most every 10 s and once, exact,
-- when the stage ends. The coverage page shows the runs that are still going and the last ones.
-- Idempotent: every statement can run again on an existing schema.
CREATE TABLE IF NOT EXISTS reprocess.run_progress (
    run_id        text PRIMARY KEY,
    pipeline      text NOT NULL,
    planned       bigint NOT NULL,            -- offsets planned (markers take offsets: records <= planned)
    records_read  bigint NOT NULL,
    exact         boolean NOT NULL,           -- false: estimated from Spark's finished tasks
    records_per_s double precision NOT NULL,
    eta_seconds   double precision,           -- null until a rate is known
    done          boolean NOT NULL DEFAULT false,
    started_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS run_progress_pipeline_idx ON reprocess.run_progress (pipeline, updated_at DESC);
