"""A run's Spark task: the stages naming it (:class:`reprocess.core.tasks.Task`: its reads, and
a batched run's batches' merges), evaluated where the Spark session is: the Airflow task over Spark Connect,
or the spark-submit driver (``spark_apps/run_job.py``). :func:`read_job` is the entry both
launchers call (``reprocess.airflow.spark_task``).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from reprocess.core.errors import RunStateError
from reprocess.core.runs import RunState
from reprocess.core.spec import PipelineSpec
from reprocess.core.stages import for_task
from reprocess.core.tasks import Task
from reprocess.formats import decoder
from reprocess.formats.specs import read_spec
from reprocess.operations.preview import check_readings
from reprocess.postgres import store
from reprocess.postgres.db import libpq_url, make_engine
from reprocess.postgres.stage import live_attempt
from reprocess.runner.evaluate import RunContext, evaluate
from reprocess.runner.start import stored_stages
from reprocess.spark.job import SparkReader, spec_as_built, writer_schemas
from reprocess.spark.progress import RunProgress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def read_job(
    spark: SparkSession,
    *,
    spec: str,
    run_id: str,
    db_url: str,
    kafka_config: str,
    batch_size: str | None = None,
    registry_config: str | None = None,
    fingerprint: str | None = None,
) -> bool:
    """The Spark task of a run, as the task launches it: string arguments from the task (the spec
    file and, from a DAG, the fingerprint of the spec it was built from), ``db_url``, ``kafka_config``
    (librdkafka JSON) and, for Avro, ``registry_config`` (:func:`reprocess.kafka.registry.client_config`)
    from its connections. Returns False when there was nothing to do (already committed).

    Raises
    ------
    SchemaChangeError
        The spec file is not the spec the DAG was built from (:func:`~reprocess.spark.job.spec_as_built`),
        or not the one the run was planned under: nothing is read.
    """
    spec_ = spec_as_built(spec, fingerprint) if fingerprint else read_spec(Path(spec))
    size = int(batch_size) if batch_size else None
    with live_attempt(libpq_url(db_url), run_id):  # snapshot_run's stage cleanup never drops ours
        return read_run(spark, spec_, run_id, db_url, json.loads(kafka_config), size, registry_config)


def read_run(
    spark: SparkSession,
    spec: PipelineSpec,
    run_id: str,
    db_url: str,
    kafka: dict[str, object],
    batch_size: int | None,
    registry_config: str | None,
) -> bool:
    """Evaluate the run's Spark stages (see the module); a re-run resumes after its last committed batch."""
    engine = make_engine(db_url)
    with engine.begin() as conn:
        state = store.run_state(conn, run_id)
        if state is None:
            raise RunStateError(
                f"{spec.name}: run {run_id} has no plan; run plan_offsets first", pipeline=spec.name, run_id=run_id
            )
        if state == RunState.COMMITTED:
            log.info("stage run_id=%s pipeline=%s already committed: nothing to do", run_id, spec.name)
            return False
        run = store.load_ranges(conn, run_id)
    stages = for_task(stored_stages(engine, spec, run_id, batch_size), Task.SPARK)
    started = time.monotonic()
    progress = RunProgress(spark, engine, spec.name, run_id, sum(r.width for r in run.ranges))
    schemas = writer_schemas(spec, run.ranges, registry_config)
    readings = decoder(spec).readings(spec, schemas) if schemas else None
    if readings is not None:  # how the run reads each writer version: an apply's plan must agree
        with engine.begin() as conn:
            check_readings(conn, spec, run_id, readings)
    reader = SparkReader(spark, spec, db_url, kafka, schemas, progress)
    evaluate(stages, RunContext(engine, spec, reader=reader))
    progress.close()
    log.info(
        "stage run_id=%s pipeline=%s ranges=%d seconds=%.1f",
        run_id, spec.name, len(run.ranges), time.monotonic() - started,
    )  # fmt: skip
    engine.dispose()
    return True
