-- Transforms in the spec: records a pipeline's `where` does not keep are counted per run (they are
-- neither rows nor dead letters), and rows a new spec version derives to the same values are
-- counted as restamped (their _updated_at stays). Idempotent.
ALTER TABLE reprocess.runs ADD COLUMN IF NOT EXISTS records_filtered bigint;
ALTER TABLE reprocess.runs ADD COLUMN IF NOT EXISTS rows_restamped bigint;
