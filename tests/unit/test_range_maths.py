"""Offset and range maths: splitting, Spark offset JSON, and request resolution (no services)."""

from __future__ import annotations

import pytest

from reprocess.errors import DataLossError, SpecError
from reprocess.plan import resolve
from reprocess.ranges import (
    OffsetRange,
    PartitionSnapshot,
    TopicPartition,
    offsets_json,
    parse_offsets_json,
    split_range,
)
from reprocess.runs import EndMode, RunKind, RunRequest, StartMode
from reprocess.spec import PipelineSpec

SPEC = PipelineSpec.from_mapping(
    {"name": "p", "topics": ["t"], "key": ["id"], "columns": {"id": "text"}, "target_table": "public.p"}
)
SNAP = [PartitionSnapshot("t", 0, 10, 100, 40), PartitionSnapshot("t", 1, 0, 50, None)]


def req(start=StartMode.EARLIEST, end=EndMode.LATEST, sv=None, ev=None, **kw) -> RunRequest:
    return RunRequest(RunKind.BACKFILL, start, end, sv, ev, **kw)


def test_split_range_covers_the_range_without_overlap():
    pieces = split_range(OffsetRange("t", 0, 3, 20), 7)
    assert [(p.start, p.end) for p in pieces] == [(3, 10), (10, 17), (17, 20)]


def test_offsets_json_round_trips():
    ranges = [OffsetRange("t", 1, 5, 9), OffsetRange("t", 0, 0, 3)]
    parsed = parse_offsets_json(offsets_json(ranges, "end"), "x")
    assert parsed == {TopicPartition("t", 0): 3, TopicPartition("t", 1): 9}


@pytest.mark.parametrize(
    "text, message",
    [("{", "not valid JSON"), ("[1]", "must be an object"), ('{"t": {"a": 1}}', "not a number"),
     ('{"t": {"0": -3}}', ">= -2"), ('{"t": {"0": true}}', ">= -2"), ('{"t": 5}', "partition → offset")],
)  # fmt: skip
def test_malformed_offset_json_is_refused_with_the_reason(text, message):
    with pytest.raises(SpecError, match=message):
        parse_offsets_json(text, "startingOffsets")


def test_range_with_start_after_end_is_refused():
    with pytest.raises(SpecError):
        OffsetRange("t", 0, 5, 4)


def test_earliest_to_latest_covers_each_log():
    ranges, lost = resolve(SPEC, req(), SNAP, {})
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 10, 100), (1, 0, 50)] and lost == []


def test_explicit_offsets_select_only_the_named_partitions():
    ranges, _ = resolve(SPEC, req(StartMode.OFFSETS, EndMode.OFFSETS, '{"t": {"1": 5}}', '{"t": {"1": 20}}'), SNAP, {})
    assert ranges == [OffsetRange("t", 1, 5, 20)]


def test_group_and_ledger_starts():
    group, _ = resolve(SPEC, req(StartMode.GROUP), SNAP, {})
    assert [r.start for r in group] == [40, 0]
    ledger, _ = resolve(SPEC, req(StartMode.LEDGER), SNAP, {TopicPartition("t", 0): 70})
    assert [r.start for r in ledger] == [70, 0]


def test_ledger_beyond_log_end_means_the_topic_was_recreated():
    with pytest.raises(SpecError, match="re-created"):
        resolve(SPEC, req(StartMode.LEDGER), SNAP, {TopicPartition("t", 0): 101})


def test_end_beyond_log_end_and_start_after_end_are_refused():
    with pytest.raises(SpecError, match="beyond the log end"):
        resolve(SPEC, req(end=EndMode.OFFSETS, ev='{"t": {"0": 101}}'), SNAP, {})
    with pytest.raises(SpecError, match="after end"):
        resolve(SPEC, req(StartMode.OFFSETS, EndMode.OFFSETS, '{"t": {"0": 60}}', '{"t": {"0": 50}}'), SNAP, {})


def test_start_below_log_start_is_data_loss_unless_allowed():
    asked = req(StartMode.OFFSETS, sv='{"t": {"0": 4}}')
    with pytest.raises(DataLossError, match=r"t\[0\].*\[4, 10\)"):
        resolve(SPEC, asked, SNAP, {})
    allowed = req(StartMode.OFFSETS, sv='{"t": {"0": 4}}', allow_data_loss=True)
    ranges, lost = resolve(SPEC, allowed, SNAP, {})
    assert ranges == [OffsetRange("t", 0, 10, 100)]
    assert [(x.partition, x.start, x.end) for x in lost] == [(0, 4, 10)]


def test_unknown_partition_and_topic_are_refused():
    with pytest.raises(SpecError, match="partition 7"):
        resolve(SPEC, req(partitions=(7,)), SNAP, {})
    with pytest.raises(SpecError, match="not one of the pipeline's topics"):
        resolve(SPEC, req(topics=("other",)), SNAP, {})


@pytest.mark.parametrize(
    "params, message",
    [({"start_mode": "soon"}, "start_mode"), ({"start_mode": "offsets"}, "start_value is required"),
     ({"start_mode": "timestamp", "start_value": "2026-11-01T00:00:00"}, "no time zone")],
)  # fmt: skip
def test_run_request_validation_names_the_param(params, message):
    with pytest.raises(SpecError, match=message):
        RunRequest.from_params(params)
