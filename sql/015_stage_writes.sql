-- Which Spark task wrote which part of a stage, and with which attempt: a retried or speculative
-- task finds its part here and writes nothing (first committer wins), so it never doubles a row.
-- One row per (stage table, write task), inserted in the same transaction as the task's COPY.
-- UNLOGGED like the stages it describes: a crash-restart empties both together. Idempotent.
CREATE UNLOGGED TABLE IF NOT EXISTS reprocess.stage_writes (
    stage      text   NOT NULL,  -- the stage table's name in schema reprocess_stage
    task       int    NOT NULL,  -- the Spark partition index of the write (stable across attempts)
    attempt    int    NOT NULL,  -- the attempt whose COPY committed
    rows       bigint NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (stage, task)
);
