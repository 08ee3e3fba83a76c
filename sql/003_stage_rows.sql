-- Rows the Spark job wrote into a run's stage, checked by the commit: an UNLOGGED stage is
-- emptied by a Postgres crash-restart, and an emptied stage must never commit as "no data".
ALTER TABLE reprocess.runs ADD COLUMN IF NOT EXISTS stage_rows bigint;
