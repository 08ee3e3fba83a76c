"""Decode a sample of records by the Spark job's own rules (``reprocess validate``, the dry run).

The records are fetched on the client (a few hundred at most) and handed to Spark as a small
DataFrame with the columns of Spark's Kafka source; :func:`reprocess.spark.transform.decode`, the
function the stage uses, decodes them. So a sample's verdicts are the run's verdicts, whichever
source (the project's reader or ``format("kafka")``) a run reads with.
"""

from __future__ import annotations

import json
import os
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
SPARK_CONN_ENV: Final = "AIRFLOW_CONN_SPARK_DEFAULT"


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
def session_from_env() -> Iterator[SparkSession]:
    """A Spark session as the DAGs' ``spark_default`` connection (its environment form) names it:
    the Connect server's shared session, or a local one for a ``spark`` connection. A Connect
    server holding another version of the library is refused, as a DAG's Spark task refuses it."""
    from reprocess.spark.connect import DEFAULT_PORT, check_library, client_env, shared_session

    conn = json.loads(os.environ.get(SPARK_CONN_ENV) or '{"conn_type": "spark", "host": "local[1]"}')
    if conn.get("conn_type") == "spark_connect":
        url = f"sc://{conn['host']}:{conn.get('port', DEFAULT_PORT)}"
        with client_env(), shared_session(url) as spark:
            check_library(spark, url)
            yield spark
        return
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[1]").appName("reprocess-validate").getOrCreate()
    try:
        yield spark
    finally:
        spark.stop()
