"""The commit protocol (DESIGN §2): one Postgres transaction makes a staged run visible.

:func:`commit_protocol` is its frame (lock, check state, and a refused run marked failed) around
each kind of commit, as the stage (:mod:`reprocess.core.stages`) says: :func:`commit_merge` (fence,
merge, dead letters, ledger, run state, drop the stage) for a :class:`~reprocess.core.stages.Merge`
into the target its stage names, :func:`finish_batches` for a batched run's own commit (every batch
went through the merge; it checks and sums them), and a rebuild's swap (:mod:`reprocess.postgres.swap`).
Either all of a commit is visible or none of it. Run rows, state transitions and the ledger are
written through :mod:`reprocess.postgres.store` and :mod:`reprocess.postgres.queries`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import Connection, Engine, Row
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
from reprocess.core.runs import RunState
from reprocess.core.spec import PipelineSpec
from reprocess.core.stages import Merge
from reprocess.postgres import queries, store
from reprocess.postgres.batch_commit import sum_committed_batches
from reprocess.postgres.db import one_row, pg_cursor
from reprocess.postgres.digest import as_writer
from reprocess.postgres.ledger import advance_ledger, ledger_positions
from reprocess.postgres.merge_stage import merge_stage, stage_counts
from reprocess.postgres.stage import drop_stage, stage_identifier

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


def commit_merge(engine: Engine, spec: PipelineSpec, merge: Merge) -> CommitResult:
    """Merge a staged run (or batch) into ``merge.into`` and, into the live target, advance the
    ledger, atomically and once (:func:`commit_protocol`).

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
    return commit_protocol(engine, spec, merge.run_id, lambda conn, run: _merge(conn, spec, merge, run))


def finish_batches(engine: Engine, spec: PipelineSpec, run_id: str) -> CommitResult:
    """A batched run's own commit (:func:`commit_protocol`): every batch went through the protocol;
    this checks they all committed and cover its ranges, and sums them."""

    def finish(conn: Connection, run: Row[Any]) -> CommitResult:
        totals = sum_committed_batches(conn, run_id)
        if totals is None:
            raise RunStateError(f"{spec.name}: run {run_id} has no batches; nothing was committed", run_id=run_id)
        log.info("commit run_id=%s pipeline=%s all batches committed %s", run_id, spec.name, totals)
        return CommitResult(run_id, False, **totals)

    return commit_protocol(engine, spec, run_id, finish)


def commit_protocol(
    engine: Engine, spec: PipelineSpec, run_id: str, body: Callable[[Connection, Row[Any]], CommitResult]
) -> CommitResult:
    """DESIGN §2's frame around every commit (a merge, a batched run's finish, a rebuild's swap):
    one transaction that takes the pipeline lock and the run's row lock, answers "already
    committed" for a committed run, refuses one that is not staged, then runs ``body``.

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
    """
    try:
        with outcome_unknown_on_disconnect(spec, run_id), engine.begin() as conn:
            # 1. One committer per pipeline; the run row is locked against a second commit of it.
            conn.execute(queries.PIPELINE_LOCK, {"pipeline": spec.name})
            as_writer(conn)  # its writes keep the targets' row digests (postgres.digest)
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
            return body(conn, run)
    except (FencedRunError, StageRefusedError, SchemaChangeError) as refused:
        with engine.begin() as conn:
            store.mark_failed(conn, run_id, str(refused))
            if isinstance(refused, SchemaChangeError):
                drop_stage(conn.connection, spec, run_id)
        raise


def _merge(conn: Connection, spec: PipelineSpec, merge: Merge, run: Row[Any]) -> CommitResult:
    """DESIGN §2's steps 2-6 in the protocol's transaction."""
    run_id, live = merge.run_id, merge.into.moves_ledger
    run_ranges = store.load_ranges(conn, run_id)
    starts = _accounted_starts(conn, run_id, run_ranges.ranges)

    # 2. Incremental runs: compare-and-set on the ledger fences concurrent or zombie runs.
    if merge.fenced:
        _check_fence(conn, spec, run_id, starts)
    spec_version = check_spec_version(conn, spec, run_id, live=live)

    stage = stage_identifier(spec, run_id)
    cur = pg_cursor(conn)
    cur.execute("SELECT to_regclass(%s)", (stage.as_string(cur),))
    has_stage = one_row(cur)[0] is not None
    if not has_stage and not run_ranges.is_empty:
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
        counts.update(
            merge_stage(conn, spec, run_id, stage, into=merge.into, rederives=merge.rederives,
                        spec_version=spec_version, counts=counts)
        )  # fmt: skip

    # 5. Ledger, committed ranges (a rebuild moves them at its swap), run state.
    if live:
        advance_ledger(conn, spec.name, run_id, run_ranges.ranges, starts)
    store.mark_committed(conn, run_id, counts)
    if counts["records_read"] and live:  # a rebuild changes the live table at its swap
        store.touch_target(conn, run_id)

    # 6. The stage has served its purpose.
    if has_stage:
        drop_stage(conn.connection, spec, run_id)
    log.info(
        "commit run_id=%s pipeline=%s into=%s records=%d staged=%d upserted=%d deleted=%d dead_letters=%d (new %d)",
        run_id, spec.name, merge.into.name, counts["records_read"], counts["rows_staged"], counts["rows_upserted"],
        counts["rows_deleted"], counts["dead_letters"], counts["dead_letters_new"],
    )  # fmt: skip
    return CommitResult(run_id, False, **counts)


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


def _check_fence(conn: Connection, spec: PipelineSpec, run_id: str, starts: dict[TopicPartition, int]) -> None:
    ledger = ledger_positions(conn, spec.name, for_update=True)
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
