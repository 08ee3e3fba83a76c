-- Review V finding 9: a plan is stale after any other commit to its target. Every commit that
-- read records into the live target (a backfill, an incremental, an apply, a heal, a redrive) and
-- every rebuild's swap takes the next number of one sequence (reprocess/postgres/store.py
-- touch_target); a plan keeps the pipeline's highest number at its diff, and its apply is refused
-- when a run other than the apply itself (or one of its batches) took a higher one
-- (reprocess/operations/preview.py check_fresh). NULL: the run wrote nothing to the live target,
-- or it committed before this migration. Idempotent.
CREATE SEQUENCE IF NOT EXISTS reprocess.target_commits;
ALTER TABLE reprocess.runs ADD COLUMN IF NOT EXISTS target_commit bigint;
CREATE INDEX IF NOT EXISTS runs_target_commit_idx
    ON reprocess.runs (pipeline, target_commit) WHERE target_commit IS NOT NULL;
ALTER TABLE reprocess.plans ADD COLUMN IF NOT EXISTS target_commit bigint;  -- the pipeline's at the diff
