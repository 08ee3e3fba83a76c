"""Many small ranges (``reprocess.spark.grouped_read``: a few tasks, one confluent-kafka consumer
each for many partitions) return exactly the committed records of every ``[start, end)`` around
transaction markers and aborted records, and a start deleted after planning is the product's
data-loss error. The truth is the producers' delivery callbacks (tests/integration/test_reader_bounds.py).
Runs on the real broker and the real Connect server.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import functions as F

from reprocess.core.errors import DataLossError
from reprocess.core.ranges import OffsetRange
from reprocess.kafka.clients import make_producer
from reprocess.spark.grouped_read import MIN_RANGES, many_small
from reprocess.spark.read import data_loss, read_ranges
from tests.integration.test_reader_bounds import CASES, GappedTopic, Recorder, make_gapped
from tests.support.helpers import connect_session

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]

PLAIN = 5  # records on each partition but the gapped one


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with connect_session() as session:
        yield session


@pytest.fixture(scope="module")
def wide(kafka_config: dict[str, Any]) -> tuple[GappedTopic, dict[int, dict[int, bytes]]]:
    """MIN_RANGES partitions: partition 0 gapped (markers, aborted records), the others PLAIN records each."""
    gapped = make_gapped(kafka_config, f"grouped_read_{uuid.uuid4().hex[:8]}", MIN_RANGES)
    recorders = {p: Recorder() for p in range(1, MIN_RANGES)}
    producer = make_producer(kafka_config)
    for p, rec in recorders.items():
        for i in range(PLAIN):
            producer.produce(gapped.topic, f"p{p}-{i}".encode(), partition=p, on_delivery=rec)
    producer.flush(30)
    assert all(not rec.errors and sorted(rec.delivered) == list(range(PLAIN)) for rec in recorders.values())
    return gapped, {p: rec.delivered for p, rec in recorders.items()}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_many_small_ranges_read_by_one_consumer_per_task_are_exact_around_markers(spark, kafka_config, wide, case):
    gapped, plain = wide
    start, end = case(gapped)
    ranges = [OffsetRange(gapped.topic, 0, start, end)] + [OffsetRange(gapped.topic, p, 0, PLAIN) for p in plain]
    assert many_small(ranges, headers=False)
    began = time.monotonic()
    rows = read_ranges(spark, kafka_config, ranges, headers=False).withColumn("task", F.spark_partition_id()).collect()
    assert time.monotonic() - began < 60  # done by position: never waits out a stall
    got = sorted((r.partition, r.offset, bytes(r.value)) for r in rows)
    truth = [(0, o, v) for o, v in gapped.truth(start, end)]
    truth += sorted((p, o, v) for p, delivered in plain.items() for o, v in delivered.items())
    assert got == sorted(truth), (start, end)
    assert {r.topic for r in rows} == {gapped.topic} and len({r.task for r in rows}) == 1
    assert all(r.timestamp is not None and r.timestampType == 0 for r in rows)  # create time, as Spark's source


def test_a_start_deleted_below_many_small_ranges_is_the_products_data_loss_error(spark, kafka_config, wide):
    gapped, plain = wide
    admin = AdminClient({"bootstrap.servers": kafka_config["bootstrap.servers"]})
    (deleted,) = admin.delete_records([TopicPartition(gapped.topic, 7, 3)]).values()
    assert deleted.result().low_watermark == 3
    ranges = [OffsetRange(gapped.topic, 0, 0, gapped.log_end)] + [OffsetRange(gapped.topic, p, 0, PLAIN) for p in plain]
    assert many_small(ranges, headers=False)
    began = time.monotonic()
    with pytest.raises(Exception) as failed:
        read_ranges(spark, kafka_config, ranges, headers=False).collect()
    assert time.monotonic() - began < 60  # the broker's answer, not a stall
    lost = data_loss(failed.value, kafka_config, ranges)
    assert isinstance(lost, DataLossError), failed.value
    assert f"{gapped.topic}[7]" in str(lost) and "out of range" in str(lost) and "allow_data_loss=true" in str(lost)
