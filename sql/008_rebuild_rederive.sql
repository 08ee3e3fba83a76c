-- mode: 'merge' (the default) or 'rebuild' (writes a shadow table that is swapped in; rebuild.py).
ALTER TABLE reprocess.runs ADD COLUMN IF NOT EXISTS mode text NOT NULL DEFAULT 'merge';
-- Of rows_upserted: rows inserted (a new key) and rows re-derived (the same Kafka record, a
-- different derived row: the spec or transform changed); the rest replaced an older record.
ALTER TABLE reprocess.runs ADD COLUMN IF NOT EXISTS rows_inserted bigint;
ALTER TABLE reprocess.runs ADD COLUMN IF NOT EXISTS rows_rederived bigint;
