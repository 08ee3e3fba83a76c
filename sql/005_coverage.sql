-- Coverage page and `status` command (reprocess/coverage.py): one indexed query per panel.
-- Idempotent: every statement can run again on an existing schema.

-- Latest snapshot of a partition (and the snapshots around the ledger, for the lag's age).
CREATE INDEX IF NOT EXISTS offset_snapshots_partition_idx
    ON reprocess.offset_snapshots (topic, partition, taken_at DESC);
-- Latest snapshot of a topic: which partitions the pipeline's topic has.
CREATE INDEX IF NOT EXISTS offset_snapshots_topic_idx ON reprocess.offset_snapshots (topic, taken_at DESC);
-- Last committed run of a pipeline.
CREATE INDEX IF NOT EXISTS runs_committed_idx
    ON reprocess.runs (pipeline, committed_at DESC) WHERE state = 'committed';
-- Runs that recorded lost ranges (allow_data_loss): few, drawn in red on the coverage bars.
CREATE INDEX IF NOT EXISTS runs_lost_idx ON reprocess.runs (pipeline) WHERE lost_ranges <> '[]'::jsonb;
-- Latest verdict per partition.
CREATE INDEX IF NOT EXISTS reconciliations_partition_idx
    ON reprocess.reconciliations (pipeline, topic, partition, window_start DESC);

-- Dead letters: the kind is the error text before its first colon ("malformed JSON or not a JSON
-- object", "missing required field amount", "type error"), stored so it can be indexed and grouped.
ALTER TABLE reprocess.dead_letters
    ADD COLUMN IF NOT EXISTS error_kind text GENERATED ALWAYS AS (split_part(error, ':', 1)) STORED;
CREATE INDEX IF NOT EXISTS dead_letters_recent_idx ON reprocess.dead_letters (pipeline, created_at DESC);
CREATE INDEX IF NOT EXISTS dead_letters_kind_idx ON reprocess.dead_letters (pipeline, error_kind, created_at DESC);

-- Committed coverage as islands: committed_ranges merged where they touch or overlap. With one
-- committed range per partition per run, 10,000 runs make 10,000 ranges per partition; the page
-- draws a handful of islands instead. Kept by triggers on committed_ranges, so every writer
-- (commit, batches, resets) keeps it right without knowing it exists.
CREATE TABLE IF NOT EXISTS reprocess.covered_ranges (
    pipeline      text NOT NULL,
    topic         text NOT NULL,
    partition     int  NOT NULL,
    start_offset  bigint NOT NULL,
    end_offset    bigint NOT NULL,
    CHECK (start_offset < end_offset),
    PRIMARY KEY (pipeline, topic, partition, start_offset)
);

-- Rebuild the islands of the given partitions from committed_ranges (gaps-and-islands).
CREATE OR REPLACE FUNCTION reprocess.rebuild_covered_ranges(p_pipeline text, p_topic text, p_partition int)
RETURNS void LANGUAGE sql AS $$
    DELETE FROM reprocess.covered_ranges
     WHERE pipeline = p_pipeline AND topic = p_topic AND partition = p_partition;
    INSERT INTO reprocess.covered_ranges (pipeline, topic, partition, start_offset, end_offset)
    SELECT p_pipeline, p_topic, p_partition, min(start_offset), max(end_offset)
      FROM (SELECT start_offset, end_offset, sum(island_starts) OVER (ORDER BY start_offset, end_offset) AS island
              FROM (SELECT start_offset, end_offset,
                           CASE WHEN start_offset <= max(end_offset) OVER (ORDER BY start_offset, end_offset
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                                THEN 0 ELSE 1 END AS island_starts
                      FROM reprocess.committed_ranges
                     WHERE pipeline = p_pipeline AND topic = p_topic AND partition = p_partition
                       AND start_offset < end_offset) ranges) islands
     GROUP BY island;
$$;

-- A new committed range swallows the islands it touches (commits of one pipeline are serialised
-- by its advisory lock, so two inserts never merge the same islands at once).
CREATE OR REPLACE FUNCTION reprocess.cover_committed_range() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    lo bigint := NEW.start_offset;
    hi bigint := NEW.end_offset;
BEGIN
    IF hi <= lo THEN
        RETURN NULL;
    END IF;
    SELECT least(lo, min(start_offset)), greatest(hi, max(end_offset)) INTO lo, hi
      FROM reprocess.covered_ranges
     WHERE pipeline = NEW.pipeline AND topic = NEW.topic AND partition = NEW.partition
       AND start_offset <= NEW.end_offset AND end_offset >= NEW.start_offset;
    DELETE FROM reprocess.covered_ranges
     WHERE pipeline = NEW.pipeline AND topic = NEW.topic AND partition = NEW.partition
       AND start_offset <= NEW.end_offset AND end_offset >= NEW.start_offset;
    INSERT INTO reprocess.covered_ranges VALUES (NEW.pipeline, NEW.topic, NEW.partition, lo, hi);
    RETURN NULL;
END $$;

-- Deleted or changed committed ranges (a reset, a test cleaning up): rebuild those partitions.
CREATE OR REPLACE FUNCTION reprocess.uncover_committed_ranges() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM reprocess.rebuild_covered_ranges(pipeline, topic, partition)
       FROM (SELECT DISTINCT pipeline, topic, partition FROM old_ranges) changed;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION reprocess.recover_updated_ranges() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM reprocess.rebuild_covered_ranges(pipeline, topic, partition)
       FROM (SELECT pipeline, topic, partition FROM old_ranges
             UNION SELECT pipeline, topic, partition FROM new_ranges) changed;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION reprocess.clear_covered_ranges() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM reprocess.covered_ranges;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS committed_ranges_cover ON reprocess.committed_ranges;
CREATE TRIGGER committed_ranges_cover AFTER INSERT ON reprocess.committed_ranges
    FOR EACH ROW EXECUTE FUNCTION reprocess.cover_committed_range();
DROP TRIGGER IF EXISTS committed_ranges_uncover ON reprocess.committed_ranges;
CREATE TRIGGER committed_ranges_uncover AFTER DELETE ON reprocess.committed_ranges
    REFERENCING OLD TABLE AS old_ranges FOR EACH STATEMENT EXECUTE FUNCTION reprocess.uncover_committed_ranges();
DROP TRIGGER IF EXISTS committed_ranges_recover ON reprocess.committed_ranges;
CREATE TRIGGER committed_ranges_recover AFTER UPDATE ON reprocess.committed_ranges
    REFERENCING OLD TABLE AS old_ranges NEW TABLE AS new_ranges
    FOR EACH STATEMENT EXECUTE FUNCTION reprocess.recover_updated_ranges();
DROP TRIGGER IF EXISTS committed_ranges_clear ON reprocess.committed_ranges;
CREATE TRIGGER committed_ranges_clear AFTER TRUNCATE ON reprocess.committed_ranges
    FOR EACH STATEMENT EXECUTE FUNCTION reprocess.clear_covered_ranges();

-- Islands of the ranges committed before this migration.
SELECT reprocess.rebuild_covered_ranges(pipeline, topic, partition)
  FROM (SELECT DISTINCT pipeline, topic, partition FROM reprocess.committed_ranges) existing
 WHERE NOT EXISTS (SELECT 1 FROM reprocess.covered_ranges c
                    WHERE c.pipeline = existing.pipeline AND c.topic = existing.topic
                      AND c.partition = existing.partition);
