-- Dead-letter redrive: a dead letter whose record parses when it is read again (the producer or
-- the spec was fixed) is kept for audit and marked resolved by the run that read it.
-- Idempotent: every statement can run again on an existing schema.
ALTER TABLE reprocess.dead_letters ADD COLUMN IF NOT EXISTS resolved_run_id text;
ALTER TABLE reprocess.dead_letters ADD COLUMN IF NOT EXISTS resolved_at timestamptz;
-- What is still to redrive, in offset order (the redrive plan groups consecutive offsets).
CREATE INDEX IF NOT EXISTS dead_letters_unresolved_idx
    ON reprocess.dead_letters (pipeline, topic, partition, "offset") WHERE resolved_run_id IS NULL;
