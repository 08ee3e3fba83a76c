"""The run's read (Spark's Kafka source with the product's options, ``reprocess.spark.read``)
returns exactly the committed records of ``[start, end)`` around transaction markers, aborted
records, deleted records and a transaction open at the snapshot.

The truth is what the producers' delivery callbacks reported (which offsets hold a committed
record, which an aborted one): every transaction leaves a control-marker offset that no record
carries, so ``end - start`` is never a record count and a range may start or end on an offset
that holds no record. Runs on the real broker and the real Connect server.
"""

from __future__ import annotations

import itertools
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from pyspark.sql import functions as F

from reprocess.core.errors import DataLossError
from reprocess.core.ranges import OffsetRange
from reprocess.kafka import demo_data
from reprocess.kafka.clients import make_producer
from reprocess.kafka.offsets import take_snapshot
from reprocess.spark.read import data_loss, read_ranges
from tests.support.helpers import connect_session, orders_spec

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]


@dataclass(frozen=True)
class GappedTopic:
    topic: str
    committed: dict[int, bytes]  # offset → value of every committed record, from delivery callbacks
    aborted: tuple[int, ...]  # offsets of records whose transaction was aborted
    markers: tuple[int, ...]  # offsets below the log end that no record holds (commit/abort markers)
    log_end: int

    def truth(self, start: int, end: int) -> list[tuple[int, bytes]]:
        return [(o, v) for o, v in sorted(self.committed.items()) if start <= o < end]


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
    for i in range(count):
        producer.produce(topic, f"{tag}-{i}".encode(), key=tag.encode(), partition=0, on_delivery=recorder)
    producer.flush(30)


def stable_end(kafka: dict[str, Any], topic: str, timeout_s: float = 15.0) -> int:
    """The log end once the last stable offset caught up with it (transaction markers are written
    a few ms after commit/abort returns)."""
    admin = AdminClient({"bootstrap.servers": kafka["bootstrap.servers"]})
    tp = TopicPartition(topic, 0)
    deadline = time.monotonic() + timeout_s
    while True:
        ends = [
            admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level)[tp].result().offset
            for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED)
        ]
        if ends[0] == ends[1] or time.monotonic() > deadline:
            assert ends[0] == ends[1], f"last stable offset {ends[0]} never reached the log end {ends[1]}"
            return int(ends[1])
        time.sleep(0.05)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with connect_session() as session:
        yield session


@pytest.fixture(scope="module")
def gapped(kafka_config: dict[str, Any]) -> GappedTopic:
    """One partition: 5 plain, a committed transaction of 4, 3 plain, a committed transaction of 3,
    an aborted transaction of 3, 2 plain: markers at 9, 16 and 20, aborted records at 17-19."""
    return make_gapped(kafka_config, f"reader_bounds_{uuid.uuid4().hex[:8]}", 1)


def make_gapped(kafka_config: dict[str, Any], topic: str, partitions: int) -> GappedTopic:
    """A new topic of ``partitions`` partitions whose partition 0 has the layout of ``gapped``."""
    demo_data.create_topic(kafka_config, topic, partitions)
    recorder, aborted = Recorder(), Recorder()
    plain = make_producer(kafka_config)
    txn = make_producer(kafka_config, **{"transactional.id": f"txn-{topic}"})
    txn.init_transactions(30)
    produce_records(plain, topic, "plain-a", 5, recorder)
    for tag, count, after in (("txn-a", 4, 3), ("txn-b", 3, 0)):
        txn.begin_transaction()
        produce_records(txn, topic, tag, count, recorder)
        txn.commit_transaction(30)
        stable_end(kafka_config, topic)  # the marker lands before the next records (it is written async)
        produce_records(plain, topic, f"plain-after-{tag}", after, recorder)
    txn.begin_transaction()
    produce_records(txn, topic, "aborted", 3, aborted)  # flushed first: abort purges what is unsent
    txn.abort_transaction(30)
    stable_end(kafka_config, topic)  # the abort marker is written before the next records
    produce_records(plain, topic, "tail", 2, recorder)
    assert recorder.errors == aborted.errors == []
    log_end = stable_end(kafka_config, topic)
    markers = tuple(sorted(set(range(log_end)) - set(recorder.delivered) - set(aborted.delivered)))
    return GappedTopic(topic, dict(recorder.delivered), tuple(sorted(aborted.delivered)), markers, log_end)


def read(spark: Any, kafka: dict[str, Any], topic: str, start: int, end: int) -> list[tuple[int, bytes]]:
    rows = read_ranges(spark, kafka, [OffsetRange(topic, 0, start, end)]).collect()
    assert {(r.topic, r.partition) for r in rows} <= {(topic, 0)}
    return sorted((r.offset, bytes(r.value)) for r in rows)


def test_the_topic_has_commit_and_abort_markers_and_aborted_records(gapped):
    # The layout the cases rely on.
    assert len(gapped.committed) == 17
    assert gapped.aborted == (17, 18, 19)
    assert gapped.markers == (9, 16, 20)
    assert gapped.log_end == 23


Case = Callable[[GappedTopic], tuple[int, int]]
first, second, abort = (lambda g: g.markers[0]), (lambda g: g.markers[1]), (lambda g: g.markers[2])
CASES: dict[str, Case] = {
    "whole-log": lambda g: (0, g.log_end),
    "start-at-marker": lambda g: (first(g), g.log_end),
    "end-at-marker": lambda g: (0, first(g)),
    "end-just-after-a-commit-marker": lambda g: (0, first(g) + 1),
    "start-and-end-at-markers": lambda g: (first(g), second(g)),
    "exactly-the-marker": lambda g: (first(g), first(g) + 1),
    "just-before-gap-to-just-after": lambda g: (first(g) - 1, first(g) + 2),
    "end-just-before-gap": lambda g: (0, first(g) - 1),
    "start-just-after-gap": lambda g: (first(g) + 1, g.log_end),
    "inside-a-transaction": lambda g: (first(g) - 3, first(g) - 1),
    "spanning-both-commit-markers": lambda g: (first(g) - 1, second(g) + 1),
    "end-inside-the-aborted-records": lambda g: (0, g.aborted[1]),
    "end-on-the-last-aborted-record": lambda g: (0, g.aborted[-1] + 1),
    "end-on-the-abort-marker": lambda g: (0, abort(g)),
    "end-just-after-the-abort-marker": lambda g: (0, abort(g) + 1),
    "only-aborted-records": lambda g: (g.aborted[0], g.aborted[-1] + 1),
    "only-aborted-records-and-their-marker": lambda g: (g.aborted[0], abort(g) + 1),
    "start-inside-the-aborted-records": lambda g: (g.aborted[1], g.log_end),
    "one-offset-holding-a-record": lambda g: (3, 4),
    "last-record-only": lambda g: (g.log_end - 1, g.log_end),
    "empty-at-marker": lambda g: (first(g), first(g)),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_read_returns_exactly_the_committed_records_in_range(spark, kafka_config, gapped, case):
    start, end = case(gapped)
    began = time.monotonic()
    assert read(spark, kafka_config, gapped.topic, start, end) == gapped.truth(start, end), (start, end)
    # Done by position: a range ending on a marker or aborted records never waits out the poll timeout.
    assert time.monotonic() - began < 30


def test_consecutive_ranges_split_at_markers_cover_the_log_once(spark, kafka_config, gapped):
    # Chained runs: each ends where the next starts, so every record is read exactly once.
    cuts = [0, first(gapped), first(gapped) + 1, second(gapped), gapped.aborted[1], abort(gapped), gapped.log_end]
    pieces = [read(spark, kafka_config, gapped.topic, a, b) for a, b in itertools.pairwise(cuts)]
    assert [rec for piece in pieces for rec in piece] == gapped.truth(0, gapped.log_end)


def test_many_small_ranges_in_one_read_are_exact_and_grouped_into_few_tasks(spark, kafka_config, unique_name):
    """40 partitions x 5 records: one task each by Spark's default, two here (coalesce)."""
    demo_data.create_topic(kafka_config, unique_name, 40)
    recorders = {p: Recorder() for p in range(40)}
    producer = make_producer(kafka_config)
    for p, rec in recorders.items():
        for i in range(5):
            producer.produce(unique_name, f"p{p}-{i}".encode(), partition=p, on_delivery=rec)
    producer.flush(30)
    truth = sorted((p, o, v) for p, rec in recorders.items() for o, v in rec.delivered.items())
    assert len(truth) == 200
    records = read_ranges(spark, kafka_config, [OffsetRange(unique_name, p, 0, 5) for p in range(40)])
    rows = records.withColumn("task", F.spark_partition_id()).collect()
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in rows) == truth
    assert len({r.task for r in rows}) == 2


def test_a_start_deleted_after_planning_is_the_products_data_loss_error(spark, kafka_config, unique_name):
    """Real delete_records below a planned start: Spark's source fails at once, and the job's
    translation names the topic, the partition and the lost offsets; what is left reads exactly."""
    demo_data.create_topic(kafka_config, unique_name, 1)
    recorder = Recorder()
    produce_records(make_producer(kafka_config), unique_name, "r", 100, recorder)
    assert not recorder.errors and sorted(recorder.delivered) == list(range(100))
    admin = AdminClient({"bootstrap.servers": kafka_config["bootstrap.servers"]})
    (deleted,) = admin.delete_records([TopicPartition(unique_name, 0, 30)]).values()
    assert deleted.result().low_watermark == 30

    planned = [OffsetRange(unique_name, 0, 10, 100)]
    began = time.monotonic()
    with pytest.raises(Exception) as failed:
        read_ranges(spark, kafka_config, planned).collect()
    assert time.monotonic() - began < 30  # the broker's answer, not a timeout
    lost = data_loss(failed.value, kafka_config, planned)
    assert isinstance(lost, DataLossError), failed.value
    assert f"{unique_name}[0]: offsets [10, 30) of the planned range [10, 100) are no longer in Kafka" in str(lost)
    assert "allow_data_loss=true" in str(lost)
    assert data_loss(RuntimeError("java.lang.OutOfMemoryError: Java heap space"), kafka_config, planned) is None

    assert read(spark, kafka_config, unique_name, 30, 100) == [(o, recorder.delivered[o]) for o in range(30, 100)]


def test_a_transaction_open_at_the_snapshot_is_read_by_the_next_run_once_committed(spark, kafka_config, unique_name):
    """The planning snapshot ends at the last stable offset: the read of that snapshot completes at
    once with the committed records only; after the commit the next snapshot's range has the rest."""
    demo_data.create_topic(kafka_config, unique_name, 1)
    recorder = Recorder()
    produce_records(make_producer(kafka_config), unique_name, "plain", 2, recorder)
    txn = make_producer(kafka_config, **{"transactional.id": f"open-{unique_name}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    produce_records(txn, unique_name, "open", 3, recorder)
    assert recorder.errors == [] and sorted(recorder.delivered) == [0, 1, 2, 3, 4]
    spec = orders_spec(unique_name, unique_name)

    (before,) = take_snapshot(kafka_config, spec, [unique_name])
    assert before.log_end == 2  # the last stable offset, not the high watermark (5)
    began = time.monotonic()
    assert read(spark, kafka_config, unique_name, 0, before.log_end) == [(o, recorder.delivered[o]) for o in (0, 1)]
    assert time.monotonic() - began < 30  # never waits on the open transaction

    txn.commit_transaction(30)
    stable_end(kafka_config, unique_name)
    (after,) = take_snapshot(kafka_config, spec, [unique_name])
    assert after.log_end == 6  # the three records and the commit marker
    rest = read(spark, kafka_config, unique_name, before.log_end, after.log_end)
    assert rest == [(o, recorder.delivered[o]) for o in (2, 3, 4)]


@pytest.mark.parametrize("launcher", ["connect", "submit"])
def test_records_deleted_after_planning_stop_the_stage_with_the_products_data_loss_error(
    kafka_config, engine, unique_name, launcher, monkeypatch
):
    """The run's own job on both launchers (their Spark exceptions differ): real delete_records
    between planning and the read; the stage fails with DataLossError naming the lost offsets and
    nothing is committed."""
    from reprocess.core.runs import RunRequest
    from reprocess.runner.start import snapshot_and_migrate
    from reprocess.spark.connect import CLIENT_MARKS
    from tests.support.helpers import ledger, stage_over_connect, start_spark_stage

    spec = orders_spec(unique_name, unique_name)
    demo_data.create_topic(kafka_config, unique_name, 1)
    produced = demo_data.produce(kafka_config, unique_name, 1, demo_data.order_events(60, 2, seed=5), malformed=())
    end = max(offset for _, offset, *_ in produced.messages) + 1
    assert end > 30
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-1")
    assert [(r.start, r.end) for r in plan.ranges] == [(0, end)]
    admin = AdminClient({"bootstrap.servers": kafka_config["bootstrap.servers"]})
    (deleted,) = admin.delete_records([TopicPartition(unique_name, 0, 30)]).values()
    assert deleted.result().low_watermark == 30

    says = f"{unique_name}[0]: offsets [0, 30) of the planned range [0, {end}) are no longer in Kafka"
    if launcher == "connect":
        with pytest.raises(DataLossError, match=re.escape(says)):
            stage_over_connect(spec, plan.run_id)
    else:
        for mark in CLIENT_MARKS:  # this module's Connect session is open: its marks must not reach the driver
            monkeypatch.delenv(mark, raising=False)
        job = start_spark_stage(spec, plan.run_id)
        output, _ = job.communicate(timeout=300)
        assert job.returncode != 0
        assert f"reprocess.core.errors.DataLossError: {says}" in output, output[-3000:]
    assert ledger(engine, spec) == {}  # nothing committed
