-- Debezium: the values a primary-key change moved from its old key to its new one (the delete
-- with __debezium.newkey, reprocess/postgres/left_out.py), so the create of the new key finds
-- them in a later run: a batch cut between the two events, or a copy the connector re-sent after
-- a restart. Kept apart from the deletion markers, which go when the old key gets a new row (a
-- re-key onto it) before the re-sent copy arrives. One row per change; of a change sent twice,
-- the first copy (its values are the ones moved). Keys are the JSON text the Spark job wrote;
-- moved_at is the change's commit time ('' when the event had none). Idempotent.
CREATE TABLE IF NOT EXISTS reprocess.moved_values (
    pipeline   text NOT NULL,
    old_key    text NOT NULL,
    new_key    text NOT NULL,
    moved_at   text NOT NULL,
    topic      text NOT NULL,
    partition  int NOT NULL,
    "offset"   bigint NOT NULL,
    "values"   jsonb NOT NULL,
    unchanged  text,  -- the columns no value was known for (comma-separated), as in a stage row
    run_id     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, old_key, new_key, moved_at)
);
