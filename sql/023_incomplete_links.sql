-- Debezium (review V, finding 2): a value a primary-key change moved that no commit held yet keeps
-- the link it follows, so the commit that keeps the change fills it in
-- (reprocess/postgres/linked_values.py). On a topic of several partitions the new key's create can
-- be committed before the old key's last events and delete (two partitions hold no order, and a
-- batch takes the same offset count of each).
-- - an incomplete value of a row whose segment began with such a change: the old key (the JSON
--   text the Spark job wrote) and the change's commit time ('' when the event had none);
-- - a kept change whose values are still unknown (the new key changed again before): the change
--   its own old key's segment began with, the same two.
-- NULL: no link. Idempotent.
ALTER TABLE reprocess.incomplete_values ADD COLUMN IF NOT EXISTS old_key text;
ALTER TABLE reprocess.incomplete_values ADD COLUMN IF NOT EXISTS old_at text;
ALTER TABLE reprocess.moved_values ADD COLUMN IF NOT EXISTS from_key text;
ALTER TABLE reprocess.moved_values ADD COLUMN IF NOT EXISTS from_at text;
