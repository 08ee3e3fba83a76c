"""A run's Spark work without Kafka or Postgres, to record the JVM classes a run loads.

``python -m reprocess.sparkconf`` runs this once with ``-XX:ArchiveClassesAtExit``; every
later run starts from that archive. Same path as ``read_stage.py``: a Python data source
yields Arrow batches of Kafka-shaped records, ``to_stage`` parses and dedupes them, and a
Python Arrow writer receives the result (and drops it).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)

from reprocess.job import register_sources
from reprocess.ranges import OffsetRange
from reprocess.reader import SCHEMA, arrow_batch
from reprocess.spec import PipelineSpec
from reprocess.transform import to_stage

ORDERS_SPEC = Path(__file__).resolve().parents[1] / "pipelines" / "orders.yaml"


class WarmupReader(DataSourceReader):
    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p) for p in range(4)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from reprocess.demo_data import MALFORMED, order_events

        values = [json.dumps(event).encode() for _, event in order_events(250, 4, seed=partition.value)]
        values += list(MALFORMED)
        cols = {
            "key": [v[:8] for v in values],
            "value": values,
            "offset": list(range(len(values))),
            "timestamp": [1_790_000_000_000_000 + i for i in range(len(values))],
            "timestampType": [0] * len(values),
        }
        yield arrow_batch(OffsetRange("warmup", partition.value, 0, len(values)), cols)


class DiscardWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()


class WarmupSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "reprocess-warmup"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return WarmupReader()

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return DiscardWriter()


def main() -> int:
    spark = SparkSession.builder.appName("reprocess-warmup").getOrCreate()
    try:
        register_sources(spark)
        spark.dataSource.register(WarmupSource)
        records = spark.read.format("reprocess-warmup").load()
        to_stage(records, PipelineSpec.from_file(ORDERS_SPEC)).write.format("reprocess-warmup").mode("append").save()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
