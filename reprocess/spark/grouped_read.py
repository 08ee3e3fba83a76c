"""Many small Kafka ranges read by a few Spark tasks, each through ONE consumer assigned to many partitions.

Spark's Kafka source opens a Java consumer per topic partition, and each new consumer connects and
fetches the whole topic's metadata: a read of 1,000 partitions x 21 records pays that 1,000 times
(quadratic in the partitions; docs/performance.md). Here each task reads its share of the ranges
with :func:`reprocess.kafka.reader.read_many`: one consumer whose fetches cover all its partitions,
exact ``[start, end)`` per partition by position, ``DataLossError`` below the log start, a stall
below an end raised. The rows have the columns of Spark's source without headers, so the decode
is the same.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from reprocess.core.ranges import OffsetRange

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

# Spark's source's columns (``includeHeaders=false``).
SCHEMA: Final = (
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, timestampType int"
)
# A read is "many small ranges" from Spark's consumer pool's size on (64: above it the pool drops
# consumers as it makes them) when its ranges hold this many offsets or fewer on average.
MIN_RANGES: Final = 64
MAX_MEAN_WIDTH: Final = 10_000


def many_small(ranges: Sequence[OffsetRange], *, headers: bool) -> bool:
    """Whether ``ranges`` are read here rather than by Spark's source (which reads headers).

    Examples
    --------
    >>> many_small([OffsetRange("t", p, 0, 21) for p in range(1000)], headers=False)
    True
    >>> many_small([OffsetRange("t", p, 0, 21) for p in range(1000)], headers=True)
    False
    >>> many_small([OffsetRange("t", p, 0, 250_000) for p in range(4)], headers=False)
    False
    """
    return not headers and len(ranges) >= MIN_RANGES and sum(r.width for r in ranges) <= MAX_MEAN_WIDTH * len(ranges)


@dataclass(frozen=True)
class GroupRead:
    """The ``mapInArrow`` function of the read: each input row's ``id`` names the group of ranges
    its task reads through one consumer."""

    kafka: Mapping[str, Any]
    groups: tuple[tuple[OffsetRange, ...], ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from reprocess.kafka.reader import read_many

        for batch in batches:
            for group in batch.column("id").to_pylist():  # spark.range's ids: never null
                for fetched in read_many(self.kafka, self.groups[int(group or 0)]):
                    yield _arrow(fetched)


def _arrow(messages: Sequence[Any]) -> pa.RecordBatch:
    """One fetch's records in :data:`SCHEMA` (librdkafka's timestamp type 1/2 is Spark's 0/1)."""
    import pyarrow as pa

    stamps = [m.timestamp() for m in messages]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([m.key() for m in messages], pa.binary()),
            pa.array([m.value() for m in messages], pa.binary()),
            pa.array([m.topic() for m in messages], pa.string()),
            pa.array([m.partition() for m in messages], pa.int32()),
            pa.array([m.offset() for m in messages], pa.int64()),
            pa.array([ts * 1000 if kind else None for kind, ts in stamps], pa.timestamp("us", tz="UTC")),
            pa.array([kind - 1 if kind else None for kind, _ in stamps], pa.int32()),
        ],
        names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"],
    )


def read_grouped(spark: SparkSession, kafka: Mapping[str, Any], ranges: Sequence[OffsetRange], tasks: int) -> DataFrame:
    """Exactly the committed records of ``ranges`` in ``tasks`` tasks, the ranges dealt round-robin."""
    ordered = sorted(ranges)
    groups = tuple(tuple(ordered[i::tasks]) for i in range(tasks))
    return spark.range(0, tasks, 1, tasks).mapInArrow(GroupRead(dict(kafka), groups), SCHEMA)
