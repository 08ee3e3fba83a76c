"""Planning by timestamp on Apache Kafka: the planned offsets are the first records at/after each
time, computed here from the delivery reports.

The planner checks every broker answer (``offsets_for_times``) against the records' timestamps
and searches the records itself when the answer is wrong. On plain records Apache Kafka's
answer passes the check and is taken as is. Transactions are the case where Kafka itself
answers wrong for producer-set timestamps: a commit marker carries the broker's clock.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Consumer, TopicPartition

from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from reprocess.runner.start import snapshot_and_migrate
from tests.support.helpers import orders_spec

pytestmark = pytest.mark.integration("kafka")
BASE = datetime(2026, 11, 1, tzinfo=UTC)


def _first_at_or_after(produced: demo_data.Produced, partition: int, ts: datetime, log_end: int) -> int:
    ms = int(ts.timestamp() * 1000)
    offsets = [o for (p, o), t in sorted(produced.timestamps.items()) if p == partition and t >= ms]
    return min(offsets) if offsets else log_end


def _broker_answer(kafka_config: dict, topic: str, partition: int, ts: datetime) -> int:
    """offsets_for_times, asked of the broker directly; -1 (no record at/after) → the log end."""
    consumer = Consumer({**kafka_config, "group.id": f"{topic}-probe"})
    try:
        (answer,) = consumer.offsets_for_times([TopicPartition(topic, partition, int(ts.timestamp() * 1000))], 15)
        if answer.offset >= 0:
            return int(answer.offset)
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)[1])
    finally:
        consumer.close()


def _plan_by_time(kafka_config, engine, unique_name, start_s, end_s, transactional_every):
    """Produce, plan [start, end) by time; returns the plan's ranges, the oracle's and the broker's answers."""
    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.order_events(60, 3), malformed=(),
                                 transactional_every=transactional_every, base_time=BASE)  # fmt: skip
    log_ends = {p: max(o for q, o, *_ in produced.messages if q == p) + 1 for p in (0, 1)}
    start, end = BASE + timedelta(seconds=start_s), BASE + timedelta(seconds=end_s)
    request = RunRequest.from_params(
        {"start_mode": "timestamp", "start_value": start.isoformat(), "end_mode": "timestamp",
         "end_value": end.isoformat(), "dry_run": True}
    )  # fmt: skip
    plan = snapshot_and_migrate(engine, kafka_config, spec, request, unique_name)
    expected = {
        p: (_first_at_or_after(produced, p, start, log_ends[p]), _first_at_or_after(produced, p, end, log_ends[p]))
        for p in (0, 1)
    }
    broker = {p: tuple(_broker_answer(kafka_config, unique_name, p, t) for t in (start, end)) for p in (0, 1)}
    return {r.partition: (r.start, r.end) for r in plan.ranges}, expected, broker, produced


TIMES = [(0, 50), (37, 120), (100, 10_000)]


@pytest.mark.parametrize("start_s, end_s", TIMES)
def test_the_plan_by_time_is_the_first_record_at_or_after_each_time_and_the_brokers_own_answer(
    kafka_config, engine, unique_name, start_s, end_s, caplog
):
    with caplog.at_level(logging.INFO, logger="reprocess.kafka.offsets"):
        planned, expected, broker, _ = _plan_by_time(kafka_config, engine, unique_name, start_s, end_s, 0)
    assert planned == expected == broker
    assert "broker said" not in caplog.text  # the broker's answer was taken, not searched for


@pytest.mark.parametrize("start_s, end_s", TIMES)
def test_a_commit_marker_answered_for_a_time_is_replaced_by_the_first_record_at_or_after_it(
    kafka_config, engine, unique_name, start_s, end_s, caplog
):
    """Records with producer-set timestamps older than their transaction's commit: the commit
    marker carries the broker's clock, so Apache Kafka answers its offset (which holds no record)
    for every earlier time after it. The planner's check sees the marker's offset is not the first
    record at/after the time and searches the records instead."""
    with caplog.at_level(logging.INFO, logger="reprocess.kafka.offsets"):
        planned, expected, broker, produced = _plan_by_time(kafka_config, engine, unique_name, start_s, end_s, 40)
    assert planned == expected
    delivered = {(p, o) for p, o, *_ in produced.messages}
    for p in (0, 1):
        for answer, truth in zip(broker[p], expected[p], strict=True):
            if answer != truth:
                assert (p, answer) not in delivered and answer < truth, (p, answer, truth)  # a marker
                assert f"[{p}]: broker said {answer}, records say {truth}" in caplog.text
