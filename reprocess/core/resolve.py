"""A run request resolved into offset ranges: pure, against a snapshot of the log
(:func:`reprocess.kafka.offsets.take_snapshot`), the ledger and the offsets of the request's
times, so every rule is unit-tested without services. Validation errors name the partition.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reprocess.core.errors import DataLossError, SpecError
from reprocess.core.ranges import OffsetRange, PartitionSnapshot, TopicPartition, parse_offsets_json
from reprocess.core.runs import EndMode, LostRange, RunRequest, StartMode
from reprocess.core.spec import PipelineSpec


def resolve(
    spec: PipelineSpec,
    request: RunRequest,
    snapshots: list[PartitionSnapshot],
    ledger: Mapping[TopicPartition, int],
    time_offsets: Mapping[str, Mapping[TopicPartition, int]] | None = None,
) -> tuple[list[OffsetRange], list[LostRange]]:
    """Resolve a request against a snapshot into ranges; validation errors name the partition.

    ``time_offsets`` holds the offsets for the request's ``start``/``end`` timestamps.
    """
    by_tp = {s.tp: s for s in snapshots}
    selected = [
        s for s in snapshots
        if (not request.topics or s.topic in request.topics)
        and (not request.partitions or s.partition in request.partitions)
    ]  # fmt: skip
    for topic in request.topics:
        if topic not in spec.topics:
            raise SpecError(
                f"{spec.name}: topic {topic!r} is not one of the pipeline's topics {list(spec.topics)}",
                pipeline=spec.name,
                topic=topic,
            )
    for p in request.partitions:
        if not any(s.partition == p for s in selected):
            raise SpecError(
                f"{spec.name}: partition {p} does not exist (topics have {sorted({s.partition for s in snapshots})})"
            )
    asked = (("start", request.start_mode, request.start_value), ("end", request.end_mode, request.end_value))
    explicit = {
        name: parse_offsets_json(value, f"{name}_value") for name, mode, value in asked if mode == "offsets" and value
    }
    for name, mapping in explicit.items():
        for tp in mapping:
            if tp not in by_tp:
                raise SpecError(
                    f"{spec.name}: {name}_value names {tp}, which is not a partition of the pipeline's topics"
                )
    if explicit:
        named = set().union(*(m.keys() for m in explicit.values()))
        selected = [s for s in selected if s.tp in named]
        if not selected:
            raise SpecError(
                f"{spec.name}: start/end offsets name {sorted(map(str, named))}, none of them among the "
                "selected topics/partitions; nothing would be read"
            )

    ranges, lost, gone = [], [], []
    for s in selected:
        start = _start(spec, request, s, ledger, explicit.get("start"), time_offsets)
        end = _end(spec, request, s, explicit.get("end"), time_offsets)
        where = dict[str, Any](pipeline=spec.name, topic=s.topic, partition=s.partition, offsets=range(start, end))
        if end > s.log_end:
            raise SpecError(f"{spec.name} {s.tp}: end {end} is beyond the log end {s.log_end}", **where)
        if start > end:
            raise SpecError(f"{spec.name} {s.tp}: start {start} is after end {end}", **where)
        # Only offsets the range asks for can be gone: an empty range (a plan that read nothing) whose
        # start retention has since passed loses nothing.
        if start < (first_kept := min(s.log_start, end)):
            gone.append(f"{s.tp}: start {start} < log start {s.log_start}; offsets [{start}, {first_kept}) are gone")
            lost.append(LostRange(s.topic, s.partition, start, first_kept))
            start = first_kept
        ranges.append(OffsetRange(s.topic, s.partition, start, end))
    if gone and not request.allow_data_loss:
        # Every partition's loss in one error: retention deletes on all partitions at once.
        raise DataLossError(
            f"{spec.name} {'; '.join(gone)} (deleted or compacted). Re-run with allow_data_loss=true to record "
            "the loss, or start at the log start.",
            pipeline=spec.name,
        )
    return ranges, lost


def _start(
    spec: PipelineSpec,
    request: RunRequest,
    s: PartitionSnapshot,
    ledger: Mapping[TopicPartition, int],
    explicit: Mapping[TopicPartition, int] | None,
    time_offsets: Mapping[str, Mapping[TopicPartition, int]] | None,
) -> int:
    mode = request.start_mode
    if mode is StartMode.EARLIEST:
        return s.log_start
    if mode is StartMode.OFFSETS:
        assert explicit is not None
        value = explicit.get(s.tp, -2)
        return s.log_start if value == -2 else s.log_end if value == -1 else value
    if mode is StartMode.TIMESTAMP:
        assert time_offsets is not None
        return time_offsets["start"][s.tp]
    if mode is StartMode.GROUP:
        return s.group_committed if s.group_committed is not None else s.log_start
    position = ledger.get(s.tp)
    if position is None:
        return s.log_start
    if position > s.log_end:
        raise SpecError(
            f"{spec.name} {s.tp}: the ledger says next offset {position}, beyond the log end {s.log_end}. "
            f"Was the topic deleted and re-created? Reset the position deliberately: `reprocess "
            f"reset {spec.name} --topic {s.topic} --partitions {s.partition} --to-earliest` shows the move (dry "
            f"run); add `--execute --reason '…'` to apply it, or trigger the {spec.dag_id('reset')} DAG.",
            pipeline=spec.name,
            topic=s.topic,
            partition=s.partition,
        )
    return position


def _end(
    spec: PipelineSpec,
    request: RunRequest,
    s: PartitionSnapshot,
    explicit: Mapping[TopicPartition, int] | None,
    time_offsets: Mapping[str, Mapping[TopicPartition, int]] | None,
) -> int:
    mode = request.end_mode
    if mode is EndMode.LATEST:
        return s.log_end
    if mode is EndMode.OFFSETS:
        assert explicit is not None
        value = explicit.get(s.tp, -1)
        return s.log_end if value == -1 else s.log_start if value == -2 else value
    if mode is EndMode.TIMESTAMP:
        assert time_offsets is not None
        return time_offsets["end"][s.tp]
    if s.group_committed is None:
        raise SpecError(f"{spec.name} {s.tp}: end_mode=group but group {spec.consumer_group!r} has no committed offset")
    return s.group_committed
