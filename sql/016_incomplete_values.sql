-- Debezium values a change event left out (an unchanged TOASTed value) that no record of the
-- run's range, no stored row and no moved key could give (reprocess/postgres/left_out.py): the
-- row holds NULL there until a later record of the key sends the value. One row per (row, column),
-- naming the record that left it out; counted per run. Idempotent.
CREATE TABLE IF NOT EXISTS reprocess.incomplete_values (
    pipeline   text NOT NULL,
    key        jsonb NOT NULL,
    "column"   text NOT NULL,
    topic      text NOT NULL,
    partition  int NOT NULL,
    "offset"   bigint NOT NULL,
    run_id     text NOT NULL,
    reason     text NOT NULL,  -- why no value was known, and the fix
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, key, "column")
);
ALTER TABLE reprocess.runs ADD COLUMN IF NOT EXISTS values_incomplete bigint;
