"""The bench data: N JSON order events, ~200 bytes each, 10 updates per key, 4 partitions.

Keyed by ``order_id``; every key is updated about 10 times. Two kinds of record test exactness
(:mod:`bench.oracle` counts what a case got wrong): one key in 20 has a **late older version** (its
7th record re-sends its 3rd: an older status and ``updated_at`` at a later offset, followed by its
newer updates), and one key in 20 ends with a **tombstone** (a null value: the key is deleted).
A key's state is its last record in its partition (Kafka's contract for a keyed topic, which log
compaction keeps; the orders pipeline's offset ordering), so the late older version never is a
key's final state: a case that applies a key's records out of log order can leave it there.

Deterministic (no RNG state): record ``i`` is rebuilt from ``i`` alone, so the Postgres
ceiling and the oracle get exactly what Kafka holds without reading Kafka.
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
    partitions: int = PARTITIONS


LATE_EVERY: Final = 20  # keys n with n % 20 == LATE_KEY get a late older version
LATE_KEY: Final = 7
LATE_AT: Final = 6  # the 7th record of such a key re-sends its 3rd
LATE_COPY: Final = 2
DELETE_EVERY: Final = 20  # keys n with n % 20 == DELETE_KEY end with a tombstone
DELETE_KEY: Final = 3


def event(i: int, orders: int, partitions: int = PARTITIONS) -> tuple[int, str, dict[str, Any] | None]:
    """Record ``i``: order ``i % orders`` gets its ``i // orders``-th update (≈10 per key); the
    value is None for a tombstone (the 10th record of one key in 20).

    Updates of one key are produced in order and stay on one partition (``n % partitions``).
    """
    n, u = i % orders, i // orders
    if n % DELETE_EVERY == DELETE_KEY and u == UPDATES_PER_KEY - 1:
        return n % partitions, f"o-{n:08d}", None
    if n % LATE_EVERY == LATE_KEY and u == LATE_AT:
        u = LATE_COPY
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
    return n % partitions, oid, body


# A record's value from (its number, its key, the event or None for a tombstone); None: a null value.
Encoder = Callable[[int, str, dict[str, Any] | None], bytes | None]


def produce_dataset(
    kafka: dict[str, Any],
    topic: str,
    records: int,
    encode: Encoder | None = None,
    encode_key: Callable[[str], bytes] | None = None,
    *,
    partitions: int = PARTITIONS,
    orders: int | None = None,
    limits: dict[int, int] | None = None,
) -> Dataset:
    """Produce ``records`` order events to a new topic, each value ``encode(i, key, event)``
    (default: the event as JSON, a tombstone as a null value; bench/formats.py writes Avro and
    Debezium envelopes, bench/jdbc_sink.py the JSON converter's), each key ``encode_key(key)``
    (default: its text), over ``partitions`` partitions.

    ``orders`` (keys) defaults to ``records / 10``; ``orders = partitions`` puts exactly
    ``records / partitions`` records on every partition (the many-partitions case). ``limits``
    keep only a partition's first ``limits[p]`` records (an older slice, in a topic of its own).
    Raises when the broker's log ends differ from the counts produced.
    """
    from confluent_kafka import TopicPartition

    from reprocess.kafka.clients import make_consumer, make_producer
    from reprocess.kafka.demo_data import create_topic

    orders = orders or max(1, records // UPDATES_PER_KEY)
    create_topic(kafka, topic, partitions)
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    # Big batches: the producer is not what is measured, and fewer batches load the broker less.
    tuning = {"linger.ms": 50, "batch.num.messages": 10_000, "queue.buffering.max.messages": 500_000}
    producer = make_producer(kafka, **tuning)
    counts = [0] * partitions
    started = time.monotonic()

    def send(part: int, key: bytes, value: bytes | None, ts: int) -> None:
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=part, timestamp=ts, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.2)
        counts[part] += 1

    for i in range(records):
        part, key, body = event(i, orders, partitions)
        if limits is not None and counts[part] >= limits[part]:
            continue
        if encode is not None:
            value = encode(i, key, body)
        else:
            value = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        send(part, encode_key(key) if encode_key else key.encode(), value, T0_MS + i)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(300)
    seconds = time.monotonic() - started
    if errors:
        raise RuntimeError(f"{len(errors)} messages failed delivery, first: {errors[0]}")
    consumer = make_consumer(kafka)
    try:
        ends = {}
        for part in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=10, cached=False)
            if (low, high) != (0, counts[part]):
                raise RuntimeError(f"{topic}[{part}]: broker says [{low}, {high}), produced {counts[part]} records")
            ends[part] = high
    finally:
        consumer.close()
    log.info("produced topic=%s records=%d seconds=%.1f (%.0f/s)", topic, records, seconds, records / seconds)
    return Dataset(topic, sum(counts), orders, ends, seconds, partitions)


def parsed_rows(ds: Dataset) -> Iterator[tuple[Any, ...]]:
    """The parsed records exactly as Kafka holds them: payload columns + (topic, partition, offset,
    ts ms); a tombstone has its key and None for every other payload column."""
    next_offset = [0] * ds.partitions
    for i in range(ds.records):
        part, key, ev = event(i, ds.orders, ds.partitions)
        off = next_offset[part]
        next_offset[part] += 1
        if ev is None:
            yield (key, None, None, None, None, None, None, ds.topic, part, off, T0_MS + i)
            continue
        yield (ev["order_id"], ev["customer_id"], ev["status"], ev["amount"], ev["currency"], ev["items"],
               ev["updated_at"], ds.topic, part, off, T0_MS + i)  # fmt: skip
