-- Each whole-table audit's verdict (`reprocess audit`, reprocess.operations.audit): keys per kind
-- (differ, missing, must not be, unprovable), the whole report, and the run that healed what it found.
-- `reprocess status` and the coverage page show the pipeline's last one and its age.
CREATE TABLE IF NOT EXISTS reprocess.audits (
    audit_id    text PRIMARY KEY,
    pipeline    text NOT NULL,
    verdict     text NOT NULL,
    counts      jsonb NOT NULL DEFAULT '{}'::jsonb,
    report      jsonb NOT NULL DEFAULT '{}'::jsonb,
    heal_run    text,
    audited_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS audits_pipeline_idx ON reprocess.audits (pipeline, audited_at DESC);
