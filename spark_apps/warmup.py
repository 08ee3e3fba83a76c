"""A run's Spark work without Kafka or Postgres, to record the JVM classes a run loads.

``python -m reprocess.spark.conf <spec>`` runs this once with ``-XX:ArchiveClassesAtExit``; every
later run starts from that archive. Same path as ``read_stage.py``: a Python data source
yields Arrow batches of Kafka-shaped records, ``to_stage`` parses and dedupes them, and a
``mapInArrow`` function receives the result (and counts it instead of COPYing it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from reprocess.core.ranges import OffsetRange
from reprocess.core.spec import PipelineSpec
from reprocess.kafka.reader import SCHEMA, arrow_batch
from reprocess.postgres.stage import COPIED_SCHEMA
from reprocess.spark.job import register_sources
from reprocess.spark.transform import to_stage


class WarmupReader(DataSourceReader):
    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p) for p in range(4)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from reprocess.kafka.demo_data import MALFORMED, order_events

        values = [json.dumps(event).encode() for _, event in order_events(250, 4, seed=partition.value)]
        values += list(MALFORMED)
        cols: dict[str, list[Any]] = {
            "key": [v[:8] for v in values],
            "value": values,
            "offset": list(range(len(values))),
            "timestamp": [1_790_000_000_000_000 + i for i in range(len(values))],
            "timestampType": [0] * len(values),
        }
        yield arrow_batch(OffsetRange("warmup", partition.value, 0, len(values)), cols)


def count_rows(batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa

    yield pa.RecordBatch.from_pydict({"rows": [sum(b.num_rows for b in batches)]})


class WarmupSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "reprocess-warmup"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return WarmupReader()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, type=Path, help="pipeline spec YAML whose columns the warm-up parses")
    spec = PipelineSpec.from_file(parser.parse_args(argv).spec)
    spark = SparkSession.builder.appName("reprocess-warmup").getOrCreate()
    try:
        register_sources(spark)
        spark.dataSource.register(WarmupSource)
        records = spark.read.format("reprocess-warmup").load()
        to_stage(records, spec).mapInArrow(count_rows, COPIED_SCHEMA).collect()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
