-- Every verdict a reconciliation check records, kept: reprocess.reconciliations holds only each
-- (window, partition) cell's latest, so without this a window whose gap a backfill healed would
-- show "ok" as if it never had one. healed_by_run is the backfill run whose commit asked for the
-- check that found the window ok again (the backfill's heals_window param).
ALTER TABLE reprocess.reconciliations ADD COLUMN IF NOT EXISTS healed_by_run text;

CREATE TABLE IF NOT EXISTS reprocess.reconciliation_history (
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
    check_id        text,
    heal_conf       jsonb,
    healed_by_run   text,
    checked_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS reconciliation_history_cell_idx
    ON reprocess.reconciliation_history (pipeline, window_start, topic, partition, checked_at DESC);

-- The verdicts recorded before the history existed start it.
INSERT INTO reprocess.reconciliation_history (pipeline, window_start, window_end, topic, partition, kafka_start,
        kafka_end, committed_end, verdict, detail, check_id, heal_conf, healed_by_run, checked_at)
SELECT r.pipeline, r.window_start, r.window_end, r.topic, r.partition, r.kafka_start, r.kafka_end, r.committed_end,
       r.verdict, r.detail, r.check_id, r.heal_conf, r.healed_by_run, r.checked_at
  FROM reprocess.reconciliations r
 WHERE NOT EXISTS (SELECT 1 FROM reprocess.reconciliation_history h
                    WHERE h.pipeline = r.pipeline AND h.window_start = r.window_start AND h.topic = r.topic
                      AND h.partition = r.partition);
