"""Decode a sample of records by the Spark job's own rules (``reprocess validate``, the dry run).

The records are fetched on the client (a few hundred at most) and handed to Spark as a small
DataFrame with the columns of Spark's Kafka source; :func:`reprocess.spark.transform.decode`, the
function the stage uses, decodes them. So a sample's verdicts are the run's verdicts, whichever
source (the project's reader or ``format("kafka")``) a run reads with.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from reprocess.core.errors import ConnectionConfigError
from reprocess.core.sample import SampleRecord, SampleResult
from reprocess.core.spec import PipelineSpec
from reprocess.formats.contract import DELETES, typed_name
from reprocess.spark.transform import decode

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
    """Each record's ``_error`` and, for rows, which columns got values.
    An Avro pipeline's writer schemas come from ``registry`` (its ``SchemaRegistryClient`` config)."""
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
    # Flags named by position: a column may be called `offset` or `kind`.
    watched = {f"_null_{i}": c.name for i, c in enumerate(spec.columns)}
    flags = [f"{typed_name(i)} IS NULL AS {flag}" for i, flag in enumerate(watched)]
    decoded = decode(spark.createDataFrame(rows, RECORD_SCHEMA), spec, schemas).selectExpr(
        # The dead-letter table's error_kind (sql/005_coverage.sql), in Spark SQL.
        "offset",
        "_error",
        "split_part(_error, ':', 1) AS kind",
        f"{DELETES} AS tombstone",
        *flags,
    )
    errors: dict[str, tuple[int, int, str]] = {}
    missing: Counter[str] = Counter()
    good = 0
    for row in decoded.orderBy("topic", "partition", "offset").collect():
        if row["_error"] is not None:
            count, offset, example = errors.get(row["kind"], (0, row["offset"], row["_error"]))
            errors[row["kind"]] = (count + 1, offset, example)
        elif not row["tombstone"]:
            good += 1
            missing.update(name for flag, name in watched.items() if row[flag])
    return SampleResult(len(rows), errors, dict(missing), good)


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
