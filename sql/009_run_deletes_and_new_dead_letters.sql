-- Run counts that tell a replay apart: dead letters found in this run's records vs newly stored
-- (a replay finds the ones an earlier run stored), and rows deleted by tombstones.
ALTER TABLE reprocess.runs ADD COLUMN IF NOT EXISTS dead_letters_new bigint;
ALTER TABLE reprocess.runs ADD COLUMN IF NOT EXISTS rows_deleted bigint;
