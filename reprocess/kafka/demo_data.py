"""Realistic demo/test data: order events with several updates per order, malformed
messages and transactional batches (so offsets have marker gaps).

The oracle that says what the target must hold lives in ``tests/support/oracle.py``, outside the product.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from reprocess.core.errors import ProduceError
from reprocess.kafka.clients import make_admin, make_producer

log = logging.getLogger(__name__)

STATUSES = ("created", "paid", "packed", "shipped", "delivered")
MALFORMED: tuple[bytes, ...] = (
    b"{not json",
    b'{"order_id": "o-bad-1", "customer_id": "c1", "status": "paid", "updated_at": "2026-11-01T00:00:00Z", '
    b'"amount": "twelve"}',
    b'{"customer_id": "c1", "status": "paid", "updated_at": "2026-11-01T00:00:00Z"}',
    b"\xff\xfe\xfa not utf-8",
    b"",
    b"[1, 2, 3]",
)


@dataclass
class Produced:
    """Every message written, with its offset, so tests can compute an oracle."""

    messages: list[tuple[int, int, bytes | None, bytes]] = field(default_factory=list)  # partition, offset, key, value
    timestamps: dict[tuple[int, int], int] = field(default_factory=dict)  # (partition, offset) → ms

    def add(self, partition: int, offset: int, key: bytes | None, value: bytes, ts_ms: int = 0) -> None:
        self.messages.append((partition, offset, key, value))
        self.timestamps[(partition, offset)] = ts_ms


def create_topic(kafka: Mapping[str, Any], topic: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    admin = make_admin(kafka)
    if topic in admin.list_topics(timeout=10).topics:
        return
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=15).values():
        fut.result()


def order_events(
    orders: int, updates: int, seed: int = 7, start: datetime | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(key, event) pairs: each order moves through up to ``updates`` statuses, interleaved."""
    rnd = random.Random(seed)
    t0 = start or datetime(2026, 11, 1, tzinfo=UTC)
    events: list[tuple[str, dict[str, Any]]] = []
    for n in range(orders):
        oid = f"o-{n:07d}"
        amount = Decimal(rnd.randint(100, 99_999)) / 100
        for u in range(rnd.randint(1, updates)):
            events.append(
                (
                    oid,
                    {
                        "order_id": oid,
                        "customer_id": f"c-{rnd.randint(1, max(1, orders // 5)):06d}",
                        "status": STATUSES[min(u, len(STATUSES) - 1)],
                        "amount": str(amount + u),
                        "currency": "EUR",
                        "items": rnd.randint(1, 9),
                        "updated_at": (t0 + timedelta(minutes=n + 30 * u)).isoformat().replace("+00:00", "Z"),
                    },
                )
            )
    rnd.shuffle(events)
    # Shuffling breaks per-key order; restore it so each key's updates are produced in sequence.
    seq: dict[str, int] = {}
    ordered = []
    per_key: dict[str, list[dict[str, Any]]] = {}
    for key, ev in events:
        per_key.setdefault(key, []).append(ev)
    for key, _ in events:
        i = seq.get(key, 0)
        ordered.append((key, sorted(per_key[key], key=lambda e: e["updated_at"])[i]))
        seq[key] = i + 1
    return ordered


def payment_events(payments: int, seed: int = 3) -> list[tuple[str, dict[str, Any]]]:
    """(key, event) pairs with a ``version`` per payment; about 1 in 5 arrives out of order."""
    rnd = random.Random(seed)
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    events: list[tuple[str, dict[str, Any]]] = []
    for n in range(payments):
        pid = f"p-{n:07d}"
        versions = [
            {"payment_id": pid, "order_id": f"o-{n:07d}", "status": status, "amount": f"{10 + n % 90}.50",
             "version": v, "updated_at": (t0 + timedelta(minutes=n + v)).isoformat().replace("+00:00", "Z")}
            for v, status in enumerate(("authorized", "captured", "settled")[: rnd.randint(1, 3)], start=1)
        ]  # fmt: skip
        if len(versions) > 1 and rnd.random() < 0.2:
            versions[-1], versions[-2] = versions[-2], versions[-1]  # a late retry of an older version
        events.extend((pid, ev) for ev in versions)
    return events


def wait_for_markers(kafka: Mapping[str, Any], topic: str, ends: Mapping[int, int], timeout_s: float = 30) -> None:
    """Wait until each partition's log end reaches ``ends`` (its commit marker is written).

    Kafka acknowledges a commit once its coordinator has logged it and writes the partitions'
    markers after that, so a record produced right after the commit may land before a marker.
    Waiting keeps each marker right after its transaction: a partition's log end is then its
    last record + 1, as the delivery reports (and the tests' oracles) say.
    """
    import time

    from confluent_kafka import TopicPartition

    from reprocess.kafka.clients import make_consumer

    consumer = make_consumer(kafka)
    try:
        deadline = time.monotonic() + timeout_s
        for part, end in ends.items():
            while consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=10, cached=False)[1] < end:
                if time.monotonic() > deadline:
                    raise ProduceError(
                        f"{topic}[{part}]: the commit marker at {end - 1} was not written in {timeout_s}s",
                        topic=topic,
                        partition=part,
                    )
                time.sleep(0.02)
    finally:
        consumer.close()


def produce(
    kafka: Mapping[str, Any],
    topic: str,
    partitions: int,
    events: Iterable[tuple[str, dict[str, Any]]],
    *,
    malformed: Iterable[bytes] = MALFORMED,
    transactional_every: int = 0,
    base_time: datetime | None = None,
) -> Produced:
    """Produce keyed JSON events, some malformed messages and, optionally, transactions."""
    from confluent_kafka import Producer

    produced = Produced()
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            produced.add(msg.partition(), msg.offset(), msg.key(), msg.value(), msg.timestamp()[1])

    events = list(events)
    ts0 = base_time or datetime(2026, 11, 1, tzinfo=UTC)
    plain: Producer = make_producer(kafka, **{"linger.ms": 20, "batch.num.messages": 10_000})
    txn: Producer | None = None
    try:
        if transactional_every:
            txn = make_producer(kafka, **{"transactional.id": f"demo-{topic}", "linger.ms": 5})
            txn.init_transactions(30)

        def ts_ms(i: int) -> int:
            return int((ts0 + timedelta(seconds=i)).timestamp() * 1000)

        def send(p: Producer, key: str | None, value: bytes, i: int, partition: int | None = None) -> None:
            kwargs: dict[str, Any] = {"timestamp": ts_ms(i), "on_delivery": on_delivery}
            if partition is not None:
                kwargs["partition"] = partition
            while True:
                try:
                    p.produce(topic, value=value, key=key.encode() if key else None, **kwargs)
                    break
                except BufferError:
                    p.poll(0.5)
            p.poll(0)

        chunk = transactional_every or len(events) or 1
        for c, lo in enumerate(range(0, len(events), chunk)):
            batch = events[lo : lo + chunk]
            use_txn = txn is not None and c % 2 == 1
            p = txn if use_txn and txn is not None else plain
            if use_txn and txn is not None:
                plain.flush()
                txn.begin_transaction()
            before = len(produced.messages)
            for i, (key, ev) in enumerate(batch, start=lo):
                send(p, key, json.dumps(ev).encode(), i)
            if use_txn and txn is not None:
                txn.commit_transaction(30)
                last: dict[int, int] = {}
                for part, offset, *_ in produced.messages[before:]:
                    last[part] = max(last.get(part, offset), offset)
                wait_for_markers(kafka, topic, {part: offset + 2 for part, offset in last.items()})
        for j, bad in enumerate(malformed):
            send(plain, f"bad-{j}", bad, len(events) + j, partition=j % partitions)
        plain.flush()
        if errors:
            raise ProduceError(f"{len(errors)} messages failed delivery, first: {errors[0]}", topic=topic)
        produced.messages.sort()
        return produced
    finally:
        # Closed here, not when collected: a client left running keeps its connections and, for
        # an idempotent producer, its producer id, and reconnects to whatever later listens there.
        for producer in (plain, txn):
            if producer is not None:
                producer.purge()
                producer.close()
