"""The start of a run: its snapshot and plan (``operations.plan.plan_run``), the stages built
from them (:func:`reprocess.core.stages.build_stages`), and the ones the planning task runs itself
(a rebuild's shadow; an empty plan's commit or swap)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine

from reprocess.core.runs import RunPlan, RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.core.stages import Stage, build_stages, launched_before_spark
from reprocess.operations.plan import plan_run
from reprocess.postgres import store
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
) -> tuple[RunPlan, tuple[Stage, ...]]:
    """Plan the run and evaluate the stages before its Spark task; returns the plan and every
    stage of the run (a dry run has none)."""
    plan = plan_run(engine, kafka, spec, request, run_id, dag_id=dag_id, dag_run_id=dag_run_id, params=params)
    # A run planned before (a cleared DAG run) keeps the batches it was cut into, whatever batch_size says now.
    with engine.begin() as conn:
        cut, committed = store.batch_cut(conn, run_id)
    batch_size = request.batch_size or spec.batch_size
    stages = build_stages(
        plan, request.mode, batch_size, dry_run=request.dry_run, preview=request.preview, cut=cut, committed=committed
    )
    evaluate(launched_before_spark(stages), RunContext(engine, spec))
    return plan, stages


def stored_stages(engine: Engine, spec: PipelineSpec, run_id: str, batch_size: int | None) -> tuple[Stage, ...]:
    """The stages of a planned run still to do, from what Postgres holds: its plan, its mode and
    the batches an earlier attempt cut and committed (a resumed run goes on after them)."""
    with engine.begin() as conn:
        plan = store.load_plan(conn, run_id)
        mode = store.run_mode(conn, run_id)
        cut, committed = store.batch_cut(conn, run_id)
        preview = store.is_preview(conn, run_id)
    return build_stages(plan, mode, batch_size or spec.batch_size, preview=preview, cut=cut, committed=committed)
