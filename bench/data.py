"""The bench data: N JSON order events, ~200 bytes each, 10 updates per key, 4 partitions.

Deterministic (no RNG state): record ``i`` is rebuilt from ``i`` alone, so the Postgres
ceiling gets the exact parsed rows Kafka holds without reading Kafka.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

log = logging.getLogger(__name__)

PARTITIONS: Final = 4
UPDATES_PER_KEY: Final = 10
STATUSES: Final = ("created", "paid", "packed", "shipped", "delivered", "returned", "refunded", "closed")
T0: Final = datetime(2026, 11, 1, tzinfo=UTC)
T0_MS: Final = int(T0.timestamp() * 1000)


@dataclass(frozen=True)
class Dataset:
    """One topic produced for this run; ``ends`` are the exact log ends per partition."""

    topic: str
    records: int
    orders: int
    ends: dict[int, int]
    produce_seconds: float


def event(i: int, orders: int) -> tuple[int, str, dict[str, Any]]:
    """Record ``i``: order ``i % orders`` gets its ``i // orders``-th update (≈10 per key).

    Updates of one key are produced in order and stay on one partition (``n % 4``).
    """
    n, u = i % orders, i // orders
    oid = f"o-{n:08d}"
    h = (n * 2654435761) & 0xFFFFFFFF
    body = {
        "order_id": oid,
        "customer_id": f"c-{h % max(1, orders // 5):07d}",
        "status": STATUSES[min(u, len(STATUSES) - 1)],
        "amount": f"{(h % 99_900 + 100) / 100 + u:.2f}",
        "currency": "EUR",
        "items": h % 9 + 1,
        "updated_at": (T0 + timedelta(minutes=n % 100_000 + 30 * u)).isoformat().replace("+00:00", "Z"),
        "channel": "web" if h & 1 else "mobile",
        "note": f"bench update {u} of order {n}",
    }
    return n % PARTITIONS, oid, body


def produce_dataset(
    kafka: dict[str, Any], topic: str, records: int, encode: Callable[[int, dict[str, Any]], bytes] | None = None
) -> Dataset:
    """Produce ``records`` order events to a new topic, each value ``encode(i, event)`` (default:
    the event as JSON; bench/formats.py writes Avro and Debezium envelopes).

    Raises when the broker's log ends differ from the counts produced.
    """
    from confluent_kafka import TopicPartition

    from reprocess.kafka.clients import make_consumer, make_producer
    from reprocess.kafka.demo_data import create_topic

    orders = max(1, records // UPDATES_PER_KEY)
    create_topic(kafka, topic, PARTITIONS)
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    # Big batches: the producer is not what is measured, and fewer batches load the broker less.
    tuning = {"linger.ms": 50, "batch.num.messages": 10_000, "queue.buffering.max.messages": 500_000}
    producer = make_producer(kafka, **tuning)
    counts = [0] * PARTITIONS
    started = time.monotonic()

    def send(part: int, key: str, value: bytes, ts: int) -> None:
        while True:
            try:
                producer.produce(
                    topic, value=value, key=key.encode(), partition=part, timestamp=ts, on_delivery=on_delivery
                )
                break
            except BufferError:
                producer.poll(0.2)
        counts[part] += 1

    for i in range(records):
        part, key, body = event(i, orders)
        value = encode(i, body) if encode else json.dumps(body, separators=(",", ":")).encode()
        send(part, key, value, T0_MS + i)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(300)
    seconds = time.monotonic() - started
    if errors:
        raise RuntimeError(f"{len(errors)} messages failed delivery, first: {errors[0]}")
    consumer = make_consumer(kafka)
    try:
        ends = {}
        for part in range(PARTITIONS):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=10, cached=False)
            if (low, high) != (0, counts[part]):
                raise RuntimeError(f"{topic}[{part}]: broker says [{low}, {high}), produced {counts[part]} records")
            ends[part] = high
    finally:
        consumer.close()
    log.info("produced topic=%s records=%d seconds=%.1f (%.0f/s)", topic, records, seconds, records / seconds)
    return Dataset(topic, records, orders, ends, seconds)


def parsed_rows(ds: Dataset) -> Iterator[tuple[Any, ...]]:
    """The parsed rows exactly as Kafka holds them: payload columns + (topic, partition, offset, ts ms)."""
    next_offset = [0] * PARTITIONS
    for i in range(ds.records):
        part, _key, ev = event(i, ds.orders)
        off = next_offset[part]
        next_offset[part] += 1
        yield (ev["order_id"], ev["customer_id"], ev["status"], ev["amount"], ev["currency"], ev["items"],
               ev["updated_at"], ds.topic, part, off, T0_MS + i)  # fmt: skip
