-- Issue 58 item 1 (review V finding 11): a commit finds a pipeline's kept key changes
-- (reprocess.moved_values) by index, not by reading all of them. The lookups compare a key as the
-- target's typed key (reprocess/postgres/left_out.py): each change keeps the digest of its old and of
-- its new key in that form, md5 of the key's jsonb (as reprocess.incomplete_values names a key,
-- migration 019), written by the commit that keeps it. Rows kept before this migration get theirs from
-- their pipeline's next commit (reprocess/postgres/moved_values.py: only the commit knows the target's
-- key types); the partial index finds them. A commit's own kept changes are read by run id.
-- Idempotent.
ALTER TABLE reprocess.moved_values ADD COLUMN IF NOT EXISTS old_digest text;
ALTER TABLE reprocess.moved_values ADD COLUMN IF NOT EXISTS new_digest text;
CREATE INDEX IF NOT EXISTS moved_values_old_key ON reprocess.moved_values (pipeline, old_digest);
CREATE INDEX IF NOT EXISTS moved_values_new_key ON reprocess.moved_values (pipeline, new_digest);
CREATE INDEX IF NOT EXISTS moved_values_run ON reprocess.moved_values (pipeline, run_id);
CREATE INDEX IF NOT EXISTS moved_values_undigested ON reprocess.moved_values (pipeline) WHERE new_digest IS NULL;
