"""A bounded read of one Kafka offset range with confluent-kafka, for checks that run without Spark.

Every run reads through Spark's own Kafka source (``reprocess.spark.read``). The rebuild's
verification (``reprocess.operations.rebuild_verify``) runs in the commit task, where no
Spark session is, and reads the rebuilt ranges again on its own: a second reader, so the check
does not share the first one's mistakes.

Reads stop by offset, never by count: transaction markers and aborted records take offsets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from reprocess.core.errors import DataLossError, ReadError
from reprocess.core.ranges import OffsetRange

if TYPE_CHECKING:
    from confluent_kafka import Message

log = logging.getLogger(__name__)


def read_range(kafka: Mapping[str, Any], r: OffsetRange, *, stall_timeout_s: float = 30.0) -> Iterator[list[Message]]:
    """Yield exactly the committed records of ``[r.start, r.end)``, one list per fetch (so a caller
    holds one fetch in memory, whatever the range's size), as the client's messages (key, value,
    headers and timestamp, so each format reads the parts its spec maps).

    The range is done when the consumer's POSITION reaches ``end``, never judged from the last
    delivered record: on Apache Kafka a range may end in a transaction marker or in aborted
    records that read_committed never delivers, and the consumer's position (or its EOF, at the
    last stable offset) moves past them without a record. Records at or past ``end`` are dropped.
    A position that stops below ``end`` for ``stall_timeout_s`` is raised, never treated as the
    end: the plan promised those offsets.

    Raises
    ------
    DataLossError
        ``start`` is below the log start (the broker answers offset-out-of-range).
    ReadError
        The partition stalled below ``end`` or the broker reported an error.
    """
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    from reprocess.kafka.clients import make_consumer

    if r.start >= r.end:
        return
    consumer = make_consumer(kafka)
    position, last_progress, read = r.start, time.monotonic(), 0
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        while position < r.end:
            messages = consumer.consume(num_messages=min(10_000, r.end - position), timeout=1.0)
            reached = position
            fetched: list[Message] = []
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        # The fetch position at the last stable offset: past trailing markers too.
                        reached = max(reached, _offset_of(msg, r))
                        continue
                    if err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                        raise DataLossError(
                            f"{r}: the broker says offset {position} is out of range ({err.str()}); "
                            "the start is below the log start (deleted or compacted segment). Nothing of this "
                            "range was committed. Plan a new run: planning names the records lost and takes "
                            "allow_data_loss=true to record them and go on from the log start.",
                            **_where(r),
                        )
                    raise ReadError(
                        f"{r}: read failed at offset {position}: {err.str()}", **_where(r)
                    ) from KafkaException(err)
                offset = _offset_of(msg, r)
                reached = max(reached, offset + 1)
                if offset < r.end:
                    fetched.append(msg)
            if fetched:
                read += len(fetched)
                yield fetched
            # The client's position also moves over markers and aborted records it never delivers.
            (current,) = consumer.position([TopicPartition(r.topic, r.partition)])
            reached = max(reached, current.offset)
            if reached > position:
                position, last_progress = reached, time.monotonic()
            elif time.monotonic() - last_progress > stall_timeout_s:
                raise ReadError(
                    f"{r}: the read position stayed at offset {position} for {stall_timeout_s:.0f}s, below the "
                    f"planned end {r.end}. The log may have been truncated, or an open transaction holds back "
                    "the last stable offset; re-plan the run.",
                    **_where(r),
                )
    finally:
        consumer.close()
    log.info("read topic=%s partition=%d offsets=[%d,%d) records=%d", r.topic, r.partition, r.start, r.end, read)


def _offset_of(msg: Message, r: OffsetRange) -> int:
    """A fetched record's (or EOF event's) offset, which the client always sets for them."""
    offset = msg.offset()
    if offset is None:
        raise ReadError(f"{r}: the client returned a message without an offset: {msg.error()}", **_where(r))
    return offset


def _where(r: OffsetRange) -> dict[str, Any]:
    """An error's attributes for the range it was reading."""
    return {"topic": r.topic, "partition": r.partition, "offsets": range(r.start, r.end)}
