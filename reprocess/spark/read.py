"""A run's bounded Kafka read as a DataFrame (Spark's own Kafka source), and its data-loss
failure turned back into the product's :class:`~reprocess.core.errors.DataLossError`.

Spark's source makes one task per topic partition. Many small ranges (a redrive, a
reconciliation window of a wide topic, the hourly increment of a topic of many partitions)
would cost a task each, so they are grouped into a few tasks (``coalesce``: a narrow dependency,
still one scan); wide ranges keep one task each. A task reads its partitions one after the
other, and each costs round trips to the broker (a new consumer's connection and metadata, then
a fetch and two offset lookups: ~20 ms here, mostly waiting), so a task takes at most
``PARTITIONS_PER_TASK`` of them and the tasks wait side by side. Many small ranges without headers
are read by those tasks through one consumer each instead (``reprocess.spark.grouped_read``).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from reprocess.core.errors import DataLossError
from reprocess.core.ranges import OffsetRange
from reprocess.kafka.spark_source import read_options
from reprocess.spark.grouped_read import many_small, read_grouped

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

DATA_LOSS_CONDITION: Final = "KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE"
# How Spark words it (the condition's text, in both launchers' exceptions).
_DATA_LOSS_TEXT: Final = re.compile(r"Could not read records in offset \[(\d+), (\d+)\) for topic partition (\S+)")
# The grouped read's own error (reprocess.kafka.reader), in a Python task's traceback.
_READER_DATA_LOSS: Final = re.compile(r"reprocess\.core\.errors\.DataLossError: (.+)")
RECORDS_PER_TASK: Final = 200_000
PARTITIONS_PER_TASK: Final = 125
MIN_TASKS: Final = 2


def read_tasks(ranges: Sequence[OffsetRange]) -> int:
    """How many tasks read ``ranges``: one per ``RECORDS_PER_TASK`` offsets or ``PARTITIONS_PER_TASK``
    ranges, whichever makes more, at least ``MIN_TASKS``, at most one per range (what the source makes).

    Examples
    --------
    >>> read_tasks([OffsetRange("t", p, 0, 20) for p in range(200)])
    2
    >>> read_tasks([OffsetRange("t", p, 0, 21) for p in range(1000)])
    8
    >>> read_tasks([OffsetRange("t", p, 0, 250_000) for p in range(4)])
    4
    >>> read_tasks([OffsetRange("t", 0, 0, 5)])
    1
    """
    by_records = math.ceil(sum(r.width for r in ranges) / RECORDS_PER_TASK)
    by_partitions = math.ceil(len(ranges) / PARTITIONS_PER_TASK)
    return min(len(ranges), max(MIN_TASKS, by_records, by_partitions))


def read_ranges(
    spark: SparkSession, kafka: Mapping[str, Any], ranges: Sequence[OffsetRange], *, headers: bool = True
) -> DataFrame:
    """Exactly the committed records of ``ranges`` (at least one): ``key, value, topic, partition,
    offset, timestamp, timestampType`` and, with ``headers``, ``headers``."""
    if many_small(ranges, headers=headers):
        # One consumer reads a task's partitions together, so the tasks follow the records alone: a
        # task's Python worker costs more than its reading (1,000 x 21 records, read alone, load 21:
        # 8 tasks 6.0-11.0 s, 2 tasks 1.8-8.8 s, 1 task 0.9-2.3 s).
        return read_grouped(spark, kafka, ranges, max(1, math.ceil(sum(r.width for r in ranges) / RECORDS_PER_TASK)))
    tasks = read_tasks(ranges)
    records = spark.read.format("kafka").options(**read_options(kafka, ranges, headers=headers)).load()
    return records.coalesce(tasks) if tasks < len(ranges) else records


def data_loss(exc: BaseException, kafka: Mapping[str, Any], ranges: Sequence[OffsetRange]) -> DataLossError | None:
    """The product's DataLossError for a read that Spark failed with ``KAFKA_DATA_LOSS``, else None.

    Spark names the whole range it could not read; the log start (asked now) says which part
    is gone. The error says the fix: nothing of the read was committed, and planning again
    names the lost records and takes ``allow_data_loss=true`` to record them.
    """
    reader = _READER_DATA_LOSS.search(str(exc))
    if reader is not None:  # the grouped read's error already names the range and the fix
        return DataLossError(reader.group(1).strip())
    condition = getattr(exc, "getCondition", lambda: None)()
    found = _DATA_LOSS_TEXT.search(str(exc))
    if found is None and condition != DATA_LOSS_CONDITION:
        return None
    names = {f"{r.topic}-{r.partition}": r for r in ranges}
    planned = names.get(found.group(3)) if found else None
    if planned is None:  # the condition without the text Spark always writes: say what Spark said
        return DataLossError(
            f"Spark's Kafka source lost records ({condition}): {str(exc).split('JVM stacktrace:')[0].strip()}. "
            "Nothing of this read was committed; plan the run again (allow_data_loss=true records a loss)."
        )
    assert found is not None
    start, end = int(found.group(1)), int(found.group(2))
    log_start, log_end = _watermarks(kafka, planned)
    where = f"{planned.topic}[{planned.partition}]"
    fix = (
        "Nothing of this read was committed. Plan the run again: planning names the records lost and takes "
        "allow_data_loss=true to record them and go on from the log start."
    )
    if log_start > start:
        return DataLossError(
            f"{where}: offsets [{start}, {min(log_start, end)}) of the planned range [{start}, {end}) are no longer "
            f"in Kafka (the log now starts at {log_start}: deleted or aged out after planning). {fix}"
        )
    return DataLossError(
        f"{where}: Spark's Kafka source could not read the planned range [{start}, {end}) although the log holds "
        f"[{log_start}, {log_end}): records inside it are missing (truncated log) or its end is above the last "
        f"stable offset. {fix}"
    )


def _watermarks(kafka: Mapping[str, Any], r: OffsetRange) -> tuple[int, int]:
    from confluent_kafka import TopicPartition

    from reprocess.kafka.clients import make_consumer

    consumer = make_consumer(kafka)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(r.topic, r.partition), timeout=15, cached=False)
    finally:
        consumer.close()
    return int(low), int(high)
