"""The Spark side of a run: bounded read → parse/validate/dedupe → COPY into the run's stage.

Runs on the Spark driver (``spark_apps/read_stage.py``). One Spark action: the write.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import psycopg2

from reprocess import queries
from reprocess.db import libpq_url, make_engine
from reprocess.plan import load_plan
from reprocess.reader import KafkaRangeDataSource, reader_options
from reprocess.runs import RunState
from reprocess.spec import PipelineSpec
from reprocess.stage import STAGE_SCHEMA, PgStageDataSource, create_stage
from reprocess.transform import stage_columns, to_stage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DB_URL_ENV: Final = "REPROCESS_DB_URL"


def register_sources(spark: SparkSession) -> None:
    spark.dataSource.register(KafkaRangeDataSource)
    spark.dataSource.register(PgStageDataSource)


def read_and_stage(
    spark: SparkSession,
    spec: PipelineSpec,
    run_id: str,
    db_url: str,
    kafka: Mapping[str, Any],
    max_records_per_partition: int | None = None,
) -> bool:
    """Stage a planned run; returns False when there was nothing to do (already committed)."""
    engine = make_engine(db_url)
    with engine.begin() as conn:
        state = conn.execute(queries.RUN_STATE, {"run_id": run_id}).scalar()
        if state is None:
            raise RuntimeError(f"{spec.name}: run {run_id} has no plan; run plan_offsets first")
        if state == RunState.COMMITTED:
            log.info("stage run_id=%s pipeline=%s already committed: nothing to do", run_id, spec.name)
            return False
        plan = load_plan(conn, run_id)
    started = time.monotonic()
    with psycopg2.connect(libpq_url(db_url)) as pg:
        create_stage(pg, spec, run_id)  # a retried attempt starts from an empty stage
    pg.close()
    ranges = [r for r in plan.ranges if r.width > 0]
    if ranges:
        records = (
            spark.read.format("kafka-range").options(**reader_options(kafka, ranges, max_records_per_partition)).load()
        )
        (
            to_stage(records, spec)
            .write.format("pg-stage")
            .mode("append")
            .option("table", f"{STAGE_SCHEMA}.{spec.stage_table(run_id)}")
            .option("columns", ",".join(stage_columns(spec)))
            .option("dsnEnv", DB_URL_ENV)
            .save()
        )
    with engine.begin() as conn:
        conn.execute(queries.MARK_STAGED, {"run_id": run_id})
    log.info(
        "stage run_id=%s pipeline=%s ranges=%d seconds=%.1f", run_id, spec.name, len(ranges), time.monotonic() - started
    )
    engine.dispose()
    return True
