"""The reader returns exactly the records of [start, end) on a topic with transaction-marker gaps."""

from __future__ import annotations

import json

import pytest

from reprocess import demo_data
from reprocess.kafka import make_producer
from reprocess.ranges import OffsetRange
from reprocess.reader import read_range

pytestmark = pytest.mark.integration("kafka")


@pytest.fixture(scope="module")
def gapped_topic(kafka_config) -> tuple[str, list[int], int]:
    """One partition: plain records, a committed transaction, plain, another transaction, a lone tail.

    Returns (topic, delivered offsets, log end). Each committed transaction leaves a marker
    offset that no record carries: the gaps the reader must step over by offset.
    """
    import uuid

    topic = f"gaps_{uuid.uuid4().hex[:8]}"
    demo_data.create_topic(kafka_config, topic, 1)
    delivered: list[int] = []

    def on_delivery(err, msg):
        assert err is None, err
        delivered.append(msg.offset())

    plain = make_producer(kafka_config)
    txn = make_producer(kafka_config, **{"transactional.id": f"t-{topic}"})
    txn.init_transactions(30)
    n = 0

    def send(p, count):
        nonlocal n
        for _ in range(count):
            p.produce(topic, json.dumps({"n": n}).encode(), key=str(n).encode(), partition=0, on_delivery=on_delivery)
            n += 1
        p.flush()

    send(plain, 5)
    for size in (4, 3):
        txn.begin_transaction()
        send(txn, size)
        txn.commit_transaction(30)
        send(plain, 2)
    send(plain, 1)  # a lone last batch: the local broker's log end is then exact
    delivered.sort()
    return topic, delivered, delivered[-1] + 1


def _offsets(kafka_config, topic: str, start: int, end: int) -> list[int]:
    batches = read_range(kafka_config, OffsetRange(topic, 0, start, end), fetch_batch=3, stall_timeout_s=10)
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_topic_has_marker_gaps(gapped_topic):
    _, delivered, log_end = gapped_topic
    assert len(delivered) < log_end  # markers took offsets


def test_reader_returns_exactly_the_range_at_every_edge_of_a_gap(kafka_config, gapped_topic):
    topic, delivered, log_end = gapped_topic
    gaps = sorted(set(range(log_end)) - set(delivered))
    edges = {0, log_end} | {g + d for g in gaps for d in (-1, 0, 1)}
    points = sorted(p for p in edges if 0 <= p <= log_end)
    checked = 0
    for start in points:
        for end in points:
            if start > end:
                continue
            assert _offsets(kafka_config, topic, start, end) == [o for o in delivered if start <= o < end], (start, end)
            checked += 1
    assert checked > 20


def test_reader_reads_the_whole_log_in_small_batches(kafka_config, gapped_topic):
    topic, delivered, log_end = gapped_topic
    assert _offsets(kafka_config, topic, 0, log_end) == delivered
