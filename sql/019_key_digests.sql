-- Issue 39 item 2: the bookkeeping tables that hold keys as text index the keys' md5 digests, not
-- the keys: a moved value holds two keys (old and new) and an incomplete value a key as jsonb, so a
-- key the target can index (the Spark job makes longer ones dead letters) could still exceed
-- PostgreSQL's btree index row limit (2704 bytes) there and fail every commit of its run.
-- Lookups join on the keys themselves; these tables hold one row per change or value. Idempotent.
ALTER TABLE reprocess.moved_values DROP CONSTRAINT IF EXISTS moved_values_pkey;
CREATE UNIQUE INDEX IF NOT EXISTS moved_values_change
    ON reprocess.moved_values (pipeline, md5(old_key), md5(new_key), moved_at);
ALTER TABLE reprocess.incomplete_values DROP CONSTRAINT IF EXISTS incomplete_values_pkey;
CREATE UNIQUE INDEX IF NOT EXISTS incomplete_values_value
    ON reprocess.incomplete_values (pipeline, md5(key::text), "column");
