"""The start of a run: its ranges snapshotted (``operations.snapshot.snapshot_run``), the stages built from
them (:func:`reprocess.core.stages.build_stages`), and the ones the planning task runs itself (its
migration or a rebuild's shadow; an empty range's commit or swap). :func:`stored_stages` builds
the same list again from what PostgreSQL holds, for the later tasks and for a resumed run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sqlalchemy import Engine

from reprocess.core.errors import RunStateError
from reprocess.core.names import parent_run_id
from reprocess.core.runs import RunRanges, RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.core.stages import Diff, FinishBatches, Merge, Migrate, Stage, Swap, Verify, build_stages, for_task
from reprocess.core.tasks import Task
from reprocess.operations.snapshot import snapshot_run
from reprocess.postgres import store
from reprocess.postgres.commit import CommitResult
from reprocess.runner.evaluate import RunContext, evaluate


def start_run(
    engine: Engine,
    kafka: Mapping[str, Any],
    spec: PipelineSpec,
    request: RunRequest,
    run_id: str,
    *,
    dag_id: str | None = None,
    dag_run_id: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> tuple[RunRanges, tuple[Stage, ...]]:
    """Snapshot the run's ranges and evaluate its planning task's stages; returns the ranges and every stage of
    the run (a dry run has none)."""
    run = snapshot_run(engine, kafka, spec, request, run_id, dag_id=dag_id, dag_run_id=dag_run_id, params=params)
    # A run planned before (a cleared DAG run) keeps the batches it was cut into, whatever batch_size says now.
    with engine.begin() as conn:
        cut, committed = store.batch_cut(conn, run_id)
    batch_size = request.batch_size or spec.batch_size
    stages = build_stages(
        run, spec, request.mode, batch_size, dry_run=request.dry_run, preview=request.preview, cut=cut,
        committed=committed,
    )  # fmt: skip
    evaluate(for_task(stages, Task.PLAN), RunContext(engine, spec))
    return run, stages


def stored_stages(
    engine: Engine, spec: PipelineSpec, run_id: str, batch_size: int | None, *, left: bool = True
) -> tuple[Stage, ...]:
    """The stages of a planned run, from what Postgres holds: its ranges, its mode and the batches an
    earlier attempt cut; with ``left``, without those of the batches committed (a resumed run goes on
    after them)."""
    with engine.begin() as conn:
        run = store.load_ranges(conn, run_id)
        mode = store.run_mode(conn, run_id)
        cut, committed = store.batch_cut(conn, run_id)
        preview = store.is_preview(conn, run_id)
    done = committed if left else ()
    return build_stages(run, spec, mode, batch_size or spec.batch_size, preview=preview, cut=cut, committed=done)


def commit_stored(engine: Engine, spec: PipelineSpec, run_id: str) -> CommitResult:
    """Evaluate the commit of ``run_id`` (a run, or one batch of it) as its stored stages say: a
    batch's Merge; a run's Merge, FinishBatches or Verify → Swap. For callers that stage by hand
    (the tests, the benchmarks) and want the run's own commit, whatever kind of run it is."""
    parent = parent_run_id(run_id)
    stages = stored_stages(engine, spec, parent, None, left=False)
    commits = tuple(s for s in stages if s.run_id == run_id and isinstance(s, Merge | FinishBatches | Verify | Swap))
    merges = [s for s in stages if isinstance(s, Merge)]
    if not commits and run_id != parent and merges:  # a batch the cut does not hold: merged where its run's are
        with engine.begin() as conn:
            ranges = store.load_ranges(conn, run_id).ranges
        rederives = ranges if merges[0].rederives else ()
        commits = (replace(merges[0], run_id=run_id, rederives=rederives, empty=False),)
    result = evaluate(commits, RunContext(engine, spec))
    if result is None:
        kinds = [s for s in stages if isinstance(s, Diff)]
        raise RunStateError(
            f"{spec.name}: run {run_id} has no commit ({'a plan: it diffs' if kinds else 'no such stage'})",
            pipeline=spec.name,
            run_id=run_id,
        )
    return result


def snapshot_and_migrate(
    engine: Engine, kafka: Mapping[str, Any], spec: PipelineSpec, request: RunRequest, run_id: str, **planned: Any
) -> RunRanges:
    """The run's ranges snapshotted and its ``Migrate`` stage evaluated (a merge's: a dry run, a
    preview and a rebuild migrate nothing), nothing else: for callers that read and commit the run
    themselves (the tests, the benchmarks). ``planned``: :func:`snapshot_run`'s keywords."""
    run = snapshot_run(engine, kafka, spec, request, run_id, **planned)
    stages = build_stages(run, spec, request.mode, spec.batch_size, dry_run=request.dry_run, preview=request.preview)
    evaluate(tuple(s for s in stages if isinstance(s, Migrate)), RunContext(engine, spec))
    return run
