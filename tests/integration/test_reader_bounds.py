"""``read_range`` returns exactly the delivered records of ``[start, end)`` around transaction markers.

The truth is what the producers' delivery callbacks reported: every committed transaction
leaves a control-marker offset that no record carries, so ``end - start`` is never a record
count and a range may start or end on an offset that holds no record. Runs on the real broker.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from reprocess.core.errors import DataLossError, ReadError
from reprocess.core.ranges import OffsetRange
from reprocess.kafka import demo_data
from reprocess.kafka.clients import make_consumer, make_producer
from reprocess.kafka.reader import read_range

pytestmark = pytest.mark.integration("kafka")


@dataclass(frozen=True)
class GappedTopic:
    topic: str
    delivered: dict[int, bytes]  # offset → value, from delivery callbacks
    markers: tuple[int, ...]  # offsets below the log end that no record holds
    log_end: int

    def truth(self, start: int, end: int) -> list[tuple[int, bytes]]:
        return [(o, v) for o, v in sorted(self.delivered.items()) if start <= o < end]


class Recorder:
    """A delivery callback that records every delivered offset and fails on any delivery error."""

    def __init__(self) -> None:
        self.delivered: dict[int, bytes] = {}
        self.errors: list[str] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.delivered[msg.offset()] = msg.value()


def produce_records(producer: Any, topic: str, tag: str, count: int, recorder: Recorder) -> None:
    """Produce ``count`` records to partition 0 and wait for their delivery."""
    for i in range(count):
        producer.produce(topic, f"{tag}-{i}".encode(), key=tag.encode(), partition=0, on_delivery=recorder)
    producer.flush(30)


def commit_and_wait_for_marker(txn: Any, kafka_config: dict[str, Any], topic: str, recorder: Recorder) -> None:
    """Commit, then wait until the commit marker follows the transaction's last record in the log."""
    txn.commit_transaction(30)
    demo_data.wait_for_markers(kafka_config, topic, {0: max(recorder.delivered) + 2})


@pytest.fixture(scope="module")
def gapped(kafka_config: dict[str, Any]) -> GappedTopic:
    """One partition: 5 plain, a committed transaction of 4, 3 plain, a committed transaction of 3, 1 plain."""
    topic = f"reader_bounds_{uuid.uuid4().hex[:8]}"
    demo_data.create_topic(kafka_config, topic, 1)
    recorder = Recorder()
    plain = make_producer(kafka_config)
    txn = make_producer(kafka_config, **{"transactional.id": f"txn-{topic}"})
    txn.init_transactions(30)
    produce_records(plain, topic, "plain-a", 5, recorder)
    for tag, count, after in (("txn-a", 4, 3), ("txn-b", 3, 0)):
        txn.begin_transaction()
        produce_records(txn, topic, tag, count, recorder)
        commit_and_wait_for_marker(txn, kafka_config, topic, recorder)
        produce_records(plain, topic, f"plain-after-{tag}", after, recorder)
    produce_records(plain, topic, "tail", 1, recorder)
    assert recorder.errors == []
    log_end = max(recorder.delivered) + 1
    markers = tuple(sorted(set(range(log_end)) - set(recorder.delivered)))
    return GappedTopic(topic, dict(recorder.delivered), markers, log_end)


def read(kafka_config: dict[str, Any], topic: str, start: int, end: int, **kw: Any) -> list[tuple[int, bytes]]:
    out = []
    for batch in read_range(kafka_config, OffsetRange(topic, 0, start, end), stall_timeout_s=10, **kw):
        assert set(batch.column("topic").to_pylist()) == {topic}
        assert set(batch.column("partition").to_pylist()) == {0}
        out.extend(zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist(), strict=True))
    return out


def test_committed_transactions_leave_one_marker_offset_each(gapped):
    # The layout the cases rely on: 16 records; each commit leaves a marker right after its transaction.
    assert len(gapped.delivered) == 16
    assert gapped.markers == (9, 16)
    assert gapped.log_end == 18


Case = Callable[[GappedTopic], tuple[int, int]]
first, second = (lambda g: g.markers[0]), (lambda g: g.markers[1])
CASES: dict[str, Case] = {
    "whole-log": lambda g: (0, g.log_end),
    "start-at-marker": lambda g: (first(g), g.log_end),
    "end-at-marker": lambda g: (0, first(g)),
    "start-and-end-at-markers": lambda g: (first(g), second(g)),
    "exactly-the-marker": lambda g: (first(g), first(g) + 1),
    "marker-to-log-end-just-one-record": lambda g: (second(g), g.log_end),
    "just-before-gap-to-just-after": lambda g: (first(g) - 1, first(g) + 2),
    "end-just-before-gap": lambda g: (0, first(g) - 1),
    "end-just-after-gap": lambda g: (0, first(g) + 1),
    "start-just-before-gap": lambda g: (first(g) - 1, g.log_end),
    "start-just-after-gap": lambda g: (first(g) + 1, g.log_end),
    "inside-a-transaction": lambda g: (first(g) - 3, first(g) - 1),
    "spanning-both-gaps": lambda g: (first(g) - 1, second(g) + 1),
    "one-offset-holding-a-record": lambda g: (3, 4),
    "one-offset-at-log-start": lambda g: (0, 1),
    "last-record-only": lambda g: (g.log_end - 1, g.log_end),
    "empty-at-log-start": lambda g: (0, 0),
    "empty-at-marker": lambda g: (first(g), first(g)),
    "empty-at-log-end": lambda g: (g.log_end, g.log_end),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_read_range_returns_exactly_the_delivered_records_in_range(kafka_config, gapped, case):
    start, end = case(gapped)
    assert read(kafka_config, gapped.topic, start, end) == gapped.truth(start, end), (start, end)


@pytest.mark.parametrize("fetch_batch", [1, 2, 3, 5])
def test_read_range_is_exact_whatever_the_arrow_batch_size(kafka_config, gapped, fetch_batch):
    batches = list(read_range(kafka_config, OffsetRange(gapped.topic, 0, 0, gapped.log_end), fetch_batch=fetch_batch))
    assert all(b.num_rows <= fetch_batch for b in batches)
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == sorted(gapped.delivered)


def test_consecutive_ranges_split_at_markers_cover_the_log_once(kafka_config, gapped):
    # Chained runs: each ends where the next starts, so every record is read exactly once.
    cuts = [0, gapped.markers[0], gapped.markers[0] + 1, gapped.markers[1], gapped.log_end]
    pieces = [read(kafka_config, gapped.topic, a, b) for a, b in itertools.pairwise(cuts)]
    assert [rec for piece in pieces for rec in piece] == gapped.truth(0, gapped.log_end)


@pytest.fixture(scope="module")
def marker_last(kafka_config: dict[str, Any]) -> GappedTopic:
    """One partition whose LAST write is a committed transaction: 3 plain, then a transaction of 4.

    The commit marker is the log's last offset and no record carries it, so a reader that judged
    completion by the last delivered record would wait for an offset that never comes.
    """
    topic = f"reader_marker_last_{uuid.uuid4().hex[:8]}"
    demo_data.create_topic(kafka_config, topic, 1)
    recorder = Recorder()
    produce_records(make_producer(kafka_config), topic, "plain", 3, recorder)
    txn = make_producer(kafka_config, **{"transactional.id": f"txn-{topic}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    produce_records(txn, topic, "txn", 4, recorder)
    commit_and_wait_for_marker(txn, kafka_config, topic, recorder)
    assert recorder.errors == []
    consumer = make_consumer(kafka_config)
    try:
        _, log_end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    finally:
        consumer.close()
    markers = tuple(sorted(set(range(log_end)) - set(recorder.delivered)))
    return GappedTopic(topic, dict(recorder.delivered), markers, log_end)


def test_a_log_ending_in_a_commit_marker_reports_the_marker_as_its_last_offset(marker_last):
    assert sorted(marker_last.delivered) == list(range(7))
    assert (marker_last.markers, marker_last.log_end) == ((7,), 8)


TAIL_CASES: dict[str, Case] = {
    "whole-log-ending-on-the-marker": lambda g: (0, g.log_end),
    "end-just-before-the-marker": lambda g: (0, g.markers[0]),
    "the-transaction-and-its-marker": lambda g: (3, g.log_end),
    "only-the-marker": lambda g: (g.markers[0], g.log_end),
    "last-record-and-the-marker": lambda g: (g.markers[0] - 1, g.log_end),
}


@pytest.mark.parametrize("case", TAIL_CASES.values(), ids=TAIL_CASES.keys())
def test_a_range_ending_in_the_trailing_marker_completes_by_position_without_a_stall(kafka_config, marker_last, case):
    start, end = case(marker_last)
    began = time.monotonic()
    records = []
    for batch in read_range(kafka_config, OffsetRange(marker_last.topic, 0, start, end), stall_timeout_s=3):
        records.extend(zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist(), strict=True))
    assert records == marker_last.truth(start, end), (start, end)
    assert time.monotonic() - began < 3  # done by position, not by waiting out the stall timeout


def test_a_start_below_the_log_start_raises_data_loss_from_the_reader_itself(kafka_config, unique_name):
    """Offsets [0, 30) were deleted after the range was planned (the Admin API's delete-records,
    as retention would): the broker answers the reader's Fetch with OFFSET_OUT_OF_RANGE and the
    reader raises DataLossError at once, never reading on from the new log start."""
    from confluent_kafka.admin import AdminClient

    demo_data.create_topic(kafka_config, unique_name, 1)
    recorder = Recorder()
    produce_records(make_producer(kafka_config), unique_name, "r", 100, recorder)
    assert not recorder.errors and sorted(recorder.delivered) == list(range(100))
    admin = AdminClient(kafka_config)  # held: a collected client never completes its futures
    deleted = admin.delete_records([TopicPartition(unique_name, 0, 30)], operation_timeout=30)
    assert [f.result().low_watermark for f in deleted.values()] == [30]

    began = time.monotonic()
    with pytest.raises(DataLossError) as lost:
        list(read_range(kafka_config, OffsetRange(unique_name, 0, 10, 100), stall_timeout_s=20))
    assert "offset 10 is out of range" in str(lost.value) and "below the log start" in str(lost.value)
    assert time.monotonic() - began < 20  # raised from the broker's answer, not a stall

    # What is left is read exactly, and the watermarks show the new log start.
    kept = [
        v for b in read_range(kafka_config, OffsetRange(unique_name, 0, 30, 100)) for v in b.column("value").to_pylist()
    ]
    assert kept == [recorder.delivered[o] for o in range(30, 100)]
    consumer = make_consumer(kafka_config)
    try:
        assert consumer.get_watermark_offsets(TopicPartition(unique_name, 0), timeout=10, cached=False) == (30, 100)
    finally:
        consumer.close()


@pytest.fixture
def open_transaction(kafka_config, unique_name) -> Any:
    """A topic with 2 committed plain records followed by 3 records of a transaction left open."""
    demo_data.create_topic(kafka_config, unique_name, 1)
    recorder = Recorder()
    plain = make_producer(kafka_config)
    produce_records(plain, unique_name, "plain", 2, recorder)
    txn = make_producer(kafka_config, **{"transactional.id": f"open-{unique_name}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    produce_records(txn, unique_name, "open", 3, recorder)
    assert recorder.errors == [] and sorted(recorder.delivered) == [0, 1, 2, 3, 4]
    yield unique_name
    txn.abort_transaction(30)


def first_eof(consumer: Consumer, topic: str, timeout_s: float = 10.0) -> tuple[list[int], int]:
    """Offsets returned from 0 until the first partition EOF, and the EOF's offset."""
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[int] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=10, timeout=0.5):
            if msg.error() is None:
                seen.append(msg.offset())
            elif msg.error().code() == KafkaError._PARTITION_EOF:
                return seen, msg.offset()
            else:
                raise AssertionError(msg.error().str())
    raise AssertionError(f"no EOF within {timeout_s}s; read {seen}")


def test_make_consumer_reads_committed_only_so_an_open_transaction_is_invisible(kafka_config, open_transaction):
    consumer = make_consumer(kafka_config)
    try:
        seen, eof = first_eof(consumer, open_transaction)
    finally:
        consumer.close()
    assert (seen, eof) == ([0, 1], 2)  # stops at the last stable offset

    # Control: the same read with read_uncommitted does see them, so the check above can fail.
    uncommitted = Consumer(
        {**kafka_config, "group.id": "reader-bounds-control", "enable.partition.eof": True,
         "isolation.level": "read_uncommitted", "enable.auto.commit": False}
    )  # fmt: skip
    try:
        seen, eof = first_eof(uncommitted, open_transaction)
    finally:
        uncommitted.close()
    assert (seen, eof) == ([0, 1, 2, 3, 4], 5)


def test_read_range_into_an_open_transaction_stalls_out_instead_of_returning_it(kafka_config, open_transaction):
    assert read(kafka_config, open_transaction, 0, 2) == [(0, b"plain-0"), (1, b"plain-1")]
    with pytest.raises(ReadError, match=r"position stayed at offset 2 for 2s, below the planned end 4"):
        list(read_range(kafka_config, OffsetRange(open_transaction, 0, 0, 4), stall_timeout_s=2))
