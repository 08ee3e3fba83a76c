"""Bounded Kafka batch reads as a PySpark Python data source (``format("kafka-range")``).

The JVM ``spark-sql-kafka-0-10`` connector cannot be installed from the package registries, so
this source reads each ``[start, end)`` with confluent-kafka inside the executors and yields
Arrow record batches. It keeps Spark's option names (``startingOffsets``, ``endingOffsets``,
``failOnDataLoss``, ``maxRecordsPerPartition``, ``kafka.*``) and output schema, so a cluster
with the JVM connector can swap readers without touching the rest of the job.

Reads stop by offset, never by count: transaction markers and aborted records take offsets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from reprocess.core.errors import DataLossError, ReadError, SpecError
from reprocess.core.ranges import EARLIEST, LATEST, OffsetRange, parse_offsets_json, split_range

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import Message

log = logging.getLogger(__name__)

SCHEMA: Final = (
    "key binary, value binary, topic string not null, partition int not null, "
    "offset bigint not null, timestamp timestamp, timestampType int"
)
DEFAULT_FETCH_BATCH: Final = 10_000


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Spark options (all strings) parsed once on the driver."""

    kafka: dict[str, str]
    starting: dict[tuple[str, int], int]
    ending: dict[tuple[str, int], int]
    fail_on_data_loss: bool
    max_records_per_partition: int | None
    stall_timeout_s: float
    fetch_batch: int

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ReadOptions:
        opts = {k.lower(): v for k, v in options.items()}
        kafka = {k[len("kafka.") :]: v for k, v in options.items() if k.lower().startswith("kafka.")}
        if "bootstrap.servers" not in kafka:
            raise SpecError("kafka-range source needs option 'kafka.bootstrap.servers'")
        for name in ("startingoffsets", "endingoffsets"):
            if name not in opts:
                raise SpecError(f'kafka-range source needs option \'{name}\' as JSON like {{"topic": {{"0": 42}}}}')
        starting = parse_offsets_json(opts["startingoffsets"], "startingOffsets")
        ending = parse_offsets_json(opts["endingoffsets"], "endingOffsets")
        if set(starting) != set(ending):
            raise SpecError(
                f"startingOffsets and endingOffsets must name the same partitions: "
                f"{sorted(map(str, starting))} vs {sorted(map(str, ending))}"
            )
        max_per = opts.get("maxrecordsperpartition")
        return cls(
            kafka=kafka,
            starting={(tp.topic, tp.partition): o for tp, o in starting.items()},
            ending={(tp.topic, tp.partition): o for tp, o in ending.items()},
            fail_on_data_loss=opts.get("failondataloss", "true").lower() != "false",
            max_records_per_partition=int(max_per) if max_per else None,
            stall_timeout_s=float(opts.get("stalltimeoutseconds", "30")),
            fetch_batch=int(opts.get("fetchbatch", DEFAULT_FETCH_BATCH)),
        )


@dataclass(frozen=True)
class KafkaRangePartition(InputPartition):
    """One Spark input partition: a plain, picklable offset range."""

    topic: str
    partition: int
    start: int
    end: int


def resolve_ranges(opts: ReadOptions) -> list[OffsetRange]:
    """Turn -2/-1 (earliest/latest) into concrete offsets with one watermark query each."""
    symbolic = [tp for tp in opts.starting if opts.starting[tp] < 0 or opts.ending[tp] < 0]
    watermarks: dict[tuple[str, int], tuple[int, int]] = {}
    if symbolic:
        from confluent_kafka import TopicPartition

        from reprocess.kafka.clients import make_consumer

        consumer = make_consumer(opts.kafka)
        try:
            for topic, part in symbolic:
                watermarks[(topic, part)] = consumer.get_watermark_offsets(
                    TopicPartition(topic, part), timeout=10, cached=False
                )
        finally:
            consumer.close()
    ranges = []
    for tp, start in sorted(opts.starting.items()):
        end = opts.ending[tp]
        if start == LATEST:
            raise SpecError(f"startingOffsets for {tp[0]}[{tp[1]}] cannot be -1 (latest) in a batch read")
        if end == EARLIEST:
            raise SpecError(f"endingOffsets for {tp[0]}[{tp[1]}] cannot be -2 (earliest)")
        low, high = watermarks.get(tp, (0, 0))
        ranges.append(OffsetRange(tp[0], tp[1], low if start == EARLIEST else start, high if end == LATEST else end))
    return ranges


def read_range(
    kafka: Mapping[str, Any],
    r: OffsetRange,
    *,
    fetch_batch: int = DEFAULT_FETCH_BATCH,
    stall_timeout_s: float = 30.0,
) -> Iterator[pa.RecordBatch]:
    """Yield exactly the records of ``[r.start, r.end)`` as Arrow batches.

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
    cols: dict[str, list[Any]] = {n: [] for n in ("key", "value", "offset", "timestamp", "timestampType")}
    position, last_progress, read = r.start, time.monotonic(), 0
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        while position < r.end:
            wanted = min(fetch_batch - len(cols["offset"]), r.end - position)  # batches never exceed fetch_batch
            messages = consumer.consume(num_messages=wanted, timeout=1.0)
            reached = position
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
                            "allow_data_loss=true to record them and go on from the log start."
                        )
                    raise ReadError(f"{r}: read failed at offset {position}: {err.str()}") from KafkaException(err)
                offset = _offset_of(msg, r)
                reached = max(reached, offset + 1)
                if offset >= r.end:
                    continue
                ts_type, ts = msg.timestamp()
                cols["key"].append(msg.key())
                cols["value"].append(msg.value())
                cols["offset"].append(offset)
                cols["timestamp"].append(ts * 1000 if ts_type else None)
                cols["timestampType"].append(ts_type - 1 if ts_type else None)
            # The client's position also moves over markers and aborted records it never delivers.
            (current,) = consumer.position([TopicPartition(r.topic, r.partition)])
            reached = max(reached, current.offset)
            if reached > position:
                position, last_progress = reached, time.monotonic()
            elif time.monotonic() - last_progress > stall_timeout_s:
                raise ReadError(
                    f"{r}: the read position stayed at offset {position} for {stall_timeout_s:.0f}s, below the "
                    f"planned end {r.end}. The log may have been truncated, or an open transaction holds back "
                    "the last stable offset; re-plan the run."
                )
            if len(cols["offset"]) >= fetch_batch or (position >= r.end and cols["offset"]):
                read += len(cols["offset"])
                yield arrow_batch(r, cols)
                cols = {n: [] for n in cols}
    finally:
        consumer.close()
    log.info("read topic=%s partition=%d offsets=[%d,%d) records=%d", r.topic, r.partition, r.start, r.end, read)


def _offset_of(msg: Message, r: OffsetRange) -> int:
    """A fetched record's (or EOF event's) offset, which the client always sets for them."""
    offset = msg.offset()
    if offset is None:
        raise ReadError(f"{r}: the client returned a message without an offset: {msg.error()}")
    return offset


_ARROW_SCHEMA: pa.Schema | None = None


def arrow_batch(r: OffsetRange, cols: dict[str, list[Any]]) -> pa.RecordBatch:
    """Records of one partition (columns key, value, offset, timestamp, timestampType) in SCHEMA."""
    import pyarrow as pa

    global _ARROW_SCHEMA
    if _ARROW_SCHEMA is None:
        fields: list[pa.Field[Any]] = [
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("topic", pa.string(), nullable=False),
            pa.field("partition", pa.int32(), nullable=False),
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("timestamp", pa.timestamp("us", tz="UTC")),
            pa.field("timestampType", pa.int32()),
        ]
        _ARROW_SCHEMA = pa.schema(fields)
    n = len(cols["offset"])
    return pa.RecordBatch.from_arrays(
        [
            pa.array(cols["key"], pa.binary()),
            pa.array(cols["value"], pa.binary()),
            pa.array([r.topic] * n, pa.string()),
            pa.array([r.partition] * n, pa.int32()),
            pa.array(cols["offset"], pa.int64()),
            pa.array(cols["timestamp"], pa.timestamp("us", tz="UTC")),
            pa.array(cols["timestampType"], pa.int32()),
        ],
        schema=_ARROW_SCHEMA,
    )


class KafkaRangeDataSource(DataSource):
    """``spark.read.format("kafka-range")``: a bounded read of Kafka offset ranges."""

    @classmethod
    def name(cls) -> str:
        return "kafka-range"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return KafkaRangeReader(ReadOptions.from_options(self.options))


class KafkaRangeReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.ranges = resolve_ranges(opts)

    def partitions(self) -> list[KafkaRangePartition]:
        pieces: list[OffsetRange] = []
        for r in self.ranges:
            width = self.opts.max_records_per_partition
            pieces.extend(split_range(r, width) if width else ([r] if r.width else []))
        return [KafkaRangePartition(p.topic, p.partition, p.start, p.end) for p in pieces]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaRangePartition)
        r = OffsetRange(partition.topic, partition.partition, partition.start, partition.end)
        yield from read_range(
            self.opts.kafka, r, fetch_batch=self.opts.fetch_batch, stall_timeout_s=self.opts.stall_timeout_s
        )


def reader_options(
    kafka: Mapping[str, Any], ranges: list[OffsetRange], max_per_partition: int | None
) -> dict[str, str]:
    """The option map a job passes to ``spark.read.format("kafka-range")``."""
    from reprocess.core.ranges import offsets_json

    opts = {f"kafka.{k}": str(v) for k, v in kafka.items()}
    opts["startingOffsets"] = offsets_json(ranges, "start")
    opts["endingOffsets"] = offsets_json(ranges, "end")
    if max_per_partition:
        opts["maxRecordsPerPartition"] = str(max_per_partition)
    return opts
