"""The one evaluator of a run's stages (:mod:`reprocess.core.stages`), whatever launches it.

The planning task, the Spark task (a Spark Connect client or the spark-submit driver) and the
commit task of a DAG each evaluate their part of the same stage list (the stages naming that
task: :func:`~reprocess.core.stages.for_task`); the benchmarks and tests evaluate it whole. It
dispatches on the stage's type, one function per kind of stage (:data:`_RUN`): a new course of a
run is one stage value there and one function here. A :class:`~reprocess.core.stages.Read` needs
a :class:`Reader` (the Spark side, which only reads, decodes and stages); every other stage is
Postgres work done here, with what the stage carries (nothing asks PostgreSQL what kind of run it is).

A batch's commit runs in a thread of its own while the next batch reads, so Spark never waits
for Postgres between batches (docs/performance.md measures it). The commits still run one after the other,
each only once the one before succeeded, so a failed commit stops the run before any later batch
commits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, Protocol

from sqlalchemy import Engine

from reprocess.core.errors import ReprocessError, SchemaChangeError
from reprocess.core.names import child_run_id, parent_run_id
from reprocess.core.runs import RunState
from reprocess.core.spec import PipelineSpec
from reprocess.core.stages import (
    CutBatches,
    Diff,
    FinishBatches,
    Merge,
    Migrate,
    PrepareShadow,
    Read,
    Stage,
    Swap,
    Verify,
    describe,
)
from reprocess.core.window_stages import ReadWindow, SnapshotWindow, Verdicts
from reprocess.operations.preview import diff_run
from reprocess.operations.rebuild_verify import verify_shadow
from reprocess.postgres import queries, store
from reprocess.postgres.commit import CommitResult, check_spec_version, commit_merge, finish_batches
from reprocess.postgres.swap import prepare_shadow, swap_in
from reprocess.runner.window import WindowCheck, evaluate_window

log = logging.getLogger(__name__)


class Reader(Protocol):
    """What reads a :class:`Read` stage into its stage table: the Spark side."""

    def read(self, stage: Read) -> int:
        """Stage ``stage.ranges`` under ``stage.stage_id``; returns the rows the stage holds."""
        ...

    def committed(self, stage: Read, records: int) -> None:
        """The batch ``stage`` read committed ``records`` records (exact progress)."""
        ...


@dataclass(frozen=True, slots=True)
class RunContext:
    """What the stages of one run work with."""

    engine: Engine
    spec: PipelineSpec
    reader: Reader | None = None
    window: WindowCheck | None = None  # a window check's broker, reader and findings (runner.window)


def evaluate(stages: Sequence[Stage], ctx: RunContext) -> CommitResult | None:
    """Run ``stages`` in order; returns the result of the last commit or swap evaluated."""
    if not stages:
        return None
    run_id = stages[0].run_id
    log.info("stages run_id=%s pipeline=%s %s", run_id, ctx.spec.name, describe(stages))
    if any(isinstance(s, Read) for s in stages):
        _check_planned_spec(ctx, run_id)
    result: CommitResult | None = None
    read_by: dict[str, tuple[Read, float]] = {}
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="reprocess-commit") as committer:
        pending: Future[CommitResult] | None = None
        try:
            for i, stage in enumerate(stages):
                if isinstance(stage, Read):
                    read_by[stage.stage_id] = (stage, time.monotonic())
                    _read(ctx, stage)  # while the batch before commits
                    continue
                if pending is not None:
                    result = pending.result()  # the commit before succeeded: this stage may follow it
                    pending = None
                after_read = i > 0 and isinstance(stages[i - 1], Read)
                if isinstance(stage, Merge) and after_read and stage.run_id in read_by:
                    pending = committer.submit(_commit_read, ctx, stage, *read_by[stage.run_id])
                else:
                    result = _RUN[type(stage)](ctx, stage)
            if pending is not None:
                result = pending.result()
        except BaseException as exc:
            failed = pending.exception() if pending is not None else None  # nothing cancels a commit
            if failed is not None and failed is not exc:  # waits for the commit in flight; say it failed too
                log.error("stages run_id=%s: a batch's commit failed as well: %s", run_id, failed)
            raise
    return result


def _check_planned_spec(ctx: RunContext, run_id: str) -> None:
    """Nothing is read under another spec than the one the run was planned with: a spec file that
    changed since the planning is refused here, before Spark reads, and the run says why."""
    try:
        with ctx.engine.begin() as conn:
            check_spec_version(conn, ctx.spec, run_id, live=False, step="read")
    except SchemaChangeError as changed:
        with ctx.engine.begin() as conn:
            store.mark_failed(conn, parent_run_id(run_id), str(changed))
        raise


def _read(ctx: RunContext, stage: Read) -> None:
    if ctx.reader is None:
        raise ReprocessError(f"{ctx.spec.name}: {describe([stage])} needs a Spark session; run it from the Spark task")
    rows = ctx.reader.read(stage)
    with ctx.engine.begin() as conn:
        store.mark_staged(conn, stage.stage_id, rows)


def _commit_read(ctx: RunContext, stage: Merge, read: Read, started: float) -> CommitResult:
    """A commit right after its own read: its progress and rate are the read's."""
    result = commit_merge(ctx.engine, ctx.spec, stage)
    if read.batch is not None and read.batch + 1 == read.batches:  # the run's batches hold its data now
        with ctx.engine.begin() as conn:
            store.mark_staged(conn, parent_run_id(stage.run_id), None)
    if ctx.reader is not None:
        ctx.reader.committed(read, result.records_read)
    seconds = time.monotonic() - started
    if read.batch is not None:  # a whole run's commit logs its own line (postgres.commit)
        log.info(
            "batch run_id=%s pipeline=%s %d of %d records=%d upserted=%d dead_letters=%d rows_per_s=%.0f",
            stage.run_id, ctx.spec.name, read.batch + 1, read.batches, result.records_read,
            result.rows_upserted, result.dead_letters, result.records_read / seconds if seconds else 0,
        )  # fmt: skip
    return result


def _migrate(ctx: RunContext, stage: Migrate) -> None:
    with ctx.engine.begin() as conn:
        conn.execute(queries.PIPELINE_LOCK, {"pipeline": ctx.spec.name})
        store.migrate_live(conn, ctx.spec)


def _prepare_shadow(ctx: RunContext, stage: PrepareShadow) -> None:
    with ctx.engine.begin() as conn:
        prepare_shadow(conn, ctx.spec, stage.run_id)


def _cut_batches(ctx: RunContext, stage: CutBatches) -> None:
    with ctx.engine.begin() as conn:
        states = store.create_batch_runs(conn, stage.run_id, stage.batches)
        children = [child_run_id(stage.run_id, k) for k in range(len(stage.batches))]
        done = [k for k, child in enumerate(children) if states.get(child) is RunState.COMMITTED]
        for k in done:
            log.info("batch run_id=%s %d of %d already committed: resuming after it", stage.run_id, k + 1,
                     len(stage.batches))  # fmt: skip
        if len(done) == len(stage.batches):  # resumed after its last batch
            store.mark_staged(conn, stage.run_id, None)


def _not_here(ctx: RunContext, stage: Read) -> None:
    raise ReprocessError(f"{ctx.spec.name}: {describe([stage])} is read by the evaluator's loop")


def _staged_empty(ctx: RunContext, run_id: str) -> None:
    """A run that reads nothing is staged as it is."""
    with ctx.engine.begin() as conn:
        store.mark_staged(conn, run_id, None)


def _merge(ctx: RunContext, stage: Merge) -> CommitResult:
    if stage.empty:
        _staged_empty(ctx, stage.run_id)
    return commit_merge(ctx.engine, ctx.spec, stage)


def _finish_batches(ctx: RunContext, stage: FinishBatches) -> CommitResult:
    return finish_batches(ctx.engine, ctx.spec, stage.run_id)


def _verify(ctx: RunContext, stage: Verify) -> None:
    """A swapped rebuild's shadow is the live table now: only a rebuild still to swap is verified.
    Its state is read under the pipeline's lock, so a swap in flight (a retry after a dropped
    connection) is waited for, then found committed."""
    with ctx.engine.begin() as conn:
        conn.execute(queries.PIPELINE_LOCK, {"pipeline": ctx.spec.name})
        if store.run_state(conn, stage.run_id) == RunState.COMMITTED:
            return
    checked = verify_shadow(ctx.engine, ctx.spec, stage.run_id)
    log.info("rebuild run_id=%s pipeline=%s shadow verified: %s", stage.run_id, ctx.spec.name, checked)


def _swap(ctx: RunContext, stage: Swap) -> CommitResult:
    if stage.empty:
        _staged_empty(ctx, stage.run_id)
    return swap_in(ctx.engine, ctx.spec, stage.run_id)


def _diff(ctx: RunContext, stage: Diff) -> None:
    """A plan: counted in a transaction rolled back, stored in reprocess.plans."""
    if stage.empty:
        _staged_empty(ctx, stage.run_id)
    diff_run(ctx.engine, ctx.spec, stage)


def _window(ctx: RunContext, stage: SnapshotWindow | ReadWindow | Verdicts) -> None:
    """A window check's stage: reprocess.runner.window."""
    evaluate_window(ctx.engine, ctx.spec, ctx.window, stage)


_RUN: Final[dict[type, Callable[[RunContext, Any], CommitResult | None]]] = {
    Migrate: _migrate,
    PrepareShadow: _prepare_shadow,
    CutBatches: _cut_batches,
    Read: _not_here,
    Merge: _merge,
    FinishBatches: _finish_batches,
    Verify: _verify,
    Swap: _swap,
    Diff: _diff,
    SnapshotWindow: _window,
    ReadWindow: _window,
    Verdicts: _window,
}
