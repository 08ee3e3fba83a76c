"""Many small ranges (``reprocess.spark.grouped_read``: a few tasks, one confluent-kafka consumer
each for many partitions) return exactly the committed records of every ``[start, end)`` around
transaction markers and aborted records, and a start deleted after planning is the product's
data-loss error; a whole run through it that meets deleted records fails, then records exactly
them as lost with allow_data_loss. The truth is the producers' delivery callbacks
(tests/integration/kafka/test_reader_bounds.py) and the oracle (``tests/support/oracle.py``). Runs on the
real broker, the real Connect server and PostgreSQL.
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
from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from reprocess.kafka.clients import make_producer
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from reprocess.spark.grouped_read import MIN_RANGES, many_small
from reprocess.spark.read import data_loss, read_ranges
from tests.integration.kafka.test_reader_bounds import CASES, GappedTopic, Recorder, make_gapped
from tests.support.helpers import (
    committed_ranges,
    connect_session,
    ledger,
    log_ends,
    oracle_rows,
    orders_spec,
    run_spark_stage,
    target_rows,
)

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

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


def test_records_deleted_after_planning_many_small_ranges_stop_the_run_then_allow_data_loss_records_exactly_them(
    kafka_config, engine, unique_name
):
    """A whole run through the grouped read (MIN_RANGES partitions of a few records each): real
    delete-records on one partition between planning and the read fail the stage with the product's
    DataLossError naming the lost offsets; nothing is committed; with allow_data_loss the lost range
    is recorded and the rest lands. The oracle is every produced record but the deleted ones."""
    kafka, topic = kafka_config, unique_name
    spec = orders_spec(unique_name, topic)
    demo_data.create_topic(kafka, topic, MIN_RANGES)
    first = demo_data.produce(kafka, topic, MIN_RANGES, demo_data.order_events(400, 2, seed=41), malformed=())
    plan1 = snapshot_and_migrate(engine, kafka, spec, RunRequest.incremental(), f"{unique_name}-1")
    assert many_small(plan1.ranges, headers=False), [r.width for r in plan1.ranges]
    run_spark_stage(spec, plan1.run_id, kafka=kafka)
    commit_stored(engine, spec, plan1.run_id)
    assert target_rows(engine, spec) == oracle_rows(first)

    later = [(k.replace("o-", "l-"), {**ev, "order_id": ev["order_id"].replace("o-", "l-")})
             for k, ev in demo_data.order_events(400, 2, seed=42)]  # fmt: skip
    second = demo_data.produce(kafka, topic, MIN_RANGES, later, malformed=())
    planned = snapshot_and_migrate(engine, kafka, spec, RunRequest.incremental(), f"{unique_name}-2")
    assert many_small(planned.ranges, headers=False)
    victim = 7
    position, end = ledger(engine, spec)[victim], log_ends(second)[victim]
    deleted_to = position + 3
    assert deleted_to < end
    admin = AdminClient({"bootstrap.servers": kafka["bootstrap.servers"]})  # held: futures complete
    (deleted,) = admin.delete_records([TopicPartition(topic, victim, deleted_to)], operation_timeout=30).values()
    assert deleted.result().low_watermark == deleted_to

    with pytest.raises(DataLossError) as lost:
        run_spark_stage(spec, planned.run_id, kafka=kafka)
    assert f"{topic}[{victim}]" in str(lost.value) and "allow_data_loss" in str(lost.value), lost.value
    assert ledger(engine, spec) == log_ends(first)  # nothing committed
    assert target_rows(engine, spec) == oracle_rows(first)

    request = RunRequest.from_params({"start_mode": "ledger", "allow_data_loss": True})
    plan3 = snapshot_and_migrate(engine, kafka, spec, request, f"{unique_name}-3")
    assert [(x.partition, x.start, x.end) for x in plan3.lost] == [(victim, position, deleted_to)]
    run_spark_stage(spec, plan3.run_id, kafka=kafka)
    commit_stored(engine, spec, plan3.run_id)
    survived = demo_data.Produced(
        sorted(first.messages + [m for m in second.messages if not (m[0] == victim and position <= m[1] < deleted_to)])
    )
    assert target_rows(engine, spec) == oracle_rows(survived)
    assert ledger(engine, spec) == log_ends(second)
    assert committed_ranges(engine, spec)[victim] == [(0, position), (deleted_to, end)]
