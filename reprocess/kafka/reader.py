"""Bounded reads of many small Kafka offset ranges with confluent-kafka, many partitions per consumer.

A run reads through Spark's own Kafka source (``reprocess.spark.read``), except many small ranges,
which its tasks read here (``reprocess.spark.grouped_read``).

Reads stop by offset, never by count: transaction markers and aborted records take offsets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from reprocess.core.errors import DataLossError, ReadError
from reprocess.core.ranges import OffsetRange

if TYPE_CHECKING:
    from confluent_kafka import Message

log = logging.getLogger(__name__)


def read_many(
    kafka: Mapping[str, Any], ranges: Sequence[OffsetRange], *, stall_timeout_s: float = 30.0
) -> Iterator[list[Message]]:
    """Yield exactly the committed records of every ``[start, end)`` of ``ranges`` (one per topic
    partition) through ONE consumer assigned to all of them, one list per fetch (so a caller holds
    one fetch in memory, whatever the ranges' size), as the client's messages (key, value, headers
    and timestamp, so each format reads the parts its spec maps). One consumer fetches many
    partitions in each request: a consumer per partition pays a connection and the topic's
    metadata per partition (docs/performance.md, many partitions).

    A range is done when the consumer's POSITION reaches its ``end``, never judged from the last
    delivered record: on Apache Kafka a range may end in a transaction marker or in aborted
    records that read_committed never delivers, and the consumer's position (or its EOF, at the
    last stable offset) moves past them without a record. Records at or past ``end`` are dropped,
    and a finished range's partition is unassigned. A read whose positions all stay put below
    their ends for ``stall_timeout_s`` is raised, never treated as the end: the plan promised
    those offsets.

    Raises
    ------
    DataLossError
        A ``start`` is below the log start (the broker answers offset-out-of-range).
    ReadError
        A partition stalled below its ``end`` or the broker reported an error.
    """
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    from reprocess.kafka.clients import make_consumer

    todo = {(r.topic, r.partition): r for r in ranges if r.start < r.end}
    if not todo:
        return
    consumer = make_consumer(kafka)
    position = {tp: r.start for tp, r in todo.items()}
    last_progress, read = time.monotonic(), 0
    try:
        consumer.assign([TopicPartition(t, p, r.start) for (t, p), r in todo.items()])
        while todo:
            left = sum(r.end - position[tp] for tp, r in todo.items())
            messages = consumer.consume(num_messages=min(10_000, left), timeout=1.0)
            reached = dict(position)
            fetched: list[Message] = []
            for msg in messages:
                tp = (msg.topic() or "", msg.partition() or 0)
                r = todo.get(tp)
                if r is None:  # a partition already done: nothing of it is wanted any more
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        # The fetch position at the last stable offset: past trailing markers too.
                        reached[tp] = max(reached[tp], _offset_of(msg, r))
                        continue
                    if err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                        raise DataLossError(
                            f"{r}: the broker says offset {position[tp]} is out of range ({err.str()}); "
                            "the start is below the log start (deleted or compacted segment). Nothing of this "
                            "range was committed. Plan a new run: planning names the records lost and takes "
                            "allow_data_loss=true to record them and go on from the log start.",
                            **_where(r),
                        )
                    raise ReadError(
                        f"{r}: read failed at offset {position[tp]}: {err.str()}", **_where(r)
                    ) from KafkaException(err)
                offset = _offset_of(msg, r)
                reached[tp] = max(reached[tp], offset + 1)
                if offset < r.end:
                    fetched.append(msg)
            if fetched:
                read += len(fetched)
                yield fetched
            # The client's position also moves over markers and aborted records it never delivers.
            for current in consumer.position([TopicPartition(t, p) for t, p in todo]):
                tp = (current.topic, current.partition)
                reached[tp] = max(reached[tp], current.offset)
            if any(reached[tp] > position[tp] for tp in todo):
                last_progress = time.monotonic()
            position = reached
            done = [tp for tp, r in todo.items() if position[tp] >= r.end]
            if done:
                consumer.incremental_unassign([TopicPartition(t, p) for t, p in done])
                for tp in done:
                    del todo[tp]
            if todo and time.monotonic() - last_progress > stall_timeout_s:
                r = min(todo.values())
                raise ReadError(
                    f"{r}: the read position stayed at offset {position[(r.topic, r.partition)]} for "
                    f"{stall_timeout_s:.0f}s, below the planned end {r.end}. The log may have been truncated, or an "
                    "open transaction holds back the last stable offset; re-plan the run.",
                    **_where(r),
                )
    finally:
        consumer.close()
    log.info("read ranges=%d records=%d", len(ranges), read)


def _offset_of(msg: Message, r: OffsetRange) -> int:
    """A fetched record's (or EOF event's) offset, which the client always sets for them."""
    offset = msg.offset()
    if offset is None:
        raise ReadError(f"{r}: the client returned a message without an offset: {msg.error()}", **_where(r))
    return offset


def _where(r: OffsetRange) -> dict[str, Any]:
    """An error's attributes for the range it was reading."""
    return {"topic": r.topic, "partition": r.partition, "offsets": range(r.start, r.end)}
