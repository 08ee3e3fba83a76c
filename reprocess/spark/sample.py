"""Decode a sample of records by the Spark job's own rules (``reprocess validate``, the dry run).

The records are fetched on the client (a few hundred at most) and handed to Spark as a small
DataFrame with the columns of Spark's Kafka source; :func:`reprocess.spark.transform.record_rows`,
the function the stage uses, decodes them and runs the spec's ``transform:`` on them. So a
sample's verdicts are the run's verdicts, whichever source (the project's reader or
``format("kafka")``) a run reads with.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from reprocess.core.errors import ConnectionConfigError, SpecError
from reprocess.core.sample import SampleRecord, SampleResult
from reprocess.core.spec import PipelineSpec
from reprocess.core.stage_rows import ROW
from reprocess.spark import user_transform
from reprocess.spark.transform import record_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

# The columns of Spark's Kafka source that the decoders read.
RECORD_SCHEMA: Final = (
    "key binary, value binary, headers array<struct<key:string,value:binary>>, topic string, partition int, "
    "offset bigint, timestamp timestamp"
)


def decode_sample(
    spark: SparkSession,
    spec: PipelineSpec,
    records: Sequence[SampleRecord],
    registry: Mapping[str, Any] | None = None,
) -> SampleResult:
    """Each record's ``_error`` and, for rows, which columns got values: decoded, then given to the
    spec's ``transform:`` function as a run's are (:func:`reprocess.spark.transform.record_rows`), unless
    the function cannot be imported here or fails (the result says why). An Avro pipeline's writer schemas come
    from ``registry`` (its ``SchemaRegistryClient`` config)."""
    from reprocess.spark.job import spec_writer_schemas

    if spec.needs_registry and registry is None:
        raise ConnectionConfigError(
            f"{spec.name}: its records are Avro; decoding a sample needs the Schema Registry of connection "
            f"{spec.schema_registry!r}. Define that connection",
            pipeline=spec.name,
        )
    schemas = spec_writer_schemas(spec, registry) if spec.needs_registry and registry is not None else {}
    rows = [
        (
            r.key,
            r.value,
            [(k, v) for k, v in r.headers],
            r.topic,
            r.partition,
            r.offset,
            datetime.fromtimestamp(r.timestamp_ms / 1000, UTC),
        )
        for r in records
    ]
    frame = spark.createDataFrame(rows, RECORD_SCHEMA)
    # Flags named by position: a column may be called `offset` or `kind`.
    watched = {f"_null_{i}": c.name for i, c in enumerate(spec.columns)}
    unrun, failed = _unloadable_transform(spec), False
    try:
        verdicts = _verdicts(frame, replace(spec, transform=None) if unrun else spec, schemas, watched)
    except Exception as exc:
        if spec.transform is None or unrun:
            raise
        # Judged again without the function: if that works, the function is what fails (a run would too).
        verdicts = _verdicts(frame, replace(spec, transform=None), schemas, watched)
        unrun, failed = str(exc).strip().splitlines()[0].removeprefix(f"{spec.source_file}: "), True
    errors: dict[str, tuple[int, int, str]] = {}
    missing: Counter[str] = Counter()
    good = 0
    for row in verdicts:
        if row["_error"] is not None:
            count, offset, example = errors.get(row["kind"], (0, row["offset"], row["_error"]))
            errors[row["kind"]] = (count + 1, offset, example)
        elif row["row"]:
            good += 1
            missing.update(name for flag, name in watched.items() if row[flag])
    return SampleResult(len(rows), errors, dict(missing), good, unrun, failed)


def _verdicts(frame: DataFrame, spec: PipelineSpec, schemas: Any, watched: Mapping[str, str]) -> list[Row]:
    """Each record's error, its error kind, whether it is a row, and which ``watched`` columns it
    leaves NULL, in the log's order."""
    from pyspark.sql import functions as F

    flags = [F.col(name).isNull().alias(flag) for flag, name in watched.items()]
    return (
        record_rows(frame, spec, schemas)
        .select(
            F.col("_kafka_offset").alias("offset"),
            "_error",
            # The dead-letter table's error_kind (sql/005_coverage.sql), in Spark SQL.
            F.split_part(F.col("_error"), F.lit(":"), F.lit(1)).alias("kind"),
            (F.col("_kind") == ROW).alias("row"),
            *flags,
        )
        .orderBy("_kafka_topic", "_kafka_partition", "_kafka_offset")
        .collect()
    )


def _unloadable_transform(spec: PipelineSpec) -> str | None:
    """Why the spec's function cannot be run here (its module is installed where the Spark client of
    a run is, not necessarily where ``reprocess validate`` runs), or None."""
    if spec.transform is None:
        return None
    try:
        user_transform.load(spec)
    except SpecError as exc:
        return str(exc).removeprefix(f"{spec.source_file}: ")
    return None


@contextmanager
def validation_session(connect_url: str | None) -> Iterator[SparkSession]:
    """A session to decode a sample on: the Connect server's shared session (refused, as a DAG's
    Spark task refuses it, when it holds another version of the library), or with no Connect URL
    (a spark-submit ``spark_default``) a local one in this process."""
    if connect_url is not None:
        from reprocess.spark.connect import checked_session

        with checked_session(connect_url) as spark:
            yield spark
        return
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[1]").appName("reprocess-validate").getOrCreate()
    try:
        yield spark
    finally:
        spark.stop()
