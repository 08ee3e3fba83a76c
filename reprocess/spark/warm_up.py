"""A Spark Connect server's warm-up: small stages through a run's own path, right after its start.

A server's first run pays for HotSpot compiling Kafka's fetch path, the parse, the aggregation and
the driver's per-query code (analysis, optimizer rules, code generation, the Connect protocol),
Janino compiling the generated classes, and the Python workers starting (docs/performance.md, "The
first run after a server start"). The per-query code reaches the JIT's thresholds only by running
once per query, so the warm-up is several small stages (:data:`PASSES`), not one larger one: ten
stages of the same ~11,000 records cut a 300,000-record first run's server CPU by 15 % against one
(26.4 → 22.4 and 21.9 s, load 17-30), where one stage of 20 times the records changed nothing.

It is the product's, so ``reprocess spark-connect start`` (a wheel's server) and ``make services``
(the checkout's, ``devstack.connect``) both run it (``reprocess.spark.connect_server.warm_up``):
orders (malformed ones included) from a topic of its own (:data:`TOPIC`, produced once into the
Kafka the runs read), staged in the session the runs share (Python workers belong to a session)
into a stage dropped after each pass. Nothing else is left in the app database.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

from reprocess.core.ranges import OffsetRange
from reprocess.core.spec import PipelineSpec

TOPIC: Final = "reprocess_warm_up"
PARTITIONS: Final = 2
ORDERS: Final = 2_000  # ~11,000 order events on 2 partitions, and the malformed ones
PASSES: Final = 10
"""Stages a warm-up runs, each over its slice of the topic (:func:`slices`)."""

# A broker that has just started answers for a few seconds that it leads no partition yet (it is
# still loading its logs): the warm-up waits that out instead of leaving the first run cold.
LEADERSHIP_WAIT_S: Final = 30.0

# The orders pipeline's shape (pipelines/orders.yaml, which a wheel does not ship): text, numeric,
# integer and timestamp columns, required ones (records without them are dead letters), offset order.
SPEC: Final[Mapping[str, Any]] = {
    "name": TOPIC,
    "topics": [TOPIC],
    "consumer_group": TOPIC,
    "key": ["order_id"],
    "columns": {
        "order_id": {"type": "text", "required": True},
        "customer_id": {"type": "text", "required": True},
        "status": {"type": "text", "required": True},
        "amount": {"type": "numeric"},
        "currency": {"type": "text"},
        "items": {"type": "integer"},
        "updated_at": {"type": "timestamptz", "required": True},
    },
    "target_table": f"{TOPIC}.orders",
    "ordering": "offset",
}


def spec() -> PipelineSpec:
    """The warm-up's pipeline: :data:`SPEC`."""
    from reprocess.formats.specs import parse_spec

    return parse_spec(dict(SPEC), source="the Spark Connect server's warm-up")


def slices(ranges: Sequence[OffsetRange], passes: int) -> list[list[OffsetRange]]:
    """``ranges`` cut into ``passes`` consecutive slices of every range (empty slices left out):
    one stage each, so a warm-up of ``passes`` queries reads its records once.

    Examples
    --------
    >>> cut = slices([OffsetRange("t", 0, 0, 5), OffsetRange("t", 1, 2, 3)], 2)
    >>> [[(r.partition, r.start, r.end) for r in s] for s in cut]
    [[(0, 0, 2)], [(0, 2, 5), (1, 2, 3)]]
    """
    cut = [
        [OffsetRange(r.topic, r.partition, r.start + r.width * i // passes, r.start + r.width * (i + 1) // passes)
         for r in ranges]
        for i in range(passes)
    ]  # fmt: skip
    return [kept for kept in ([r for r in s if r.width > 0] for s in cut) if kept]


def topic_ranges(kafka: Mapping[str, Any]) -> list[OffsetRange]:
    """The warm-up topic's whole log per partition, produced on first use."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    from reprocess.kafka.clients import make_consumer
    from reprocess.kafka.demo_data import create_topic, order_events, produce

    not_led_yet = {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
    create_topic(kafka, TOPIC, PARTITIONS)
    consumer = make_consumer(kafka)
    try:

        def ends() -> dict[int, tuple[int, int]]:
            deadline = time.monotonic() + LEADERSHIP_WAIT_S
            while True:
                try:
                    return {
                        p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10, cached=False)
                        for p in range(PARTITIONS)
                    }
                except KafkaException as exc:
                    if exc.args[0].code() not in not_led_yet or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)

        found = ends()
        if all(high == 0 for _, high in found.values()):
            produce(kafka, TOPIC, PARTITIONS, order_events(ORDERS, 10))
            found = ends()
    finally:
        consumer.close()
    return [OffsetRange(TOPIC, p, low, high) for p, (low, high) in sorted(found.items())]


def warm_up(url: str, kafka: Mapping[str, Any], db_url: str, passes: int = PASSES) -> int:
    """Stage the warm-up topic on the server at ``url`` in ``passes`` stages (:func:`slices`); returns
    the stage rows they made. Migrates the app database first (a fresh one has no stage bookkeeping)."""
    from reprocess.postgres.db import make_engine, migrate
    from reprocess.spark.connect import client_env, shared_session
    from reprocess.spark.job import WARM_UP_STAGE
    from reprocess.spark.job import warm_up as stage_warm_up

    ranges = topic_ranges(kafka)
    engine = make_engine(db_url)
    try:
        migrate(engine)
    finally:
        engine.dispose()
    pipeline, stage_id = spec(), f"{WARM_UP_STAGE}-{uuid.uuid4().hex[:8]}"  # two servers' warm-ups never share one
    with client_env(), shared_session(url) as spark:
        return sum(stage_warm_up(spark, pipeline, part, db_url, kafka, stage_id) for part in slices(ranges, passes))
