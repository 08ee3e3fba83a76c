-- Auto-heal reads its backfill conf from the reconciliation rows, never from XCom: each row names
-- the check that wrote it (one per Airflow run) and, on a gap, the exact conf that closes the
-- window. A check that failed for another reason (broker timeout, database error) writes no rows,
-- so nothing of it can be healed.
ALTER TABLE reprocess.reconciliations
    ADD COLUMN IF NOT EXISTS check_id text,
    ADD COLUMN IF NOT EXISTS heal_conf jsonb;
