"""Runs and plans in Postgres: the one owner of their rows and state transitions.

Planning, the Spark job, batches and the commit protocol call these functions instead of
writing ``reprocess.runs``/``run_ranges``/``offset_snapshots`` themselves, so every state
change is guarded in one place and the behaviour modules do not import each other
(store sits below plan, batches and commit). Each function takes the caller's ``conn`` and
runs inside the caller's transaction; none commits.

State machine of a run (``runs.state``)::

    planned ─► staged ─► committed
       │  ▲       │
       ▼  │       ▼
      failed ◄────┘          dry_run (a plan that reads nothing, or a preview's diff done)

A staged or committed run's plan is final: a zombie plan attempt (an Airflow task retried
while the first one still runs) finds the guard in :func:`save_ranges` and keeps the plan.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from sqlalchemy import Connection, Engine, Row, text

from reprocess.core.errors import SpecError
from reprocess.core.names import child_run_id
from reprocess.core.progress import ProgressLine
from reprocess.core.ranges import OffsetRange, PartitionSnapshot
from reprocess.core.runs import LostRange, RunKind, RunMode, RunRanges, RunState
from reprocess.core.spec import PipelineSpec, TombstoneMode
from reprocess.postgres import queries
from reprocess.postgres.db import pg_cursor
from reprocess.postgres.evolve import migrate_target, register_version
from reprocess.postgres.registry import check_registration
from reprocess.postgres.target import create_markers_sql

log = logging.getLogger(__name__)

# A run in these states keeps its ranges when it is snapshotted again (a cleared DAG run).
KEPT_RANGES_STATES: Final = frozenset({RunState.STAGED, RunState.COMMITTED})
# A committed run's counts (columns of reprocess.runs, fields of commit.CommitResult).
RUN_COUNTS: Final = (
    "records_read", "rows_staged", "rows_upserted", "dead_letters", "dead_letters_new", "rows_deleted",
    "rows_inserted", "rows_rederived", "records_filtered", "rows_restamped", "values_incomplete",
)  # fmt: skip

_CREATE_CHILD: Final = text(
    "INSERT INTO reprocess.runs (run_id, pipeline, kind, state, request, parent_run_id, batch_index, batch_count, "
    "dag_id, dag_run_id, planned_at) SELECT :child, pipeline, kind, 'planned', request, run_id, :k, :n, dag_id, "
    "dag_run_id, now() FROM reprocess.runs WHERE run_id = :parent ON CONFLICT (run_id) DO NOTHING"
)
_CHILDREN: Final = text(
    "SELECT run_id, state, batch_index, records_read, rows_staged, rows_upserted, dead_letters, dead_letters_new, "
    "rows_deleted, rows_inserted, rows_rederived, records_filtered, rows_restamped, values_incomplete "
    "FROM reprocess.runs "
    "WHERE parent_run_id = :parent ORDER BY batch_index"
)
_MARK_PARENT_COMMITTED: Final = text(
    "UPDATE reprocess.runs SET state = 'committed', committed_at = now(), records_read = :records_read, "
    "rows_staged = :rows_staged, rows_upserted = :rows_upserted, dead_letters = :dead_letters, "
    "dead_letters_new = :dead_letters_new, rows_deleted = :rows_deleted, rows_inserted = :rows_inserted, "
    "rows_rederived = :rows_rederived, records_filtered = :records_filtered, rows_restamped = :rows_restamped, "
    "values_incomplete = :values_incomplete, error = NULL, batch_count = :n "
    "WHERE run_id = :run_id"
)


_SET_LIVE_VERSION: Final = text(
    "UPDATE reprocess.pipelines SET spec_version = (SELECT coalesce(spec_version, 0) FROM reprocess.runs "
    "WHERE run_id = :run_id), spec = CAST(:spec AS jsonb), updated_at = now() WHERE name = :pipeline"
)
_ALLOWS_DATA_LOSS: Final = text(
    "SELECT coalesce((request->'parsed'->>'allow_data_loss')::boolean, false) FROM reprocess.runs "
    "WHERE run_id = :run_id"
)
_ADD_LOST_RANGES: Final = text(
    "UPDATE reprocess.runs SET lost_ranges = lost_ranges || CAST(:lost AS jsonb) WHERE run_id = :run_id"
)


def ensure_pipeline(
    engine: Engine,
    spec: PipelineSpec,
    mode: RunMode = RunMode.MERGE,
    *,
    acknowledged: bool = False,
    migrate: bool = True,
) -> tuple[int, list[str]]:
    """Register the spec (and its version) and create or evolve its target table; returns the
    version and warnings about changes that were allowed (registry.check_registration).

    For a rebuild only the version is registered: the live table, and the spec the live
    pipeline runs under, stay as they are until the swap (swap.swap_in records the spec).
    Without ``migrate`` (a run's planning: its ``Migrate`` stage migrates, and a preview's Diff
    stage inside its own rolled-back transaction, :func:`migrate_live`) they stay as they are too:
    the evolution is checked in a savepoint rolled back, so a refusal surfaces now, and only the
    version is registered, which the run is stamped with. ``acknowledged`` is the request's
    acknowledge_partition_change.

    Raises
    ------
    SpecError
        Another pipeline owns the target, or the target, topics or ordering changed in a way the
        ledger cannot follow (registry.check_registration); the live table cannot take the spec
        in place (SchemaChangeError from evolve.migrate_target). Nothing changed.
    """
    with engine.begin() as conn:
        conn.execute(queries.PIPELINE_LOCK, {"pipeline": spec.name})
        warnings = check_registration(conn, spec, mode, acknowledged=acknowledged)
        if mode is not RunMode.REBUILD and migrate:
            return migrate_live(conn, spec), warnings
        conn.execute(queries.REGISTER_PIPELINE, _registration(spec))
        if mode is not RunMode.REBUILD:
            check = conn.begin_nested()
            try:
                migrate_live(conn, spec)
            finally:
                check.rollback()
        return register_version(conn, spec), warnings


def migrate_live(conn: Connection, spec: PipelineSpec) -> int:
    """Make the spec the live pipeline's: its registration, its target table created or evolved
    (evolve.migrate_target), its deletion markers table; returns the spec version. In the caller's
    transaction, under the pipeline's lock (a plan's diff rolls it back with the rest)."""
    conn.execute(queries.UPSERT_PIPELINE, _registration(spec))
    version = migrate_target(conn, spec)
    if spec.tombstones is TombstoneMode.DELETE:
        with pg_cursor(conn) as cur:
            cur.execute(create_markers_sql(spec))
    return version


def _registration(spec: PipelineSpec) -> dict[str, str]:
    return {"name": spec.name, "target": spec.qualified_target, "spec": json.dumps(spec.as_dict())}


def pipeline_registered(conn: Connection, name: str) -> bool:
    return conn.execute(queries.PIPELINE_EXISTS, {"name": name}).scalar_one()


def run_state(conn: Connection, run_id: str) -> RunState | None:
    state = conn.execute(queries.RUN_STATE, {"run_id": run_id}).scalar()
    return None if state is None else RunState(state)


def save_ranges(
    conn: Connection,
    spec: PipelineSpec,
    request_kind: RunKind,
    stored_request: Mapping[str, Any],
    run_id: str,
    *,
    state: RunState,
    snapshots: Sequence[PartitionSnapshot] = (),
    ranges: Sequence[OffsetRange] = (),
    lost: Sequence[LostRange] = (),
    dag_id: str | None = None,
    dag_run_id: str | None = None,
    error: str | None = None,
    spec_version: int | None = None,
) -> RunRanges | None:
    """Store a run's plan (or its planning failure) unless the run already staged or committed.

    The guarded upsert of the run row and the rewrite of its ranges and snapshots happen in
    the caller's ONE transaction: the upsert takes the run's row lock only when the run is
    still re-plannable, so a zombie attempt can never replace the ranges a stage was built from.

    ``spec_version`` (from :func:`ensure_pipeline`) is the spec version the run's rows are stamped with.
    Returns None when the plan was stored, or the run's existing (final) plan, untouched.
    """
    updated = conn.execute(
        queries.UPSERT_PLANNED_RUN,
        {
            "run_id": run_id,
            "pipeline": spec.name,
            "kind": request_kind.value,
            "state": state.value,
            "request": json.dumps(stored_request, default=str),
            "lost": json.dumps([lost_dict(x) for x in lost]),
            "dag_id": dag_id,
            "dag_run_id": dag_run_id,
            "error": error,
        },
    ).rowcount
    if not updated:
        log.info("plan run_id=%s pipeline=%s already staged or committed: keeping its plan", run_id, spec.name)
        return load_ranges(conn, run_id)
    conn.execute(queries.DELETE_PLAN_RANGES, {"run_id": run_id})
    conn.execute(queries.DELETE_PLAN_SNAPSHOTS, {"run_id": run_id})
    if snapshots:
        conn.execute(
            queries.INSERT_SNAPSHOTS,
            {"run_id": run_id, "topics": [s.topic for s in snapshots], "partitions": [s.partition for s in snapshots],
             "log_starts": [s.log_start for s in snapshots], "log_ends": [s.log_end for s in snapshots],
             "group_committed": [s.group_committed for s in snapshots],
             "topic_ids": [s.topic_id for s in snapshots],
             "high_watermarks": [s.high_watermark for s in snapshots]},
        )  # fmt: skip
    insert_ranges(conn, run_id, ranges)
    if spec_version is not None:
        conn.execute(queries.SET_RUN_SPEC_VERSION, {"run_id": run_id, "version": spec_version})
    return None


def insert_ranges(conn: Connection, run_id: str, ranges: Iterable[OffsetRange]) -> None:
    """All of a run's planned ranges in one statement (a wide topic has thousands)."""
    rows = list(ranges)
    if rows:
        conn.execute(
            queries.INSERT_RUN_RANGES,
            {"run_id": run_id, "topics": [r.topic for r in rows], "partitions": [r.partition for r in rows],
             "starts": [r.start for r in rows], "ends": [r.end for r in rows]},
        )  # fmt: skip


def lost_dict(lost: LostRange) -> dict[str, Any]:
    return {"topic": lost.topic, "partition": lost.partition, "start": lost.start, "end": lost.end}


def load_ranges(conn: Connection, run_id: str) -> RunRanges:
    row = conn.execute(queries.RUN_HEADER, {"run_id": run_id}).one()
    ranges = tuple(
        OffsetRange(r.topic, r.partition, r.start_offset, r.end_offset)
        for r in conn.execute(queries.RUN_RANGES, {"run_id": run_id})
    )
    lost = tuple(LostRange(**x) for x in (row.lost_ranges or []))
    return RunRanges(run_id, row.pipeline, RunKind(row.kind), ranges, lost, (), {r.tp: r.width for r in ranges})


def lock_run(conn: Connection, run_id: str) -> Row[Any] | None:
    """The run's (state, kind, stage_rows), locked against a second commit of it."""
    return conn.execute(queries.LOCK_RUN, {"run_id": run_id}).one_or_none()


def run_mode(conn: Connection, run_id: str) -> RunMode:
    """Where the run (or, for a batch, its parent) writes: a rebuild's shadow table is swapped in (rebuild.py)."""
    return RunMode(conn.execute(queries.RUN_MODE, {"run_id": run_id}).scalar() or RunMode.MERGE)


def is_preview(conn: Connection, run_id: str) -> bool:
    """The run is a plan (``reprocess plan``): its last stage diffs instead of committing."""
    return bool(conn.execute(queries.RUN_IS_PREVIEW, {"run_id": run_id}).scalar())


def mark_previewed(conn: Connection, run_id: str) -> None:
    """staged → dry_run: a plan's diff is done and stored (reprocess.plans); nothing was written."""
    conn.execute(queries.MARK_PREVIEWED, {"run_id": run_id})


def mark_rebuild(conn: Connection, run_id: str) -> None:
    conn.execute(queries.SET_RUN_MODE, {"run_id": run_id, "mode": RunMode.REBUILD.value})


def mark_staged(conn: Connection, run_id: str, stage_rows: int | None) -> None:
    """planned/failed/staged → staged with the row count the stage must hold at commit."""
    conn.execute(queries.MARK_STAGED, {"run_id": run_id, "stage_rows": stage_rows})


def mark_failed(conn: Connection, run_id: str, error: str) -> None:
    """Any state but committed → failed, with the reason the run note shows."""
    conn.execute(queries.MARK_FAILED, {"run_id": run_id, "error": error})


def record_error(conn: Connection, run_id: str, error: str) -> None:
    """A failed task attempt's error on its run, the state kept (its retry may still succeed)."""
    conn.execute(queries.RECORD_ERROR, {"run_id": run_id, "error": error})


def record_failed_request(
    engine: Engine,
    spec: PipelineSpec,
    kind: RunKind,
    run_id: str,
    params: Mapping[str, Any] | None,
    error: str,
    *,
    parsed: Mapping[str, Any] | None = None,
    dag_id: str | None = None,
    dag_run_id: str | None = None,
    preview: bool = False,
) -> None:
    """A run refused before it was planned (its request did not parse, or the spec was refused) is
    still a run: failed, with its params and the error, so the run note says why.

    A refused spec is not registered; the run is recorded under the registration that stands. A
    pipeline never registered has no run table row to hang it on: then the task log holds the error.
    """
    try:
        ensure_pipeline(engine, spec, migrate=not preview)  # a plan's refusal migrates nothing either
    except SpecError as refused:
        log.info("record run_id=%s pipeline=%s under its standing registration: %s", run_id, spec.name, refused)
    with engine.begin() as conn:
        if not pipeline_registered(conn, spec.name):
            log.warning("record run_id=%s pipeline=%s is not registered; its error is in the task log only",
                        run_id, spec.name)  # fmt: skip
            return
        stored = {"params": dict(params) if params is not None else None, "parsed": parsed}
        save_ranges(conn, spec, kind, stored, run_id, state=RunState.FAILED, dag_id=dag_id, dag_run_id=dag_run_id,
                  error=error)  # fmt: skip


def mark_committed(conn: Connection, run_id: str, counts: Mapping[str, int]) -> None:
    conn.execute(queries.MARK_COMMITTED, {"run_id": run_id, **counts})


def make_spec_live(conn: Connection, spec: PipelineSpec, run_id: str) -> None:
    """A swap: the spec the run was planned under is the live pipeline's (its table is now)."""
    params = {"pipeline": spec.name, "run_id": run_id, "spec": json.dumps(spec.as_dict())}
    conn.execute(_SET_LIVE_VERSION, params)


def allows_data_loss(conn: Connection, run_id: str) -> bool:
    """The run's request accepts data loss (allow_data_loss)."""
    return bool(conn.execute(_ALLOWS_DATA_LOSS, {"run_id": run_id}).scalar())


def add_lost_ranges(conn: Connection, run_id: str, lost: Sequence[LostRange]) -> None:
    """Record more ranges the run accepted as lost (a swap's dropped rows, allow_data_loss)."""
    conn.execute(_ADD_LOST_RANGES, {"run_id": run_id, "lost": json.dumps([lost_dict(x) for x in lost])})


def touch_target(conn: Connection, run_id: str) -> None:
    """The run changed the live target (a commit that read records, a swap): plans made before are stale."""
    conn.execute(queries.TOUCH_TARGET, {"run_id": run_id})


def last_target_commit(conn: Connection, pipeline: str) -> int:
    """The number of the pipeline's last commit to its live target (0: none yet); a plan keeps it."""
    return int(conn.execute(queries.LAST_TARGET_COMMIT, {"pipeline": pipeline}).scalar() or 0)


def target_commits_since(conn: Connection, pipeline: str, since: int) -> list[str]:
    """The runs that committed to the pipeline's live target after commit number ``since``, in order."""
    return list(conn.execute(queries.TARGET_COMMITS_SINCE, {"pipeline": pipeline, "since": since}).scalars())


def committed_counts(conn: Connection, run_id: str) -> Row[Any]:
    return conn.execute(queries.RUN_COUNTS, {"run_id": run_id}).one()


def accepted_lost_ranges(conn: Connection, run_id: str) -> list[dict[str, Any]]:
    """Lost ranges the run (or, for a batch, its parent run) accepted with allow_data_loss."""
    return [x for (x,) in conn.execute(queries.RUN_LOST_RANGES, {"run_id": run_id})]


# --------------------------------------------------------------------------- batches (child runs)
def create_batch_runs(conn: Connection, parent: str, batches: Sequence[Sequence[OffsetRange]]) -> dict[str, RunState]:
    """Child run ``<parent>#<k>`` per batch, created once (a resumed run keeps its batches' ranges).

    Returns each child's state.
    """
    n = len(batches)
    for k, batch in enumerate(batches):
        child = child_run_id(parent, k)
        conn.execute(_CREATE_CHILD, {"child": child, "parent": parent, "k": k, "n": n})
        if not conn.execute(queries.RUN_RANGES, {"run_id": child}).first():
            insert_ranges(conn, child, batch)
    return {r.run_id: RunState(r.state) for r in batch_runs(conn, parent)}


def batch_cut(conn: Connection, parent: str) -> tuple[list[tuple[OffsetRange, ...]], set[str]]:
    """The batches an earlier attempt of a chunked run recorded (their ranges, in order), and
    those of them committed: a resumed run keeps its cut and goes on after them."""
    children = batch_runs(conn, parent)
    cut = [load_ranges(conn, c.run_id).ranges for c in children]
    return cut, {c.run_id for c in children if c.state == RunState.COMMITTED}


def batch_runs(conn: Connection, parent: str) -> list[Row[Any]]:
    """A chunked run's batches in order, with their states and counts (empty: not chunked)."""
    return list(conn.execute(_CHILDREN, {"parent": parent}))


def mark_parent_committed(conn: Connection, run_id: str, n: int, totals: Mapping[str, int]) -> None:
    conn.execute(_MARK_PARENT_COMMITTED, {"run_id": run_id, "n": n, **totals})


def save_progress(engine: Engine, line: ProgressLine) -> None:
    """The run's latest progress line (its own short transaction: it never waits on the stage)."""
    with engine.begin() as conn:
        conn.execute(
            queries.UPSERT_RUN_PROGRESS,
            {"run_id": line.run_id, "pipeline": line.pipeline, "planned": line.planned, "records": line.records,
             "exact": line.exact, "rate": line.rate, "eta": line.eta_s, "done": line.done},
        )  # fmt: skip
