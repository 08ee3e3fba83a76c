"""DESIGN §2's steps 3-4 over a run's stage, in the caller's transaction: the dead-letter ratio,
the refusals of the stage, the merge, the tombstones, Debezium's left-out values and the dead
letters. A commit (:mod:`reprocess.postgres.commit`) runs them for good; a plan
(:mod:`reprocess.postgres.diff`) runs the very same ones in a transaction it rolls back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg2 import sql
from sqlalchemy import Connection

from reprocess.core.errors import StageRefusedError
from reprocess.core.ranges import OffsetRange
from reprocess.core.spec import PipelineSpec, TombstoneMode
from reprocess.core.stages import WriteTarget
from reprocess.postgres import left_out, queries, store
from reprocess.postgres.db import one_row, pg_cursor
from reprocess.postgres.dead_letters import (
    dead_letters_sql,
    known_dead_letters_sql,
    resolve_dead_letters_sql,
)
from reprocess.postgres.digest import pinned_output
from reprocess.postgres.merge import (
    apply_tombstones_sql,
    delete_underived_sql,
    drop_superseded_markers_sql,
    merge_sql,
    split_keys_sql,
)
from reprocess.postgres.merge_refusals import merge_isolating
from reprocess.postgres.moved_values import prune_moved_values
from reprocess.postgres.rebuild_keys import keep_rebuild_keys_sql
from reprocess.postgres.stage import stage_counts_sql


def stage_counts(cur: Any, stage: sql.Composable) -> dict[str, int]:
    """The stage's own counts (:func:`~reprocess.postgres.stage.stage_counts_sql`) under the names of
    :data:`~reprocess.postgres.store.RUN_COUNTS`, the others 0; ``_filtered_rows`` and ``_moved``
    are the stage rows holding the filtered count and the moved values."""
    cur.execute(stage_counts_sql(stage))
    records, staged, dead, filtered, filtered_rows, moved = (int(x) for x in one_row(cur))
    counts = dict.fromkeys(store.RUN_COUNTS, 0)
    counts.update(records_read=records, rows_staged=staged, dead_letters=dead, records_filtered=filtered)
    return {**counts, "_filtered_rows": filtered_rows, "_moved": moved}


def merge_stage(
    conn: Connection,
    spec: PipelineSpec,
    run_id: str,
    stage: sql.Composable,
    *,
    into: WriteTarget,
    rederives: Sequence[OffsetRange],
    spec_version: int,
    counts: dict[str, int],
) -> dict[str, int]:
    """DESIGN §2's steps 3-4 in the caller's transaction: the refusals of the stage, the merge, the
    tombstones, Debezium's left-out values, the dead letters. Returns the counts they wrote.

    The one place these statements run: a commit runs them for good, and a plan
    (:mod:`reprocess.postgres.diff`) runs the very same ones in a transaction it rolls back, so
    what a plan says a replay will change and what the replay then changes cannot disagree.
    ``into`` is where the rows go (the live target, or a rebuild's shadow); ``rederives`` the ranges
    whose rows of another spec version the run re-derives or deletes (:func:`~reprocess.postgres.merge.underived_sql`):
    a backfill's into the live target (a replay, an apply, a heal); none for an incremental, which
    reads past the ledger (no scan of the target per run), nor for a rebuild's batches (the shadow
    holds only rows they wrote).
    """
    target = into.spec(spec)
    owner = into.dead_letters_owner  # whose dead letters this run writes
    cur = pg_cursor(conn)
    dead, filtered = counts["dead_letters"], counts["records_filtered"]
    _check_dead_letter_ratio(conn, spec, run_id, stage, counts["records_read"] - filtered, dead, owner)
    if spec.ordering.column is None:
        _refuse_split_keys(cur, target, run_id, stage)
    # 3. Merge: a newer record replaces the row (or its deletion marker); the same record
    #    re-derives it when it derives differently; tombstones newer than the row delete it
    #    and leave a marker, so replays never resurrect. Debezium's left-out values are
    #    found first, and those nobody holds are recorded after.
    #    A record PostgreSQL refuses there becomes a dead letter (postgres.merge_refusals).
    params = {"run_id": run_id, "spec_version": spec_version}
    reread = tuple(rederives)

    def merge() -> tuple[int, ...]:
        if spec.unchanged_columns:
            left_out.resolve(cur, target, stage, owner, live=None if into.moves_ledger else spec)
        deleted = incomplete = 0
        if reread:  # after step 1, which may take a left-out value from such a row
            cur.execute(delete_underived_sql(target, stage, reread), params)
            deleted = cur.rowcount
        with pinned_output(cur):  # the rows' digests: their values' text as every session renders it
            cur.execute(merge_sql(target, stage), params)
            merged = tuple(int(x) for x in one_row(cur))
        if spec.tombstones is TombstoneMode.DELETE:
            cur.execute(apply_tombstones_sql(target, stage), params)
            deleted += int(one_row(cur)[0])
            cur.execute(drop_superseded_markers_sql(target, stage))
        if spec.unchanged_columns:
            left_out.keep_moved_values(cur, target, stage, owner, run_id)
            incomplete = left_out.record_incomplete(cur, target, stage, owner, run_id)
            prune_moved_values(cur, target, stage, owner)
        return (*merged, deleted, incomplete)

    merged, refused = merge_isolating(cur, target, stage, params, merge)
    upserted, inserted, rederived, restamped, deleted, incomplete = merged
    if into.keeps_keys:  # what Verify checks the shadow against: the newest record per key Spark staged
        cur.execute(keep_rebuild_keys_sql(target, stage))
    # 4. Dead letters, in the same transaction as the good rows; earlier ones whose record
    #    now parses (a redrive after a fix) are marked resolved by this run. A rebuild's
    #    batches keep theirs apart and resolve nothing: its swap does both (postgres.swap).
    if into.moves_ledger:
        cur.execute(resolve_dead_letters_sql(stage), {"pipeline": owner, "run_id": run_id})
    cur.execute(dead_letters_sql(stage), {"pipeline": owner, "run_id": run_id})
    return {"rows_upserted": upserted, "rows_inserted": inserted, "rows_rederived": rederived,
            "rows_restamped": restamped, "rows_deleted": deleted, "values_incomplete": incomplete,
            "rows_staged": counts["rows_staged"] - refused, "dead_letters": dead + refused,
            "dead_letters_new": cur.rowcount}  # fmt: skip


def _check_dead_letter_ratio(
    conn: Connection, spec: PipelineSpec, run_id: str, stage: sql.Composable, records: int, dead: int, owner: str
) -> None:
    """Refuse a stage whose NEW dead letters exceed ``max_dead_letter_ratio`` of the records that can land.

    The ratio guards against a broken producer, so it judges the records a producer broke:
    - records that are already open dead letters and fail again (a replay, or a redrive of one
      error kind that re-reads another kind between them) are neither new nor able to land, so
      they count on neither side;
    - tombstones the spec keeps as dead letters (``tombstones: dead_letter``) are the spec's own
      rule, not a fault: they count on neither side either, so an incremental of 3 records with 1
      tombstone commits (the tombstone is still a dead letter, counted in the run's summary).
    A batch is judged with its whole run: the run's committed batches, and the offsets its later
    batches have still to read (at most one record each), so a burst inside one batch is judged
    as the unbatched run would be, and a refused incremental's next run, which starts at the same
    offsets, dilutes the burst with every record that arrived since.
    """
    with pg_cursor(conn) as cur:
        tombstones_dead = spec.tombstones is TombstoneMode.DEAD_LETTER
        cur.execute(known_dead_letters_sql(stage, tombstones_dead=tombstones_dead), {"pipeline": owner})
        known, by_rule = (int(x) for x in one_row(cur))
    run = conn.execute(queries.RUN_BATCH_SIBLINGS, {"run_id": run_id}).one()
    new_dead = dead - known - by_rule + int(run.new_dead)
    landable = records - known - by_rule + int(run.landable) + int(run.unread)
    if landable and new_dead / landable > spec.max_dead_letter_ratio:
        raise StageRefusedError(
            f"{spec.name}: run {run_id} has {new_dead} new dead letters in {landable} records that can land "
            f"({new_dead / landable:.1%} > max_dead_letter_ratio {spec.max_dead_letter_ratio:.1%}; its records read "
            f"again that were dead letters already and still fail do not count: {known}; nor tombstones kept as "
            f"dead letters by the spec: {by_rule}); nothing was committed. "
            "Inspect the stage, fix the producer or the spec, or raise the threshold.",
            pipeline=spec.name,
            run_id=run_id,
        )


def _refuse_split_keys(cur: Any, spec: PipelineSpec, run_id: str, stage: sql.Composable) -> None:
    """Offset ordering holds only while each key stays on one (topic, partition): a producer that
    does not key records by the spec's key puts one key on two, and the higher partition would
    win forever whatever its records' age. Such a stage is refused, naming keys and partitions."""
    cur.execute(split_keys_sql(spec, stage, 3))
    split = cur.fetchall()
    if split:
        raise StageRefusedError(
            f"{spec.name}: run {run_id} has records of one key on more than one partition ("
            + "; ".join(f"key {k!r} on {where}" for k, where in split)
            + "); ordering: offset compares offsets only within one partition, so the higher partition would win "
            "whatever the records' age. Nothing was committed. Make the producer key its records by "
            f"({', '.join(spec.key)}), or order the pipeline by a required version or event-time column "
            "(ordering: {mode: column, column: <name>}) and rebuild the table with mode=rebuild.",
            pipeline=spec.name,
            run_id=run_id,
        )
