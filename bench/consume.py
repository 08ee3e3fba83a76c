"""The one Kafka consume loop of the raw ceiling and the hand-written baseline."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from bench.data import Dataset

FETCH_BATCH: Final = 10_000


def consume_batches(kafka: dict[str, Any], ds: Dataset) -> Iterator[list[Any]]:
    """Yield the dataset's messages, ``[0, end)`` of every partition, one ``consume`` call at a time.

    One confluent-kafka consumer with the product's read_committed settings, ``assign`` of all
    partitions, ``consume(num_messages=10000)`` until every partition reached its end. EOF is a
    signal, any other error raises; records at or past a partition's end are dropped.
    """
    from confluent_kafka import KafkaError, TopicPartition

    from reprocess.kafka.clients import make_consumer

    consumer = make_consumer(kafka)
    pos = dict.fromkeys(ds.ends, 0)
    try:
        consumer.assign([TopicPartition(ds.topic, p, 0) for p in ds.ends])
        while any(pos[p] < ds.ends[p] for p in pos):
            batch = []
            for msg in consumer.consume(num_messages=FETCH_BATCH, timeout=1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(f"{ds.topic}: consume failed: {err.str()}")
                p, off = msg.partition(), msg.offset()
                if off < ds.ends[p]:
                    batch.append(msg)
                    pos[p] = off + 1
            yield batch
    finally:
        consumer.close()
