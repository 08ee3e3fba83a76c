"""Bookkeeping DML as named ``text()`` constants; each comment says why it has its shape.

SQL that depends on a spec's identifiers (target DDL, merge, dead letters, stage DDL) lives in
``target.py``, ``merge.py``, ``dead_letters.py`` and ``stage.py`` and is composed with ``psycopg2.sql``.
"""

from typing import Final

from sqlalchemy import text

UPSERT_PIPELINE: Final = text(
    "INSERT INTO reprocess.pipelines (name, target_table, spec) VALUES (:name, :target, CAST(:spec AS jsonb)) "
    "ON CONFLICT (name) DO UPDATE SET target_table = EXCLUDED.target_table, spec = EXCLUDED.spec, "
    "updated_at = now() WHERE reprocess.pipelines.spec IS DISTINCT FROM EXCLUDED.spec"
)
# A rebuild registers a new pipeline but leaves an existing one's spec alone until its swap, so
# runs of the live table keep being checked against the spec the live table is at.
REGISTER_PIPELINE: Final = text(
    "INSERT INTO reprocess.pipelines (name, target_table, spec) VALUES (:name, :target, CAST(:spec AS jsonb)) "
    "ON CONFLICT (name) DO NOTHING"
)
PIPELINE_EXISTS: Final = text("SELECT EXISTS (SELECT 1 FROM reprocess.pipelines WHERE name = :name)")

RUN_STATE: Final = text("SELECT state FROM reprocess.runs WHERE run_id = :run_id")

# Re-planning a run is allowed only before it staged; a staged or committed run keeps its plan.
UPSERT_PLANNED_RUN: Final = text(
    "INSERT INTO reprocess.runs (run_id, pipeline, kind, state, request, lost_ranges, dag_id, dag_run_id, error, "
    "planned_at) VALUES (:run_id, :pipeline, :kind, :state, CAST(:request AS jsonb), CAST(:lost AS jsonb), "
    ":dag_id, :dag_run_id, :error, now()) "
    "ON CONFLICT (run_id) DO UPDATE SET state = EXCLUDED.state, request = EXCLUDED.request, "
    "lost_ranges = EXCLUDED.lost_ranges, error = EXCLUDED.error, planned_at = now() "
    "WHERE reprocess.runs.state NOT IN ('staged', 'committed')"
)

DELETE_PLAN_RANGES: Final = text("DELETE FROM reprocess.run_ranges WHERE run_id = :run_id")
DELETE_PLAN_SNAPSHOTS: Final = text("DELETE FROM reprocess.offset_snapshots WHERE run_id = :run_id")

# A plan's rows in ONE statement per table (the columns as bound arrays, unnest()ed): one row per
# partition, and a topic can have thousands. A row-per-statement executemany cost 0.26 s per
# 1,000 partitions (a round trip each); this costs one round trip.
INSERT_SNAPSHOTS: Final = text(
    "INSERT INTO reprocess.offset_snapshots (run_id, topic, partition, log_start, log_end, group_committed, "
    "topic_id, high_watermark) SELECT :run_id, * FROM unnest(CAST(:topics AS text[]), CAST(:partitions AS int[]), "
    "CAST(:log_starts AS bigint[]), CAST(:log_ends AS bigint[]), CAST(:group_committed AS bigint[]), "
    "CAST(:topic_ids AS text[]), CAST(:high_watermarks AS bigint[]))"
)

INSERT_RUN_RANGES: Final = text(
    "INSERT INTO reprocess.run_ranges (run_id, topic, partition, start_offset, end_offset) "
    "SELECT :run_id, * FROM unnest(CAST(:topics AS text[]), CAST(:partitions AS int[]), "
    "CAST(:starts AS bigint[]), CAST(:ends AS bigint[]))"
)

RUN_HEADER: Final = text("SELECT pipeline, kind, state, lost_ranges FROM reprocess.runs WHERE run_id = :run_id")

RUN_RANGES: Final = text(
    "SELECT topic, partition, start_offset, end_offset FROM reprocess.run_ranges WHERE run_id = :run_id "
    "ORDER BY topic, partition"
)

LEDGER_FOR_PIPELINE: Final = text(
    "SELECT topic, partition, next_offset FROM reprocess.consumer_offsets WHERE pipeline = :pipeline"
)
LEDGER_MOVERS: Final = text(
    "SELECT topic, partition, next_offset, run_id FROM reprocess.consumer_offsets WHERE pipeline = :pipeline"
)

# Per topic, the partition count snapshotted by the pipeline's newest committed run that read the
# topic (batch children have no snapshot of their own, so they are skipped by the join).
LAST_PARTITION_COUNTS: Final = text(
    "SELECT DISTINCT ON (s.topic) s.topic, count(*) OVER (PARTITION BY s.run_id, s.topic) AS partitions, s.topic_id "
    "FROM reprocess.offset_snapshots s JOIN reprocess.runs r ON r.run_id = s.run_id "
    "WHERE r.pipeline = :pipeline AND r.state = 'committed' ORDER BY s.topic, r.committed_at DESC"
)

MARK_PREVIEWED: Final = text(
    "UPDATE reprocess.runs SET state = 'dry_run', error = NULL WHERE run_id = :run_id AND state = 'staged'"
)
MARK_STAGED: Final = text(
    "UPDATE reprocess.runs SET state = 'staged', staged_at = now(), error = NULL, stage_rows = :stage_rows "
    "WHERE run_id = :run_id AND state IN ('planned', 'staged', 'failed')"
)

MARK_FAILED: Final = text(
    "UPDATE reprocess.runs SET state = 'failed', error = :error WHERE run_id = :run_id AND state <> 'committed'"
)

# A task attempt's error, state kept: a retry may still stage or commit the run (staging clears it).
# A failed run keeps the error it failed with: that is the cause, and a later attempt's error (the
# run "is failed, not staged") only a consequence of it.
RECORD_ERROR: Final = text(
    "UPDATE reprocess.runs SET error = :error WHERE run_id = :run_id "
    "AND state <> 'committed' AND NOT (state = 'failed' AND error IS NOT NULL)"
)

# The dead-letter ratio of a batch is judged over its whole run (merge_stage._check_dead_letter_ratio):
# what the run's committed batches landed and found new, and the offsets its other batches have
# still to read (at most one record each). Zeros for a run that is not a batch.
RUN_BATCH_SIBLINGS: Final = text(
    "WITH sib AS (SELECT s.* FROM reprocess.runs s JOIN reprocess.runs me ON s.parent_run_id = me.parent_run_id "
    "WHERE me.run_id = :run_id AND s.run_id <> me.run_id) "
    "SELECT coalesce(sum(records_read - dead_letters + coalesce(dead_letters_new, dead_letters)) "
    "FILTER (WHERE state = 'committed'), 0) AS landable, "
    "coalesce(sum(coalesce(dead_letters_new, dead_letters)) FILTER (WHERE state = 'committed'), 0) AS new_dead, "
    "(SELECT coalesce(sum(r.end_offset - r.start_offset), 0) FROM reprocess.run_ranges r JOIN sib "
    "ON sib.run_id = r.run_id WHERE sib.state <> 'committed') AS unread FROM sib"
)

# FOR UPDATE serialises two commits of the same run; the advisory lock serialises the pipeline.
LOCK_RUN: Final = text("SELECT state, kind, stage_rows FROM reprocess.runs WHERE run_id = :run_id FOR UPDATE")

# Lost ranges a run accepted (allow_data_loss); a batch inherits its parent run's.
RUN_LOST_RANGES: Final = text(
    "SELECT jsonb_array_elements(lost_ranges) AS lost FROM reprocess.runs WHERE run_id = :run_id "
    "OR run_id = (SELECT parent_run_id FROM reprocess.runs WHERE run_id = :run_id)"
)

PIPELINE_LOCK: Final = text("SELECT pg_advisory_xact_lock(hashtext('reprocess:' || :pipeline))")

# Ledger rows of the run's partitions, locked, for the incremental compare-and-set.
LEDGER_FOR_UPDATE: Final = text(
    "SELECT topic, partition, next_offset FROM reprocess.consumer_offsets WHERE pipeline = :pipeline FOR UPDATE"
)

# The ledger only moves forward: a backfill of an old slice never rewinds it.
ADVANCE_LEDGER: Final = text(
    "INSERT INTO reprocess.consumer_offsets (pipeline, topic, partition, next_offset, run_id) "
    "VALUES (:pipeline, :topic, :partition, :end, :run_id) "
    "ON CONFLICT (pipeline, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset, "
    "run_id = EXCLUDED.run_id, updated_at = now() "
    "WHERE reprocess.consumer_offsets.next_offset < EXCLUDED.next_offset "
    "AND reprocess.consumer_offsets.next_offset >= :start"
)

INSERT_COMMITTED_RANGE: Final = text(
    "INSERT INTO reprocess.committed_ranges (pipeline, run_id, topic, partition, start_offset, end_offset) "
    "VALUES (:pipeline, :run_id, :topic, :partition, :start, :end) ON CONFLICT DO NOTHING"
)

MARK_COMMITTED: Final = text(
    "UPDATE reprocess.runs SET state = 'committed', committed_at = now(), records_read = :records_read, "
    "rows_staged = :rows_staged, rows_upserted = :rows_upserted, dead_letters = :dead_letters, "
    "dead_letters_new = :dead_letters_new, rows_deleted = :rows_deleted, rows_inserted = :rows_inserted, "
    "rows_rederived = :rows_rederived, records_filtered = :records_filtered, rows_restamped = :rows_restamped, "
    "values_incomplete = :values_incomplete, error = NULL WHERE run_id = :run_id"
)

# A commit that read records into the live target, or a rebuild's swap, takes the next number: a plan
# keeps the pipeline's highest at its diff, and any other run's higher one makes it stale (plans).
TOUCH_TARGET: Final = text(
    "UPDATE reprocess.runs SET target_commit = nextval('reprocess.target_commits') WHERE run_id = :run_id"
)
LAST_TARGET_COMMIT: Final = text(
    "SELECT coalesce(max(target_commit), 0) FROM reprocess.runs "
    "WHERE pipeline = :pipeline AND target_commit IS NOT NULL"
)
TARGET_COMMITS_SINCE: Final = text(
    "SELECT run_id FROM reprocess.runs WHERE pipeline = :pipeline AND target_commit > :since ORDER BY target_commit"
)

SET_SUMMARY: Final = text("UPDATE reprocess.runs SET summary = CAST(:summary AS jsonb) WHERE run_id = :run_id")

RUN_COUNTS: Final = text(
    "SELECT state, records_read, rows_staged, rows_upserted, dead_letters, dead_letters_new, rows_deleted, "
    "rows_inserted, rows_rederived, records_filtered, rows_restamped, values_incomplete, lost_ranges, error, "
    "extract(epoch FROM (coalesce(committed_at, now()) - created_at)) AS seconds "
    "FROM reprocess.runs WHERE run_id = :run_id"
)

# A deliberate reset may move the ledger backwards or forwards (unlike ADVANCE_LEDGER); it runs
# under the pipeline's advisory lock, so an in-flight incremental run is fenced by its compare-and-set.
RESET_LEDGER: Final = text(
    "INSERT INTO reprocess.consumer_offsets (pipeline, topic, partition, next_offset, run_id) "
    "VALUES (:pipeline, :topic, :partition, :new, :run_id) "
    "ON CONFLICT (pipeline, topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset, "
    "run_id = EXCLUDED.run_id, updated_at = now()"
)

INSERT_LEDGER_RESET: Final = text(
    "INSERT INTO reprocess.ledger_resets (pipeline, topic, partition, old_offset, new_offset, mode, value, reason, "
    "requested_by) VALUES (:pipeline, :topic, :partition, :old, :new, :mode, :value, :reason, :by) "
    "RETURNING reset_id"
)

# A run's planned spec version (a batch inherits its parent's), the version of the spec file that
# commits it, and the version the live table is at: the commit refuses when they differ.
RUN_SPEC_VERSIONS: Final = text(
    "SELECT coalesce(r.spec_version, parent.spec_version) AS planned, v.version AS spec, pl.spec_version AS live, "
    "pl.target_table AS target "
    "FROM reprocess.runs r LEFT JOIN reprocess.runs parent ON parent.run_id = r.parent_run_id "
    "JOIN reprocess.pipelines pl ON pl.name = r.pipeline "
    "LEFT JOIN reprocess.spec_versions v ON v.pipeline = r.pipeline AND v.fingerprint = :fingerprint "
    "WHERE r.run_id = :run_id"
)

# A batch of a rebuild is a rebuild too: it inherits its parent's mode.
RUN_MODE: Final = text(
    "SELECT coalesce(parent.mode, r.mode) FROM reprocess.runs r "
    "LEFT JOIN reprocess.runs parent ON parent.run_id = r.parent_run_id WHERE r.run_id = :run_id"
)
RUN_IS_PREVIEW: Final = text(
    "SELECT coalesce((request->'parsed'->>'preview')::boolean, false) FROM reprocess.runs WHERE run_id = :run_id"
)
SET_RUN_MODE: Final = text("UPDATE reprocess.runs SET mode = :mode WHERE run_id = :run_id")

SET_RUN_SPEC_VERSION: Final = text("UPDATE reprocess.runs SET spec_version = :version WHERE run_id = :run_id")

# One row per run, overwritten by each progress line (reprocess/spark/progress.py); started_at stays.
UPSERT_RUN_PROGRESS: Final = text(
    "INSERT INTO reprocess.run_progress (run_id, pipeline, planned, records_read, exact, records_per_s, "
    "eta_seconds, done) VALUES (:run_id, :pipeline, :planned, :records, :exact, :rate, :eta, :done) "
    "ON CONFLICT (run_id) DO UPDATE SET planned = EXCLUDED.planned, records_read = EXCLUDED.records_read, "
    "exact = EXCLUDED.exact, records_per_s = EXCLUDED.records_per_s, eta_seconds = EXCLUDED.eta_seconds, "
    "done = EXCLUDED.done, updated_at = now()"
)
