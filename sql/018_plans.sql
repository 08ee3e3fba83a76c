-- Plans (`reprocess plan`): a run whose last stage diffed its stage against the live target in a
-- transaction rolled back (reprocess/operations/preview.py). The run row keeps its snapshot and
-- ranges (offset_snapshots, run_ranges); this row keeps what the apply checks before it reads
-- exactly those ranges (the spec's fingerprint, the ledger at planning) and the diff's report.
-- Idempotent.
CREATE TABLE IF NOT EXISTS reprocess.plans (
    plan_id          text PRIMARY KEY REFERENCES reprocess.runs (run_id),
    pipeline         text NOT NULL,
    spec_fingerprint text NOT NULL,
    from_ledger      boolean NOT NULL,  -- the range starts at the ledger: a moved ledger makes it stale
    ledger           jsonb NOT NULL,    -- [[topic, partition, next_offset], ...] at planning
    report           jsonb NOT NULL,
    changes          bigint NOT NULL,   -- rows written or deleted and dead letters stored by the apply
    applied_run_id   text,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS plans_pipeline_idx ON reprocess.plans (pipeline, created_at DESC);
