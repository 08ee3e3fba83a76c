"""A window check carried out through the evaluator: whole in this process (:func:`check_window`, as tests
run it), or stage by stage from the reconcile DAG's tasks, :func:`window_job` being its Spark task's entry
(``reprocess.airflow.spark_task`` launches it over Spark Connect or spark-submit)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from reprocess.checks.verdict import PartitionVerdict
from reprocess.core.errors import ReprocessError
from reprocess.core.ranges import window_ranges
from reprocess.core.spec import PipelineSpec
from reprocess.core.window_stages import ReadWindow, SnapshotWindow, window_stages
from reprocess.postgres.db import make_engine
from reprocess.runner.evaluate import RunContext, evaluate
from reprocess.runner.window import WindowCheck, WindowReader
from reprocess.spark.job import WindowStager, spec_as_built

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def check_window(
    engine: Engine,
    kafka: Mapping[str, Any],
    spec: PipelineSpec,
    snapshot: SnapshotWindow,
    reader: WindowReader,
) -> list[PartitionVerdict]:
    """Snapshot, read and judge a window here; returns the verdicts (raises on a gap as the DAG's task does)."""
    check = WindowCheck(kafka=kafka, reader=reader)
    ctx = RunContext(engine, spec, window=check)
    evaluate((snapshot,), ctx)
    if check.ranges is None:
        raise ReprocessError(f"{spec.name}: the snapshot of check {snapshot.check_id} resolved no window")
    evaluate(window_stages(snapshot, check.ranges.ranges, check.ranges.unstable, check.ranges.unread), ctx)
    return check.verdicts or []


def window_job(
    spark: SparkSession,
    *,
    spec: str,
    fingerprint: str,
    check_id: str,
    starting: str,
    ending: str,
    db_url: str,
    kafka_config: str,
    registry_config: str | None = None,
    bisect: str = "",
) -> int:
    """The reconcile DAG's Spark task, as it launches it: the spec's file and fingerprint
    (:func:`~reprocess.spark.job.spec_as_built`), the window's ranges as Spark offset JSONs, ``db_url``,
    ``kafka_config`` and ``registry_config`` from the connections; ``bisect`` ``"true"``: the audit
    DAG's (only the key ranges whose checksums differ). Evaluates the check's
    :class:`~reprocess.core.window_stages.ReadWindow`; returns the stage's rows."""
    spec_ = spec_as_built(spec, fingerprint)
    stager = WindowStager(spark, db_url, json.loads(kafka_config), registry_config)
    check = WindowCheck(reader=stager)
    engine = make_engine(db_url)
    try:
        evaluate(
            (ReadWindow(check_id, tuple(window_ranges(starting, ending)), bisect=bisect == "true"),),
            RunContext(engine, spec_, window=check),
        )
    finally:
        engine.dispose()
    return check.staged or 0
