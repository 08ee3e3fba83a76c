"""A plan's apply, and a plan or apply run in this process (the ``reprocess plan``/``apply`` commands).

:func:`start_apply` is the start of the run that applies a stored plan: refused when the plan is
stale (:func:`reprocess.operations.preview.check_fresh`), else a backfill of exactly the plan's
ranges, planned as every run is. :func:`run_here` carries a started run's stages out with the
Spark session it is given, as a DAG's Spark and commit tasks do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from reprocess.core.runs import RunRanges
from reprocess.core.spec import PipelineSpec
from reprocess.core.stages import Stage, for_task
from reprocess.core.tasks import Task
from reprocess.operations.preview import apply_request, check_fresh, mark_applied
from reprocess.postgres.commit import CommitResult
from reprocess.runner.evaluate import RunContext, evaluate
from reprocess.runner.spark_run import read_run
from reprocess.runner.start import start_run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def start_apply(
    engine: Engine,
    kafka: Mapping[str, Any],
    spec: PipelineSpec,
    plan_id: str,
    run_id: str,
    **start: Any,
) -> tuple[RunRanges, tuple[Stage, ...]]:
    """Start the run ``run_id`` that applies plan ``plan_id`` (``start``: :func:`start_run`'s keywords).

    Raises
    ------
    StalePlanError
        The plan's spec, ledger or log start changed since it was made; nothing is started.
    """
    with engine.begin() as conn:
        plan = check_fresh(conn, kafka, spec, plan_id, run_id)
        mark_applied(conn, plan_id, run_id)
    return start_run(engine, kafka, spec, apply_request(plan), run_id, **start)


def run_here(
    engine: Engine,
    kafka: Mapping[str, Any],
    spec: PipelineSpec,
    run_id: str,
    stages: tuple[Stage, ...],
    spark: SparkSession,
    db_url: str,
    registry_config: str | None = None,
) -> CommitResult | None:
    """The stages after the start, here: the reads on ``spark``, then the commit or the diff."""
    if not for_task(stages, Task.SPARK):
        return None
    read_run(spark, spec, run_id, db_url, dict(kafka), None, registry_config)
    return evaluate(for_task(stages, Task.COMMIT), RunContext(engine, spec))
