"""The Spark side of a run: bounded read → parse/validate/dedupe → COPY into a stage. It reads
and stages; it never commits (the evaluator does, ``reprocess.runner.evaluate``).

Runs where the Spark session's client is: the Airflow task over Spark Connect, or the
spark-submit driver (``spark_apps/run_job.py``); ``reprocess.runner.spark_run.read_job`` is a
run's entry both launchers call, ``reprocess.runner.window_job.window_job`` a reconciliation's (which
stages through :class:`WindowStager`). One Spark action: the write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import psycopg2
from psycopg2 import sql

from reprocess.core.checksums import Checksum, coarsen, range_digits
from reprocess.core.errors import ConnectionConfigError, SchemaChangeError, StageLostError
from reprocess.core.ranges import OffsetRange
from reprocess.core.spec import PipelineSpec
from reprocess.core.stage_rows import stage_columns
from reprocess.core.stages import Read
from reprocess.core.window_stages import ReadWindow
from reprocess.formats import decoder, record_parts
from reprocess.formats.contract import WriterSchemas
from reprocess.formats.specs import read_spec
from reprocess.kafka import registry
from reprocess.postgres.db import libpq_url, one_row
from reprocess.postgres.stage import (
    STAGE_SCHEMA,
    create_stage,
    drop_stage,
    live_attempt,
    stage_counts_sql,
    stage_identifier,
)
from reprocess.postgres.stage_write import TaskWrite, written_tasks
from reprocess.spark.progress import RunProgress
from reprocess.spark.read import data_loss, read_ranges
from reprocess.spark.stage_task import TASK_WRITE_SCHEMA, StageTask, TaskFault
from reprocess.spark.transform import checked_stage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


def spec_as_built(path: str, fingerprint: str) -> PipelineSpec:
    """The spec a job runs under, from its file, refused unless it is still the spec the DAG was
    built from (the task passes that spec's fingerprint): a Spark job never runs under a spec
    that changed between the planning and the read, nothing is read then.

    Raises
    ------
    SchemaChangeError
        The file holds another spec now.
    """
    spec = read_spec(Path(path))
    if spec.fingerprint != fingerprint:
        raise SchemaChangeError(
            f"{spec.name}: {path} changed since the DAG was built from it (fingerprint {spec.fingerprint[:12]}, "
            f"the DAG's {fingerprint[:12]}); nothing was read. Trigger the run again once the DAG shows the new spec."
        )
    return spec


def writer_schemas(spec: PipelineSpec, ranges: Sequence[OffsetRange], registry_config: str | None) -> WriterSchemas:
    """The Avro writer schemas a run decodes with, fetched ONCE here on the driver (none for JSON,
    or when the run reads nothing). Raises the registry's retryable error when it cannot answer."""
    if not spec.needs_registry or not any(r.width > 0 for r in ranges):
        return {}
    if not registry_config:
        raise ConnectionConfigError(
            f"{spec.name}: its records are Avro, whose writer schemas come from the Schema Registry of connection "
            f"{spec.schema_registry!r}; the job got no registry_config. Define that connection",
            pipeline=spec.name,
        )
    return spec_writer_schemas(spec, registry.client_config(registry_config))


def spec_writer_schemas(spec: PipelineSpec, client: Mapping[str, Any]) -> WriterSchemas:
    """Every writer schema of the subjects the spec's decoder names
    (:meth:`~reprocess.formats.decoder.Decoder.subjects`) from the registry at ``client`` (a
    ``SchemaRegistryClient`` config): a run's, and ``reprocess validate``'s sample, which must decode
    as the run would."""
    return registry.writer_schemas(client, decoder(spec).subjects(spec))


class SparkReader:
    """Reads a run's :class:`~reprocess.core.stages.Read` stages (the evaluator's reader,
    ``reprocess.runner.evaluate``) with the run's live progress; never commits."""

    def __init__(
        self,
        spark: SparkSession,
        spec: PipelineSpec,
        db_url: str,
        kafka: Mapping[str, Any],
        schemas: WriterSchemas,
        progress: RunProgress,
    ) -> None:
        self.spark, self.spec, self.db_url, self.kafka, self.schemas = spark, spec, db_url, kafka, schemas
        self.progress = progress

    def read(self, stage: Read) -> int:
        with self.progress.action(stage.offsets):
            rows = stage_ranges(self.spark, self.spec, stage.stage_id, stage.ranges, self.db_url, self.kafka,
                                self.schemas)  # fmt: skip
        if stage.batch is None:  # a batch's exact count comes with its commit
            self.progress.finished(_records_staged(self.spec, stage.stage_id, self.db_url), stage.offsets)
        return rows

    def committed(self, stage: Read, records: int) -> None:
        self.progress.finished(records, stage.offsets)


def _records_staged(spec: PipelineSpec, stage_id: str, db_url: str) -> int:
    """The records a stage was built from (the commit's own count of records read)."""
    with psycopg2.connect(libpq_url(db_url)) as pg, pg.cursor() as cur:
        cur.execute(stage_counts_sql(stage_identifier(spec, stage_id)))
        records = int(one_row(cur)[0])
    pg.close()
    return records


class WindowStager:
    """Stages a window check's :class:`~reprocess.core.window_stages.ReadWindow` (the evaluator's window reader,
    ``reprocess.runner.window``) with :func:`stage_window`."""

    def __init__(
        self, spark: SparkSession, db_url: str, kafka: Mapping[str, Any], registry_config: str | None = None
    ) -> None:
        self.spark, self.db_url, self.kafka, self.registry_config = spark, db_url, kafka, registry_config

    def read_window(self, spec: PipelineSpec, stage: ReadWindow) -> int:
        return stage_window(self.spark, spec, stage.check_id, stage.ranges, self.db_url, self.kafka,
                            self.registry_config, bisect=stage.bisect)  # fmt: skip


def stage_window(
    spark: SparkSession,
    spec: PipelineSpec,
    check_id: str,
    ranges: Sequence[OffsetRange],
    db_url: str,
    kafka: Mapping[str, Any],
    registry_config: str | None = None,
    *,
    bisect: bool = False,
) -> int:
    """Reconciliation's heavy part: the newest valid record per key of a window's ``ranges`` (by
    the pipeline's Ordering, with the backfill's own parse rules) and every dead letter, staged
    under ``check_id`` for the anti-join in Postgres (:func:`reprocess.operations.reconcile.record_verdicts`).

    With ``bisect`` (the whole-table audit), the target's checksums per key range are taken first and
    only the rows of the ranges whose checksums differ are staged (:mod:`reprocess.spark.checksums`).
    """
    with live_attempt(libpq_url(db_url), check_id):  # the next check's cleanup never drops ours
        schemas = writer_schemas(spec, ranges, registry_config)
        select = _differing_ranges(spec, db_url) if bisect else None
        return stage_ranges(spark, spec, check_id, ranges, db_url, kafka, schemas, check=True, select=select)


def _differing_ranges(spec: PipelineSpec, db_url: str) -> Callable[[DataFrame, list[DataFrame]], DataFrame]:
    """The target's checksums per key range (one PostgreSQL scan, cut by the table's size), and the
    selection of the stage rows whose ranges differ from them."""
    from reprocess.postgres.checksum_sql import target_checksums_sql
    from reprocess.spark.checksums import differing_rows

    with psycopg2.connect(libpq_url(db_url)) as pg, pg.cursor() as cur:
        cur.execute(target_checksums_sql(spec))
        finest = {int(r): Checksum(int(n), int(h), int(lo)) for r, n, h, lo in cur.fetchall()}
    pg.close()
    digits = range_digits(sum(c.rows for c in finest.values()))
    target = coarsen(finest, digits)
    log.info("audit checksums pipeline=%s target_rows=%d range_digits=%d ranges_with_rows=%d", spec.name,
             sum(c.rows for c in finest.values()), digits, len(target))  # fmt: skip
    return lambda stage, kept: differing_rows(stage, spec, digits, target, kept)


WARM_UP_STAGE: Final = "warm-up"


def warm_up(
    spark: SparkSession,
    spec: PipelineSpec,
    ranges: Sequence[OffsetRange],
    db_url: str,
    kafka: Mapping[str, Any],
    stage_id: str = WARM_UP_STAGE,
) -> int:
    """Stage ``ranges`` the way a run does, into a stage (``stage_id``) dropped afterwards; returns its rows.

    A Spark Connect server's first run pays for the JIT compiling Kafka's fetch path, the parse
    and the aggregation, Janino compiling the generated code, and the Python workers starting and
    importing the copier (several times a warm run: docs/performance.md). The server's start pays
    them once instead, in the session the runs share (Python workers belong to a session).
    """
    try:
        return stage_ranges(spark, spec, stage_id, ranges, db_url, kafka, writer_schemas(spec, ranges, None))
    finally:
        with psycopg2.connect(libpq_url(db_url)) as pg:
            drop_stage(pg, spec, stage_id)
        pg.close()


def stage_ranges(
    spark: SparkSession,
    spec: PipelineSpec,
    stage_id: str,
    ranges: Sequence[OffsetRange],
    db_url: str,
    kafka: Mapping[str, Any],
    schemas: WriterSchemas,
    *,
    check: bool = False,
    select: Callable[[DataFrame, list[DataFrame]], DataFrame] | None = None,
) -> int:
    """One Spark action: read the ranges, parse, dedupe, COPY into the fresh stage of ``stage_id``
    (a run, a batch or, with ``check``, a reconciliation check); ``select`` picks the stage rows
    written (the audit's differing ranges) and lists what it persisted, released after the action.

    Returns the rows the stage holds afterwards, which the commit checks against.
    """
    with psycopg2.connect(libpq_url(db_url)) as pg:
        oid = create_stage(pg, spec, stage_id, check=check)  # a retried attempt starts from an empty stage
    pg.close()
    ranges = [r for r in ranges if r.width > 0]
    if not ranges:
        return 0
    records = read_ranges(spark, kafka, ranges, headers=record_parts.reads_headers(spec))
    table = f"{STAGE_SCHEMA}.{spec.stage_table(stage_id)}"
    writer = StageTask(table, oid, tuple(stage_columns(spec)), libpq_url(db_url), TaskFault.from_env())
    kept: list[DataFrame] = []
    try:
        stage = checked_stage(records, spec, schemas)
        stage = stage if select is None else select(stage, kept)
        written = [TaskWrite(**row.asDict()) for row in stage.mapInArrow(writer, TASK_WRITE_SCHEMA).collect()]
    except Exception as exc:
        lost = data_loss(exc, kafka, ranges)
        if lost is None:
            raise
        raise lost from exc
    finally:
        for df in kept:
            df.unpersist()
    rows = _check_stage(spec, stage_id, db_url, written)
    log.info("stage run_id=%s pipeline=%s rows=%d tasks=%d", stage_id, spec.name, rows, len(written))
    return rows


def _check_stage(spec: PipelineSpec, stage_id: str, db_url: str, written: Sequence[TaskWrite]) -> int:
    """The stage's row count, once it is exactly what the tasks Spark finished report, task by task.

    Spark keeps one finished attempt per task; a retry or a speculative copy reports the rows an
    earlier attempt committed (``written_by``), so each task counts once whatever ran twice. A
    mismatch means the stage lost rows under the job (a PostgreSQL crash-restart empties UNLOGGED
    tables) or someone else wrote into it.
    """
    with psycopg2.connect(libpq_url(db_url)) as pg, pg.cursor() as cur:
        cur.execute(sql.SQL("SELECT count(*) FROM {}").format(stage_identifier(spec, stage_id)))
        rows = int(one_row(cur)[0])
        recorded = written_tasks(cur, spec.stage_table(stage_id))
    pg.close()
    reported = {w.task: (w.written_by, w.rows) for w in written}
    if recorded != reported or rows != sum(r for _, r in recorded.values()):
        raise StageLostError(
            f"{spec.name}: run {stage_id}'s stage holds {rows} rows written by tasks {sorted(recorded.items())} "
            f"(task: (attempt, rows)), but the Spark tasks reported {sorted(reported.items())}; the stage changed "
            "under the job (a PostgreSQL restart empties unlogged stages). Re-run the stage (it starts from an "
            "empty table)",
            pipeline=spec.name,
            run_id=stage_id,
        )
    for w in written:
        if w.attempt > 0:  # Spark ran this task again: say which attempt's rows the stage kept
            log.info(
                "stage run_id=%s pipeline=%s task=%d attempt=%d rows=%d written_by_attempt=%d",
                stage_id, spec.name, w.task, w.attempt, w.rows, w.written_by,
            )  # fmt: skip
    return rows
