"""The commit protocol (DESIGN §2): one Postgres transaction makes a staged run visible.

Read top to bottom, :func:`commit_run` is the protocol: lock, check state, fence, merge,
dead letters, ledger, run state, drop the stage. Either all of it is visible or none of it.
A chunked run's batches each go through the same protocol; the run's own commit then only checks
that every batch committed and sums them. Run rows and
state transitions are written through :mod:`reprocess.postgres.store`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from psycopg2 import sql
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from reprocess.core.errors import (
    CommitInterrupted,
    FencedRunError,
    RunStateError,
    SchemaChangeError,
    StageLostError,
    StageRefusedError,
)
from reprocess.core.ranges import OffsetRange, TopicPartition
from reprocess.core.runs import RunKind, RunMode, RunState
from reprocess.core.spec import PipelineSpec, TombstoneMode
from reprocess.postgres import left_out, queries, store
from reprocess.postgres.batch_commit import sum_committed_batches
from reprocess.postgres.db import one_row, pg_cursor
from reprocess.postgres.dead_letters import (
    dead_letters_owner,
    dead_letters_sql,
    known_dead_letters_sql,
    resolve_dead_letters_sql,
)
from reprocess.postgres.merge import apply_tombstones_sql, drop_superseded_markers_sql, merge_sql, split_keys_sql
from reprocess.postgres.merge_refusals import merge_isolating
from reprocess.postgres.stage import drop_stage, stage_counts_sql, stage_identifier
from reprocess.postgres.target import shadow_spec

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CommitResult:
    run_id: str
    already_committed: bool
    records_read: int
    rows_staged: int
    rows_upserted: int
    dead_letters: int  # dead letters found in this run's records
    dead_letters_new: int  # of those, stored now (a replay finds the ones an earlier run stored)
    rows_deleted: int  # rows deleted by tombstones (spec ``tombstones: delete``)
    rows_inserted: int = 0  # of rows_upserted: new keys
    rows_rederived: int = 0  # of rows_upserted: the same record, derived differently (a spec change)
    records_filtered: int = 0  # of records_read: good records the spec's ``where`` did not keep
    rows_restamped: int = 0  # not in rows_upserted: the same record derived to the same values by a new spec version
    values_incomplete: int = (
        0  # Debezium: left-out values nobody could give (postgres.left_out), NULL in the rows written
    )


def commit_run(engine: Engine, spec: PipelineSpec, run_id: str) -> CommitResult:
    """Merge a staged run into the target and advance the ledger, atomically and once.

    A run whose stage can never commit (fenced, dead letters over the threshold, rows lost, the
    spec changed since it was planned) is marked ``failed`` with the reason, in a transaction of
    its own after the rollback, so its note says why. The next planning drops the stage of a
    fenced or refused run (stage.drop_leftover_stages; it stays for inspection until then); a
    spec change drops it at once, since a stage of the old spec's columns is no use to anyone and
    the next planning may itself stop at the change (a rebuild is needed) before it cleans up.

    A commit whose connection drops while it is in flight may or may not have committed: it
    raises :class:`CommitInterrupted`, and the retry (Airflow's, or a second call) finds out from
    the database. It takes the pipeline lock first, so it waits for the first attempt's
    transaction if the server still holds it, then reads the run's state: ``committed`` answers
    "already committed" (nothing applied twice); anything else commits it now (nothing lost).

    Raises
    ------
    CommitInterrupted
        The connection dropped during the commit; retrying is safe.
    FencedRunError
        An incremental run whose planned starts no longer match the ledger.
    SchemaChangeError
        The spec file changed since the run was planned.
    StageRefusedError
        Its dead letters exceed the pipeline's threshold, or its stage lost rows.
    ReprocessError
        The run is not staged.
    """
    try:
        with outcome_unknown_on_disconnect(spec, run_id):
            return _commit_once(engine, spec, run_id)
    except (FencedRunError, StageRefusedError, SchemaChangeError) as refused:
        with engine.begin() as conn:
            store.mark_failed(conn, run_id, str(refused))
            if isinstance(refused, SchemaChangeError):
                drop_stage(conn.connection, spec, run_id)
        raise


def _commit_once(engine: Engine, spec: PipelineSpec, run_id: str) -> CommitResult:
    """DESIGN §2's steps 1-6 in one transaction."""
    with engine.begin() as conn:
        # 1. One committer per pipeline; the run row is locked against a second commit of it.
        conn.execute(queries.PIPELINE_LOCK, {"pipeline": spec.name})
        run = store.lock_run(conn, run_id)
        if run is None:
            raise RunStateError(
                f"{spec.name}: run {run_id} does not exist; plan it first", pipeline=spec.name, run_id=run_id
            )
        if run.state == RunState.COMMITTED:
            log.info("commit run_id=%s pipeline=%s already committed: no-op", run_id, spec.name)
            return _committed_result(conn, run_id)
        if run.state != RunState.STAGED:
            raise RunStateError(
                f"{spec.name}: run {run_id} is {run.state}, not staged; run the Spark stage first",
                pipeline=spec.name,
                run_id=run_id,
            )
        # A rebuild's batches merge into its shadow table; its own commit is the swap (rebuild.swap_in).
        mode = store.run_mode(conn, run_id)
        rebuild = mode is RunMode.REBUILD
        if rebuild and not store.is_batch(conn, run_id):
            raise RunStateError(
                f"{spec.name}: run {run_id} is a rebuild: it commits by swapping its shadow in (rebuild.swap_in, "
                "the commit task of its DAG run), never as a plain run; nothing was committed",
                pipeline=spec.name,
                run_id=run_id,
            )
        # A chunked run committed batch by batch (each through this protocol); its own commit only
        # checks and sums them.
        totals = None if rebuild else sum_committed_batches(conn, run_id)
        if totals is not None:
            log.info("commit run_id=%s pipeline=%s all batches committed %s", run_id, spec.name, totals)
            return CommitResult(run_id, False, **totals)
        plan = store.load_plan(conn, run_id)

        starts = _accounted_starts(conn, run_id, plan.ranges)

        # 2. Incremental runs: compare-and-set on the ledger fences concurrent or zombie runs.
        if RunKind(run.kind) is RunKind.INCREMENTAL:
            _check_fence(conn, spec, run_id, starts)
        spec_version = check_spec_version(conn, spec, run_id, live=not rebuild)

        stage = stage_identifier(spec, run_id)
        cur = pg_cursor(conn)
        cur.execute("SELECT to_regclass(%s)", (stage.as_string(cur),))
        has_stage = one_row(cur)[0] is not None
        if not has_stage and not plan.is_empty:
            raise StageLostError(
                f"{spec.name}: run {run_id} is staged but its stage table is gone; re-run the stage",
                pipeline=spec.name,
                run_id=run_id,
            )
        counts = dict.fromkeys(store.RUN_COUNTS, 0)
        if has_stage:
            counts = stage_counts(cur, stage)
            held = counts["rows_staged"] + counts["dead_letters"] + counts.pop("_filtered_rows") + counts.pop("_moved")
            if run.stage_rows is not None and held != run.stage_rows:
                raise StageRefusedError(
                    f"{spec.name}: run {run_id}'s stage holds {held} rows but the Spark "
                    f"job staged {run.stage_rows}; the stage was lost or altered (a Postgres crash-restart empties "
                    "UNLOGGED tables). Nothing was committed: re-run spark_read_stage.",
                    pipeline=spec.name,
                    run_id=run_id,
                )
            counts.update(merge_stage(conn, spec, run_id, stage, mode=mode, spec_version=spec_version, counts=counts))

        # 5. Ledger, committed ranges (a rebuild moves them at its swap), run state.
        for r in () if rebuild else plan.ranges:
            params = {"pipeline": spec.name, "run_id": run_id, "topic": r.topic, "partition": r.partition,
                      "start": r.start, "end": r.end}  # fmt: skip
            conn.execute(queries.ADVANCE_LEDGER, {**params, "start": starts[r.tp]})
            conn.execute(queries.INSERT_COMMITTED_RANGE, params)
        store.mark_committed(conn, run_id, counts)

        # 6. The stage has served its purpose.
        if has_stage:
            drop_stage(conn.connection, spec, run_id)
    log.info(
        "commit run_id=%s pipeline=%s records=%d staged=%d upserted=%d deleted=%d dead_letters=%d (new %d)",
        run_id, spec.name, counts["records_read"], counts["rows_staged"], counts["rows_upserted"],
        counts["rows_deleted"], counts["dead_letters"], counts["dead_letters_new"],
    )  # fmt: skip
    return CommitResult(run_id, False, **counts)


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
    mode: RunMode,
    spec_version: int,
    counts: dict[str, int],
) -> dict[str, int]:
    """DESIGN §2's steps 3-4 in the caller's transaction: the refusals of the stage, the merge, the
    tombstones, Debezium's left-out values, the dead letters. Returns the counts they wrote.

    The one place these statements run: a commit runs them for good, and a plan
    (:mod:`reprocess.postgres.diff`) runs the very same ones in a transaction it rolls back, so
    what a plan says a replay will change and what the replay then changes cannot disagree.
    """
    rebuild = mode is RunMode.REBUILD
    target = shadow_spec(spec) if rebuild else spec
    owner = dead_letters_owner(spec, mode)  # whose dead letters this run writes
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

    def merge() -> tuple[int, ...]:
        if spec.unchanged_columns:
            left_out.resolve(cur, target, stage, owner, live=spec if rebuild else None)
        cur.execute(merge_sql(target, stage), params)
        merged, deleted, incomplete = tuple(int(x) for x in one_row(cur)), 0, 0
        if spec.tombstones is TombstoneMode.DELETE:
            cur.execute(apply_tombstones_sql(target, stage), params)
            deleted = int(one_row(cur)[0])
            cur.execute(drop_superseded_markers_sql(target, stage))
        if spec.unchanged_columns:
            left_out.keep_moved_values(cur, target, stage, owner, run_id)
            incomplete = left_out.record_incomplete(cur, target, stage, owner, run_id)
        return (*merged, deleted, incomplete)

    merged, refused = merge_isolating(cur, target, stage, params, merge)
    upserted, inserted, rederived, restamped, deleted, incomplete = merged
    # 4. Dead letters, in the same transaction as the good rows; earlier ones whose record
    #    now parses (a redrive after a fix) are marked resolved by this run. A rebuild's
    #    batches keep theirs apart and resolve nothing: its swap does both (rebuild.swap_in).
    if not rebuild:
        cur.execute(resolve_dead_letters_sql(stage), {"pipeline": owner, "run_id": run_id})
    cur.execute(dead_letters_sql(stage), {"pipeline": owner, "run_id": run_id})
    return {"rows_upserted": upserted, "rows_inserted": inserted, "rows_rederived": rederived,
            "rows_restamped": restamped, "rows_deleted": deleted, "values_incomplete": incomplete,
            "rows_staged": counts["rows_staged"] - refused, "dead_letters": dead + refused,
            "dead_letters_new": cur.rowcount}  # fmt: skip


@contextmanager
def outcome_unknown_on_disconnect(spec: PipelineSpec, what: str) -> Iterator[None]:
    """A dropped connection during a commit becomes :class:`CommitInterrupted`, which says the
    retry is safe, instead of the driver's "server closed the connection unexpectedly"."""
    try:
        yield
    except DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
        raise CommitInterrupted(
            f"{spec.name}: the connection to PostgreSQL dropped while run {what} was committing, so this "
            "attempt cannot tell whether it committed. Nothing is lost or doubled either way: retry the task "
            "(Airflow does). The retry waits for the pipeline lock, reads the run's state and reports the run "
            f"committed, or commits it. Driver error: {str(exc.orig).strip()}"
        ) from exc


def _accounted_starts(conn: Connection, run_id: str, ranges: Iterable[OffsetRange]) -> dict[TopicPartition, int]:
    """Per partition, the lowest offset the run accounts for: its range start, or the start of
    the lost range (allow_data_loss) that ends there. The ledger may move across a recorded loss,
    never across an unrecorded one, so the next incremental run does not trip over it again.
    """
    lost = {(x["topic"], x["partition"], x["end"]): x["start"] for x in store.accepted_lost_ranges(conn, run_id)}
    return {r.tp: lost.get((r.topic, r.partition, r.start), r.start) for r in ranges}


def _check_dead_letter_ratio(
    conn: Connection, spec: PipelineSpec, run_id: str, stage: sql.Composable, records: int, dead: int, owner: str
) -> None:
    """Refuse a stage whose NEW dead letters exceed ``max_dead_letter_ratio`` of the records that can land.

    Records that are already open dead letters and fail again (a replay, or a redrive of one
    error kind that re-reads another kind between them) are neither new nor able to land, so
    they count on neither side. A batch is judged with its whole run: the run's committed
    batches, and the offsets its later batches have still to read (at most one record each), so
    a burst inside one batch is judged as the unbatched run would be, and a refused incremental's
    next run, which starts at the same offsets, dilutes the burst with every record that arrived since.
    """
    with pg_cursor(conn) as cur:
        cur.execute(known_dead_letters_sql(stage), {"pipeline": owner})
        known = int(one_row(cur)[0])
    run = conn.execute(queries.RUN_BATCH_SIBLINGS, {"run_id": run_id}).one()
    new_dead = dead - known + int(run.new_dead)
    landable = records - known + int(run.landable) + int(run.unread)
    if landable and new_dead / landable > spec.max_dead_letter_ratio:
        raise StageRefusedError(
            f"{spec.name}: run {run_id} has {new_dead} new dead letters in {landable} records that can land "
            f"({new_dead / landable:.1%} > max_dead_letter_ratio {spec.max_dead_letter_ratio:.1%}; its records read "
            f"again that were dead letters already and still fail do not count: {known}); nothing was committed. "
            "Inspect the stage, fix the producer or the spec, or raise the threshold.",
            pipeline=spec.name,
            run_id=run_id,
        )


def _check_fence(conn: Connection, spec: PipelineSpec, run_id: str, starts: dict[TopicPartition, int]) -> None:
    ledger = {
        TopicPartition(r.topic, r.partition): r.next_offset
        for r in conn.execute(queries.LEDGER_FOR_UPDATE, {"pipeline": spec.name})
    }
    moved = [
        f"{tp}: planned from {start}, ledger now at {ledger[tp]}"
        for tp, start in starts.items()
        if tp in ledger and ledger[tp] != start
    ]
    if moved:
        raise FencedRunError(
            f"{spec.name}: run {run_id} is fenced: another run moved the ledger since it was planned "
            f"({'; '.join(moved)}). Nothing was committed; the next incremental run picks up from the ledger.",
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


def check_spec_version(
    conn: Connection, spec: PipelineSpec, run_id: str, *, live: bool, step: str = "committed"
) -> int:
    """The spec version the run's rows are stamped with; refuses a commit under another spec or table.

    A run is planned under one spec version; if the spec file changed since, or the target was
    migrated or rebuilt to another version, its stage no longer fits: the commit stops with this
    message instead of a Postgres error in the middle of the merge. The Spark stage asks first
    (``step="read"``, ``live=False``), so a changed spec is refused before anything is read.
    """
    row = conn.execute(queries.RUN_SPEC_VERSIONS, {"run_id": run_id, "fingerprint": spec.fingerprint}).one()
    planned = row.planned if row.planned is not None else row.spec
    if live and row.live is not None and row.live != planned:
        raise FencedRunError(
            f"{spec.name}: run {run_id} was planned for spec v{planned} but {spec.qualified_target} is at "
            f"v{row.live} (migrated or rebuilt since); nothing was committed. Trigger the run again.",
            pipeline=spec.name,
            run_id=run_id,
        )
    if live and row.target != spec.qualified_target:
        raise SchemaChangeError(
            f"{spec.name}: run {run_id} was planned for {row.target} but {spec.source_file} now names "
            f"{spec.qualified_target}; nothing was committed. Trigger the run again: planning says whether the "
            "ledger can follow the new target.",
            pipeline=spec.name,
            run_id=run_id,
        )
    if row.spec is None or row.spec != planned:
        raise SchemaChangeError(
            f"{spec.name}: run {run_id} was planned under spec v{planned} but {spec.source_file} is now "
            f"{'an unregistered spec' if row.spec is None else f'v{row.spec}'}; nothing was {step}. Trigger "
            "the run again: planning registers the new spec and migrates the table (or says why it cannot).",
            pipeline=spec.name,
            run_id=run_id,
        )
    return int(planned)


def _committed_result(conn: Connection, run_id: str) -> CommitResult:
    row = store.committed_counts(conn, run_id)
    return CommitResult(run_id, True, **{name: getattr(row, name) or 0 for name in store.RUN_COUNTS})


def result_dict(result: CommitResult) -> dict[str, object]:
    return asdict(result)
