-- Issue 39 item 5: each offset snapshot also keeps the partition's high watermark (read_uncommitted
-- log end) beside its last stable offset (log_end, read_committed). HW − LSO > 0 is a transaction
-- still open; the LSO standing still across snapshots is how long it has held the pipeline back.
-- NULL in snapshots taken before this migration. Idempotent.
ALTER TABLE reprocess.offset_snapshots ADD COLUMN IF NOT EXISTS high_watermark bigint;
