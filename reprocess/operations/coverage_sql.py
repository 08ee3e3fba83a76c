"""The coverage page's queries (``sql/005_coverage.sql`` holds their indexes): each panel is one
statement over Postgres only, its values always bound."""

from __future__ import annotations

from typing import Final

from sqlalchemy import text

# Per partition of the pipelines: the latest snapshot, the ledger, committed islands, lost ranges,
# the latest verdict and the time the oldest unread offsets were first seen. The partitions are
# those of each topic's latest snapshot plus those in the ledger. Each LATERAL is an index probe.
PARTITIONS: Final = text(
    """
WITH topics AS (
    SELECT p.name AS pipeline, t.topic
      FROM reprocess.pipelines p CROSS JOIN LATERAL jsonb_array_elements_text(p.spec -> 'topics') AS t(topic)
     WHERE p.name = ANY(:pipelines)
), parts AS (
    SELECT t.pipeline, t.topic, s.partition
      FROM topics t
      CROSS JOIN LATERAL (
            SELECT s.run_id FROM reprocess.offset_snapshots s JOIN reprocess.runs r ON r.run_id = s.run_id
             WHERE s.topic = t.topic AND r.pipeline = t.pipeline ORDER BY s.taken_at DESC LIMIT 1) latest
      JOIN reprocess.offset_snapshots s ON s.run_id = latest.run_id AND s.topic = t.topic
    UNION
    SELECT pipeline, topic, partition FROM reprocess.consumer_offsets WHERE pipeline = ANY(:pipelines)
)
SELECT parts.pipeline, parts.topic, parts.partition,
       snap.log_start, snap.log_end, snap.high_watermark, snap.taken_at AS snapshot_at, held.since AS held_since,
       led.next_offset AS ledger, led.run_id AS ledger_run,
       unread.since AS unread_since,
       rec.verdict, rec.window_start AS verdict_window, rec.healed_by_run AS verdict_healed_by,
       coalesce(cov.islands, '[]'::jsonb) AS islands, coalesce(lost.ranges, '[]'::jsonb) AS lost
  FROM parts
  LEFT JOIN reprocess.consumer_offsets led
         ON led.pipeline = parts.pipeline AND led.topic = parts.topic AND led.partition = parts.partition
  LEFT JOIN LATERAL (
        SELECT s.log_start, s.log_end, s.high_watermark, s.taken_at
          FROM reprocess.offset_snapshots s JOIN reprocess.runs r ON r.run_id = s.run_id
         WHERE s.topic = parts.topic AND s.partition = parts.partition AND r.pipeline = parts.pipeline
         ORDER BY s.taken_at DESC LIMIT 1) snap ON true
  LEFT JOIN LATERAL (
        -- An open transaction holds the last stable offset (log_end) below the high watermark: the
        -- first snapshot after the last one that showed another LSO or no hold is when the hold
        -- was first seen (a lower bound of its age).
        SELECT min(s.taken_at) AS since
          FROM reprocess.offset_snapshots s JOIN reprocess.runs r ON r.run_id = s.run_id
         WHERE s.topic = parts.topic AND s.partition = parts.partition AND r.pipeline = parts.pipeline
           AND s.taken_at > coalesce((
                SELECT s2.taken_at FROM reprocess.offset_snapshots s2 JOIN reprocess.runs r2 ON r2.run_id = s2.run_id
                 WHERE s2.topic = parts.topic AND s2.partition = parts.partition AND r2.pipeline = parts.pipeline
                   AND (s2.log_end <> snap.log_end OR coalesce(s2.high_watermark, s2.log_end) <= s2.log_end)
                 ORDER BY s2.taken_at DESC LIMIT 1), '-infinity')) held
         ON snap.high_watermark > snap.log_end
  LEFT JOIN LATERAL (
        -- Log ends only grow: the first snapshot after the last one that ended at or below the
        -- ledger is when the oldest unread offsets were first seen (a lower bound of their age).
        SELECT s.taken_at AS since
          FROM reprocess.offset_snapshots s JOIN reprocess.runs r ON r.run_id = s.run_id
         WHERE s.topic = parts.topic AND s.partition = parts.partition AND r.pipeline = parts.pipeline
           AND s.log_end > coalesce(led.next_offset, 0)
           AND s.taken_at > coalesce((
                SELECT s2.taken_at FROM reprocess.offset_snapshots s2 JOIN reprocess.runs r2 ON r2.run_id = s2.run_id
                 WHERE s2.topic = parts.topic AND s2.partition = parts.partition AND r2.pipeline = parts.pipeline
                   AND s2.log_end <= coalesce(led.next_offset, 0)
                 ORDER BY s2.taken_at DESC LIMIT 1), '-infinity')
         ORDER BY s.taken_at LIMIT 1) unread
         ON snap.log_end > coalesce(led.next_offset, snap.log_start)
  LEFT JOIN LATERAL (
        SELECT CASE WHEN x.verdict = 'ok' AND EXISTS (SELECT 1 FROM reprocess.reconciliation_history h
                    WHERE h.pipeline = x.pipeline AND h.window_start = x.window_start AND h.topic = x.topic
                      AND h.partition = x.partition AND h.verdict = 'gap') THEN 'healed' ELSE x.verdict END AS verdict,
               x.window_start, x.healed_by_run
          FROM reprocess.reconciliations x
         WHERE x.pipeline = parts.pipeline AND x.topic = parts.topic AND x.partition = parts.partition
         ORDER BY window_start DESC LIMIT 1) rec ON true
  LEFT JOIN LATERAL (
        SELECT jsonb_agg(jsonb_build_array(c.start_offset, c.end_offset) ORDER BY c.start_offset) AS islands
          FROM reprocess.covered_ranges c
         WHERE c.pipeline = parts.pipeline AND c.topic = parts.topic AND c.partition = parts.partition) cov ON true
  LEFT JOIN LATERAL (
        SELECT jsonb_agg(jsonb_build_array((x ->> 'start')::bigint, (x ->> 'end')::bigint)) AS ranges
          FROM reprocess.runs r CROSS JOIN LATERAL jsonb_array_elements(r.lost_ranges) AS x
         WHERE r.pipeline = parts.pipeline AND r.lost_ranges <> '[]'::jsonb
           AND x ->> 'topic' = parts.topic AND (x ->> 'partition')::int = parts.partition) lost ON true
 ORDER BY parts.pipeline, parts.topic, parts.partition
"""
)

# Per pipeline: its spec's topics, its last committed run, its latest run whatever its state (a batch
# is its parent's), dead letters of the last day, its incomplete values and the verdict of its latest
# reconciled window (the worst partition's: a gap, else not yet stable, else ok).
PIPELINE_FACTS: Final = text(
    """
SELECT p.name, p.target_table, p.spec -> 'topics' AS topics,
       last.run_id AS last_run, last.committed_at AS last_committed_at, last.dag_id, last.dag_run_id,
       latest.run_id AS latest_run, latest.state AS latest_state, latest.error AS latest_error,
       latest.created_at AS latest_at,
       (SELECT count(*) FROM reprocess.dead_letters d
         WHERE d.pipeline = p.name AND d.created_at > now() - interval '1 day') AS dead_letters_day,
       (SELECT count(*) FROM reprocess.incomplete_values i WHERE i.pipeline = p.name) AS values_incomplete,
       rec.window_start AS verdict_window, rec.verdict
  FROM reprocess.pipelines p
  LEFT JOIN LATERAL (
        SELECT run_id, committed_at, dag_id, dag_run_id FROM reprocess.runs r
         WHERE r.pipeline = p.name AND r.state = 'committed' ORDER BY committed_at DESC LIMIT 1) last ON true
  LEFT JOIN LATERAL (
        SELECT run_id, state, error, created_at FROM reprocess.runs r
         WHERE r.pipeline = p.name AND r.parent_run_id IS NULL ORDER BY created_at DESC LIMIT 1) latest ON true
  LEFT JOIN LATERAL (
        SELECT x.window_start, CASE WHEN bool_and(x.verdict = 'ok') THEN 'ok'
                                    WHEN bool_or(x.verdict = 'gap') THEN 'gap' ELSE 'not yet stable' END AS verdict
          FROM reprocess.reconciliations x
         WHERE x.pipeline = p.name
           AND x.window_start = (SELECT max(window_start) FROM reprocess.reconciliations y WHERE y.pipeline = p.name)
         GROUP BY x.window_start) rec ON true
 WHERE p.name = ANY(:pipelines)
 ORDER BY p.name
"""
)

PIPELINE_NAMES: Final = text("SELECT name FROM reprocess.pipelines ORDER BY name")

# Top-level runs, newest first (batches are summed into their parent); one page plus one row,
# which tells whether there is a next page without counting 10,000 runs. The page is cut before
# the ranges are aggregated, so a far page costs no more than the first.
RUNS: Final = text(
    """
WITH page AS (
    SELECT * FROM reprocess.runs r
     WHERE r.pipeline = :pipeline AND r.parent_run_id IS NULL
     ORDER BY r.created_at DESC
     LIMIT :limit OFFSET :offset
)
SELECT r.run_id, r.kind, r.state, r.dag_id, r.dag_run_id, r.created_at, r.committed_at, r.error,
       r.records_read, r.records_filtered, r.rows_upserted, r.dead_letters, r.batch_count,
       extract(epoch FROM (coalesce(r.committed_at, r.staged_at, r.planned_at, r.created_at) - r.created_at))
           AS seconds,
       coalesce(rr.ranges, '[]'::jsonb) AS ranges
  FROM page r
  LEFT JOIN LATERAL (
        SELECT jsonb_agg(jsonb_build_array(topic, partition, start_offset, end_offset) ORDER BY topic, partition)
               AS ranges
          FROM reprocess.run_ranges x WHERE x.run_id = r.run_id) rr ON true
 ORDER BY r.created_at DESC
"""
)

# One cell per (window, partition) over the last days that have verdicts; gap cells carry the
# healing backfill conf the reconciliation stored with them. A cell found ok after a gap is
# "healed": it names the gap it had (from the history) and the run that healed it. A gap's kinds (a
# healed cell's: those its gap had) are the stored ones (reprocess.checks).
CALENDAR: Final = text(
    """
SELECT x.window_start, x.window_end, x.topic, x.partition, x.kafka_start, x.kafka_end,
       CASE WHEN x.verdict = 'ok' AND gap.checked_at IS NOT NULL THEN 'healed' ELSE x.verdict END AS verdict,
       x.detail, x.checked_at, x.heal_conf, x.healed_by_run AS healed_by, gap.detail AS gap_detail,
       gap.checked_at AS gap_checked_at,
       CASE WHEN x.verdict = 'gap' THEN x.kinds WHEN gap.checked_at IS NOT NULL THEN gap.kinds
            ELSE '{}'::text[] END AS kinds
  FROM reprocess.reconciliations x
  LEFT JOIN LATERAL (
        SELECT h.detail, h.kinds, h.checked_at FROM reprocess.reconciliation_history h
         WHERE h.pipeline = x.pipeline AND h.window_start = x.window_start AND h.topic = x.topic
           AND h.partition = x.partition AND h.verdict = 'gap' AND h.checked_at < x.checked_at
         ORDER BY h.checked_at DESC LIMIT 1) gap ON x.verdict = 'ok'
 WHERE x.pipeline = :pipeline
   AND x.window_start > (SELECT max(window_start) FROM reprocess.reconciliations y WHERE y.pipeline = :pipeline)
                        - make_interval(days => :days)
 ORDER BY x.window_start, x.topic, x.partition
"""
)

# Newest first, optionally one error kind or one run; one page plus one row.
DEAD_LETTERS: Final = text(
    """
SELECT topic, partition, "offset", run_id, key, value, error, error_kind, kafka_timestamp, created_at,
       resolved_run_id, resolved_at
  FROM reprocess.dead_letters
 WHERE pipeline = :pipeline
   AND (CAST(:kind AS text) IS NULL OR error_kind = :kind)
   AND (CAST(:run_id AS text) IS NULL OR run_id = :run_id)
 ORDER BY created_at DESC, topic, partition, "offset"
 LIMIT :limit OFFSET :offset
"""
)

# Per error kind: how many dead letters are still open (not resolved by a redrive).
DEAD_LETTER_KINDS: Final = text(
    "SELECT error_kind, count(*) FILTER (WHERE resolved_run_id IS NULL) AS n FROM reprocess.dead_letters "
    "WHERE pipeline = :pipeline GROUP BY error_kind ORDER BY n DESC, error_kind"
)
