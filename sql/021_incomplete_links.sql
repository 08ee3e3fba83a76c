-- Debezium (review V, finding 2): an incomplete value of a row whose segment began with a
-- primary-key change keeps the link its value follows: the old key (the JSON text the Spark job
-- wrote) and the change's commit time ('' when the event had none). On a topic of several
-- partitions the new key's create can be committed before the change's delete (batches take the
-- same offset counts of every partition); the commit that keeps the change's moved values then
-- fills the new key's row (reprocess/postgres/left_out.py). NULL: no link. Idempotent.
ALTER TABLE reprocess.incomplete_values ADD COLUMN IF NOT EXISTS old_key text;
ALTER TABLE reprocess.incomplete_values ADD COLUMN IF NOT EXISTS old_at text;
