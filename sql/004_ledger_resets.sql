-- Deliberate ledger resets (reprocess reset / the reset DAG): who moved which
-- partition from where to where, when and why. One row per partition per reset.
CREATE TABLE IF NOT EXISTS reprocess.ledger_resets (
    reset_id      bigserial PRIMARY KEY,
    pipeline      text NOT NULL REFERENCES reprocess.pipelines (name),
    topic         text NOT NULL,
    partition     int  NOT NULL,
    old_offset    bigint,
    new_offset    bigint NOT NULL,
    mode          text NOT NULL,
    value         text,
    reason        text NOT NULL,
    requested_by  text NOT NULL,
    applied_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ledger_resets_pipeline_idx ON reprocess.ledger_resets (pipeline, applied_at DESC);
