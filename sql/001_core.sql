-- Core bookkeeping tables of the reprocessing pipeline (DESIGN §3).
-- Idempotent: every statement can run again on an existing schema.
CREATE SCHEMA IF NOT EXISTS reprocess;

CREATE TABLE IF NOT EXISTS reprocess.pipelines (
    name          text PRIMARY KEY,
    target_table  text NOT NULL,
    spec          jsonb NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS reprocess.runs (
    run_id          text PRIMARY KEY,
    pipeline        text NOT NULL REFERENCES reprocess.pipelines (name),
    kind            text NOT NULL,
    state           text NOT NULL,
    request         jsonb NOT NULL DEFAULT '{}'::jsonb,
    dag_id          text,
    dag_run_id      text,
    records_read    bigint,
    rows_staged     bigint,
    rows_upserted   bigint,
    dead_letters    bigint,
    error           text,
    lost_ranges     jsonb NOT NULL DEFAULT '[]'::jsonb,
    summary         jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    planned_at      timestamptz,
    staged_at       timestamptz,
    committed_at    timestamptz
);
CREATE INDEX IF NOT EXISTS runs_pipeline_idx ON reprocess.runs (pipeline, created_at DESC);

-- What Kafka said at planning time, stored before anything is read.
CREATE TABLE IF NOT EXISTS reprocess.offset_snapshots (
    run_id            text NOT NULL REFERENCES reprocess.runs (run_id),
    topic             text NOT NULL,
    partition         int  NOT NULL,
    log_start         bigint NOT NULL,
    log_end           bigint NOT NULL,
    group_committed   bigint,
    taken_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, topic, partition)
);

-- The planned half-open range [start_offset, end_offset) per partition.
CREATE TABLE IF NOT EXISTS reprocess.run_ranges (
    run_id        text NOT NULL REFERENCES reprocess.runs (run_id),
    topic         text NOT NULL,
    partition     int  NOT NULL,
    start_offset  bigint NOT NULL,
    end_offset    bigint NOT NULL,
    CHECK (start_offset <= end_offset),
    PRIMARY KEY (run_id, topic, partition)
);

-- The ledger: the next offset to read per pipeline/topic/partition.
CREATE TABLE IF NOT EXISTS reprocess.consumer_offsets (
    pipeline      text NOT NULL REFERENCES reprocess.pipelines (name),
    topic         text NOT NULL,
    partition     int  NOT NULL,
    next_offset   bigint NOT NULL,
    run_id        text NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, topic, partition)
);

CREATE TABLE IF NOT EXISTS reprocess.committed_ranges (
    pipeline      text NOT NULL,
    run_id        text NOT NULL REFERENCES reprocess.runs (run_id),
    topic         text NOT NULL,
    partition     int  NOT NULL,
    start_offset  bigint NOT NULL,
    end_offset    bigint NOT NULL,
    committed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, topic, partition)
);
CREATE INDEX IF NOT EXISTS committed_ranges_lookup_idx
    ON reprocess.committed_ranges (pipeline, topic, partition, start_offset);

CREATE TABLE IF NOT EXISTS reprocess.dead_letters (
    pipeline      text NOT NULL,
    topic         text NOT NULL,
    partition     int  NOT NULL,
    "offset"      bigint NOT NULL,
    run_id        text NOT NULL,
    key           bytea,
    value         bytea,
    error         text NOT NULL,
    kafka_timestamp timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, topic, partition, "offset")
);

CREATE TABLE IF NOT EXISTS reprocess.reconciliations (
    pipeline        text NOT NULL,
    window_start    timestamptz NOT NULL,
    window_end      timestamptz NOT NULL,
    topic           text NOT NULL,
    partition       int  NOT NULL,
    kafka_start     bigint NOT NULL,
    kafka_end       bigint NOT NULL,
    committed_end   bigint,
    verdict         text NOT NULL,
    detail          text,
    checked_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, window_start, topic, partition)
);

-- Schema for the run-scoped UNLOGGED stage tables.
CREATE SCHEMA IF NOT EXISTS reprocess_stage;
