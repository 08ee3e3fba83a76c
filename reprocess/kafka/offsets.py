"""What Kafka holds at a moment, asked of the broker: a snapshot of each partition's log start,
log end and the consumer group's committed offset, and the first offset at or after a time.

The only Kafka I/O of planning; resolving a run request against a snapshot is pure
(:mod:`reprocess.core.resolve`). confluent-kafka is imported where it is used, as in
:mod:`reprocess.kafka.clients`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Final

from reprocess.core.errors import OffsetLookupError
from reprocess.core.ranges import PartitionSnapshot, TopicPartition
from reprocess.core.spec import PipelineSpec
from reprocess.kafka.clients import committed_offsets, make_admin, make_consumer

log = logging.getLogger(__name__)


def take_snapshot(
    kafka: Mapping[str, Any], spec: PipelineSpec, topics: Iterable[str], *, with_group: bool = True
) -> list[PartitionSnapshot]:
    """Log start, log end (read_committed: the last stable offset), high watermark (read_uncommitted)
    and the group's committed offset per partition (none without ``with_group``: a caller comparing
    the log with the ledger saves the group's consumer). The gap between the two ends is an open
    transaction's hold: the pipeline reads nothing past the LSO until it commits or aborts."""
    from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicCollection
    from confluent_kafka import TopicPartition as KTP
    from confluent_kafka.admin import OffsetSpec

    admin = make_admin(kafka)
    # DescribeTopics, not a metadata request naming the topic: that one makes a broker with
    # auto.create.topics.enable (Kafka's default) create a misspelt topic, and the run "succeeds".
    partitions: list[KTP] = []
    ids: dict[str, str] = {}
    for topic, fut in admin.describe_topics(TopicCollection(list(dict.fromkeys(topics))), request_timeout=15).items():
        try:
            described = fut.result()
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise OffsetLookupError(f"{spec.name}: describing topic {topic!r} failed: {error.str()}",
                                        pipeline=spec.name, topic=topic) from exc  # fmt: skip
            raise OffsetLookupError(
                f"{spec.name}: topic {topic!r} is unknown to the broker ({error.str()}); fix: create the topic, or "
                "correct the spec's `topics` (the broker is kafka_default's bootstrap.servers)",
                pipeline=spec.name,
                topic=topic,
            ) from exc
        partitions.extend(KTP(topic, p.id) for p in sorted(described.partitions, key=lambda p: p.id))
        ids[topic] = str(described.topic_id)  # a topic deleted and re-created under its name gets a new id

    def offsets(spec_factory: Any, isolation: Any = IsolationLevel.READ_COMMITTED) -> dict[tuple[str, int], int]:
        futures = admin.list_offsets(
            {tp: spec_factory() for tp in partitions},
            isolation_level=isolation,
            request_timeout=30,
        )
        out = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = fut.result().offset
            except KafkaException as exc:
                raise OffsetLookupError(
                    f"{spec.name}: list_offsets failed for {tp.topic}[{tp.partition}]: {exc}",
                    pipeline=spec.name,
                    topic=tp.topic,
                    partition=tp.partition,
                ) from exc
        return out

    starts, ends = offsets(OffsetSpec.earliest), offsets(OffsetSpec.latest)
    highs = offsets(OffsetSpec.latest, IsolationLevel.READ_UNCOMMITTED)
    committed: dict[tuple[str, int], int] = {}
    if with_group:
        try:
            committed = committed_offsets(kafka, spec.consumer_group, [(tp.topic, tp.partition) for tp in partitions])
        except KafkaException as exc:
            log.warning("pipeline=%s group=%s committed offsets unavailable: %s", spec.name, spec.consumer_group, exc)
    return [
        PartitionSnapshot(tp.topic, tp.partition, starts[(tp.topic, tp.partition)], ends[(tp.topic, tp.partition)],
                          committed.get((tp.topic, tp.partition)), ids.get(tp.topic), highs[(tp.topic, tp.partition)])
        for tp in partitions
    ]  # fmt: skip


PROBE_FETCH_WAIT_MS: Final = 10


def offsets_for_time(
    kafka: Mapping[str, Any], snapshots: list[PartitionSnapshot], ts_ms: int
) -> dict[TopicPartition, int]:
    """The first offset whose record timestamp is >= ``ts_ms``, per partition.

    The broker's answer (``offsets_for_times``) is checked against the records' own
    timestamps and replaced by a binary search over them when inconsistent. Apache Kafka
    itself answers wrong when records carry producer-set timestamps older than their
    transaction's commit: the commit marker holds the broker's clock, so its offset (no
    record) is the answer for every earlier time (tests/integration/operations/test_plan_by_time.py). A
    partition with no record at or after the time resolves to its log end.
    """
    from confluent_kafka import TopicPartition as KTP

    # Each check and search step reads ONE record at a fresh position: a broker that holds a
    # fetch for its max wait (500 ms by default) would cost that per step.
    consumer = make_consumer({**kafka, "fetch.wait.max.ms": PROBE_FETCH_WAIT_MS})
    try:
        answers = consumer.offsets_for_times([KTP(s.topic, s.partition, ts_ms) for s in snapshots], timeout=15)
        broker = {TopicPartition(a.topic, a.partition): a.offset for a in answers}
        answer = {s.tp: s.log_end if broker.get(s.tp, -1) < 0 else broker[s.tp] for s in snapshots}
        # Every partition's two probes (the answer's record, the one before it) in two passes, not two per partition.
        at = _records_at_or_after(consumer, [(s, answer[s.tp]) for s in snapshots if answer[s.tp] < s.log_end])
        before = _records_at_or_after(
            consumer, [(s, answer[s.tp] - 1) for s in snapshots if answer[s.tp] > s.log_start]
        )
        out = {}
        for s in snapshots:
            if _consistent(s, answer[s.tp], ts_ms, at.get(s.tp), before.get(s.tp)):
                out[s.tp] = answer[s.tp]
            else:
                out[s.tp] = _search(consumer, s, ts_ms)
                log.info("offset for time %d on %s: broker said %d, records say %d", ts_ms, s.tp, answer[s.tp],
                         out[s.tp])  # fmt: skip
        return out
    finally:
        consumer.close()


def first_unread_timestamps(
    kafka: Mapping[str, Any], snapshots: list[PartitionSnapshot], positions: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """The timestamp (ms) of the first committed record at or after each partition's position (the
    log start when it has none): a pipeline's oldest unread record. A partition read to its end has none."""
    consumer = make_consumer({**kafka, "fetch.wait.max.ms": PROBE_FETCH_WAIT_MS})
    try:
        stamps = {s.tp: _first_timestamp_at(consumer, s, positions.get(s.tp, s.log_start)) for s in snapshots}
    finally:
        consumer.close()
    return {tp: ts for tp, ts in stamps.items() if ts is not None and ts >= 0}


def _record_at_or_after(consumer: Any, s: PartitionSnapshot, offset: int) -> tuple[int, int] | None:
    """(offset, timestamp ms) of the first record at or after ``offset`` below the log end."""
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition as KTP

    if offset >= s.log_end:
        return None
    where = dict[str, Any](topic=s.topic, partition=s.partition)
    consumer.assign([KTP(s.topic, s.partition, offset)])
    for _ in range(20):
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                return None
            raise OffsetLookupError(f"{s.tp}: reading offset {offset} failed: {msg.error().str()}", **where)
        return (msg.offset(), msg.timestamp()[1]) if msg.offset() < s.log_end else None
    raise OffsetLookupError(f"{s.tp}: no record returned at offset {offset} within 20s", **where)


def _first_timestamp_at(consumer: Any, s: PartitionSnapshot, offset: int) -> int | None:
    rec = _record_at_or_after(consumer, s, max(offset, s.log_start))
    return rec[1] if rec else None


def _records_at_or_after(
    consumer: Any, wanted: list[tuple[PartitionSnapshot, int]]
) -> dict[TopicPartition, tuple[int, int] | None]:
    """:func:`_record_at_or_after` of many partitions at once: one assignment, each partition at its
    own offset, polled until each has given its first record or its end (then it is unassigned), so a
    1,000-partition topic's probes cost a few fetches, not 1,000 in a row. Twenty seconds without any
    partition answering is an error, as for one."""
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition as KTP

    out: dict[TopicPartition, tuple[int, int] | None] = {s.tp: None for s, offset in wanted if offset >= s.log_end}
    pending = {s.tp: (s, offset) for s, offset in wanted if offset < s.log_end}
    if not pending:
        return out
    consumer.assign([KTP(s.topic, s.partition, offset) for s, offset in pending.values()])
    quiet = 0
    while pending:
        messages = consumer.consume(num_messages=len(pending), timeout=1.0)
        quiet = 0 if messages else quiet + 1
        if quiet >= 20:
            s, offset = next(iter(pending.values()))
            raise OffsetLookupError(
                f"{s.tp}: no record returned at offset {offset} within 20s ({len(pending)} partitions waiting)",
                topic=s.topic, partition=s.partition,
            )  # fmt: skip
        for msg in messages:
            tp = TopicPartition(msg.topic(), msg.partition())
            if tp not in pending:
                continue  # a partition answered already: the rest of its fetch
            s, offset = pending.pop(tp)
            consumer.incremental_unassign([KTP(s.topic, s.partition)])
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise OffsetLookupError(f"{s.tp}: reading offset {offset} failed: {msg.error().str()}",
                                            topic=s.topic, partition=s.partition)  # fmt: skip
                out[tp] = None
            else:
                out[tp] = (msg.offset(), msg.timestamp()[1]) if msg.offset() < s.log_end else None
    consumer.unassign()
    return out


def _consistent(
    s: PartitionSnapshot, answer: int, ts_ms: int, at: tuple[int, int] | None, before: tuple[int, int] | None
) -> bool:
    """The answer is right if its record (``at``: the first at or after it) is at/after the time and the
    one before is not (``before``: the first record at or after ``answer - 1``)."""
    if answer < s.log_end and (at is None or at[1] < ts_ms):
        return False
    if answer <= s.log_start:
        return True
    return before is None or before[0] >= answer or before[1] < ts_ms


def _search(consumer: Any, s: PartitionSnapshot, ts_ms: int) -> int:
    """Binary search for the first offset whose record timestamp is >= ts_ms."""
    low, high = s.log_start, s.log_end  # answer in [low, high]
    while low < high:
        mid = (low + high) // 2
        rec = _record_at_or_after(consumer, s, mid)
        if rec is None or rec[1] >= ts_ms:
            high = mid
        else:
            low = rec[0] + 1
    return low
