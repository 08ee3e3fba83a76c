"""A run's Spark work without Kafka or Postgres, to record the JVM classes a run loads.

``python -m reprocess.spark.conf <spec>`` runs this once with ``-XX:ArchiveClassesAtExit``; every
later run starts from that archive. Same path as a run's job past the read: Kafka-shaped records
(made in the driver: the read itself needs a broker), ``to_stage`` parses and dedupes them, and a
``mapInArrow`` function receives the result (and counts it instead of COPYing it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession

from reprocess.formats.specs import read_spec
from reprocess.postgres.stage_write import TaskWrite
from reprocess.spark.stage_task import TASK_WRITE_SCHEMA, task_write_batch
from reprocess.spark.transform import to_stage

# What spark.read.format("kafka") with includeHeaders returns.
KAFKA_SCHEMA: Final = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, "
    "timestampType int, headers array<struct<key:string,value:binary>>"
)


def records(spark: SparkSession) -> DataFrame:
    """Kafka-shaped records (the schema of Spark's Kafka source), valid orders and malformed values."""
    from reprocess.kafka.demo_data import MALFORMED, order_events

    rows = []
    for partition in range(4):
        values = [json.dumps(event).encode() for _, event in order_events(250, 4, seed=partition)]
        values += list(MALFORMED)
        ts = datetime(2026, 1, 1, tzinfo=UTC)
        rows += [(v[:8], v, "warmup", partition, i, ts, 0, None) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, KAFKA_SCHEMA)


def count_rows(batches: Iterator[Any]) -> Iterator[Any]:
    yield task_write_batch(TaskWrite(0, 0, sum(b.num_rows for b in batches), 0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, type=Path, help="pipeline spec YAML whose columns the warm-up parses")
    spec = read_spec(parser.parse_args(argv).spec)
    spark = SparkSession.builder.appName("reprocess-warmup").getOrCreate()
    try:
        to_stage(records(spark), spec).mapInArrow(count_rows, TASK_WRITE_SCHEMA).collect()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
