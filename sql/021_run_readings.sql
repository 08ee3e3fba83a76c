-- Issue 53 item 4: how a run read each Avro writer schema id, {schema id: digest} (the fields the
-- spec's paths are found at, their types, the reader defaults taken), written by the Spark driver
-- before it reads. An apply that reads an id differently from its plan (a version registered
-- since changed a default or an alias) is stale. NULL for JSON runs and runs before this. Idempotent.
ALTER TABLE reprocess.runs ADD COLUMN IF NOT EXISTS avro_readings jsonb;
