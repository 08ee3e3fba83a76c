-- Chunked runs: a run whose ranges exceed the batch size commits batch by batch; each batch is
-- a child run (its own ranges, stage and atomic commit) so a failure resumes after the last one.
ALTER TABLE reprocess.runs ADD COLUMN IF NOT EXISTS parent_run_id text REFERENCES reprocess.runs (run_id);
ALTER TABLE reprocess.runs ADD COLUMN IF NOT EXISTS batch_index int;
ALTER TABLE reprocess.runs ADD COLUMN IF NOT EXISTS batch_count int;
CREATE INDEX IF NOT EXISTS runs_parent_idx ON reprocess.runs (parent_run_id, batch_index);
