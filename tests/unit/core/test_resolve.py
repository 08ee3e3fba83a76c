"""Resolving a run request against a Kafka snapshot into ranges (pure; no services)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from reprocess.core.errors import DataLossError, SpecError
from reprocess.core.ranges import OffsetRange, PartitionSnapshot, TopicPartition
from reprocess.core.resolve import resolve
from reprocess.core.runs import EndMode, LostRange, RunKind, RunRequest, StartMode
from reprocess.formats.specs import parse_spec

SPEC = parse_spec(
    {"name": "p", "topics": ["t", "u"], "key": ["id"], "target_table": "public.p",
     "columns": {"id": "text", "v": {"type": "bigint", "required": True}},
     "ordering": {"mode": "column", "column": "v"}}
)  # fmt: skip
# t[0]: retention moved the log start to 10, group at 40; t[1]: never consumed; u[0]: group at its log end.
SNAP = [
    PartitionSnapshot("t", 0, 10, 100, 40),
    PartitionSnapshot("t", 1, 0, 50, None),
    PartitionSnapshot("u", 0, 5, 30, 30),
]
T0, T1, U0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def req(
    start: StartMode = StartMode.EARLIEST,
    end: EndMode = EndMode.LATEST,
    start_value: str | None = None,
    end_value: str | None = None,
    **kw: Any,
) -> RunRequest:
    return RunRequest(RunKind.BACKFILL, start, end, start_value, end_value, **kw)


def spans(ranges: list[OffsetRange]) -> list[tuple[str, int, int, int]]:
    return [(r.topic, r.partition, r.start, r.end) for r in ranges]


def test_earliest_to_latest_covers_each_partition_from_log_start_to_log_end():
    ranges, lost = resolve(SPEC, req(), SNAP, {})
    assert spans(ranges) == [("t", 0, 10, 100), ("t", 1, 0, 50), ("u", 0, 5, 30)]
    assert lost == []


def test_topic_and_partition_filters_narrow_the_plan():
    ranges, _ = resolve(SPEC, req(topics=("t",), partitions=(1,)), SNAP, {})
    assert spans(ranges) == [("t", 1, 0, 50)]


def test_explicit_offsets_plan_only_the_named_partitions():
    asked = req(StartMode.OFFSETS, EndMode.OFFSETS, '{"t": {"1": 5}}', '{"t": {"1": 20}}')
    ranges, lost = resolve(SPEC, asked, SNAP, {})
    assert ranges == [OffsetRange("t", 1, 5, 20)]
    assert lost == []


def test_explicit_offsets_accept_earliest_and_latest_markers():
    asked = req(StartMode.OFFSETS, EndMode.OFFSETS, '{"t": {"0": -2, "1": -1}}', '{"t": {"0": -1, "1": -1}}')
    ranges, _ = resolve(SPEC, asked, SNAP, {})
    assert spans(ranges) == [("t", 0, 10, 100), ("t", 1, 50, 50)]


def test_explicit_start_with_latest_end_runs_to_the_log_end():
    ranges, _ = resolve(SPEC, req(StartMode.OFFSETS, start_value='{"u": {"0": 12}}'), SNAP, {})
    assert spans(ranges) == [("u", 0, 12, 30)]


def test_group_start_uses_committed_offsets_and_log_start_where_there_are_none():
    ranges, _ = resolve(SPEC, req(StartMode.GROUP), SNAP, {})
    assert spans(ranges) == [("t", 0, 40, 100), ("t", 1, 0, 50), ("u", 0, 30, 30)]


def test_group_end_stops_at_the_committed_offset():
    ranges, _ = resolve(SPEC, req(end=EndMode.GROUP, topics=("u",)), SNAP, {})
    assert spans(ranges) == [("u", 0, 5, 30)]


def test_group_end_without_a_committed_offset_is_refused():
    with pytest.raises(SpecError, match=r"p t\[1\]: end_mode=group but group 'reprocess-p' has no committed offset"):
        resolve(SPEC, req(end=EndMode.GROUP), SNAP, {})


def test_ledger_start_continues_where_the_last_committed_run_ended():
    ranges, lost = resolve(SPEC, RunRequest.incremental(), SNAP, {T0: 70, U0: 30})
    assert spans(ranges) == [("t", 0, 70, 100), ("t", 1, 0, 50), ("u", 0, 30, 30)]
    assert lost == []


def test_ledger_at_the_log_end_plans_an_empty_range():
    ranges, _ = resolve(SPEC, RunRequest.incremental(), SNAP, {T0: 100, T1: 50, U0: 30})
    assert all(r.width == 0 for r in ranges)


def test_ledger_beyond_log_end_means_the_topic_was_recreated():
    with pytest.raises(SpecError, match=r"t\[0\]: the ledger says next offset 101, beyond the log end 100.*re-created"):
        resolve(SPEC, RunRequest.incremental(), SNAP, {T0: 101})


def test_ledger_below_log_start_is_data_loss():
    with pytest.raises(
        DataLossError, match=re.escape("p t[0]: start 3 < log start 10; offsets [3, 10) are gone")
    ) as lost:
        resolve(SPEC, RunRequest.incremental(), SNAP, {T0: 3})
    assert lost.value.pipeline == "p"


def test_data_loss_on_several_partitions_names_every_lost_range_in_one_error():
    with pytest.raises(DataLossError) as lost:
        resolve(SPEC, RunRequest.incremental(), SNAP, {T0: 3, T1: 0, U0: 1})
    for fragment in ("t[0]: start 3 < log start 10; offsets [3, 10)", "u[0]: start 1 < log start 5; offsets [1, 5)"):
        assert fragment in str(lost.value)


def test_timestamp_modes_use_the_offsets_looked_up_for_the_times():
    times = {"start": {T0: 20, T1: 7, U0: 5}, "end": {T0: 60, T1: 7, U0: 30}}
    asked = req(StartMode.TIMESTAMP, EndMode.TIMESTAMP, "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z")
    ranges, _ = resolve(SPEC, asked, SNAP, {}, times)
    assert spans(ranges) == [("t", 0, 20, 60), ("t", 1, 7, 7), ("u", 0, 5, 30)]


def test_start_after_end_is_refused():
    asked = req(StartMode.OFFSETS, EndMode.OFFSETS, '{"t": {"0": 60}}', '{"t": {"0": 50}}')
    with pytest.raises(SpecError, match=re.escape("p t[0]: start 60 is after end 50")) as refused:
        resolve(SPEC, asked, SNAP, {})
    where = refused.value
    assert (where.pipeline, where.topic, where.partition, where.offsets) == ("p", "t", 0, range(60, 50))


def test_start_beyond_the_log_end_is_refused():
    with pytest.raises(SpecError, match=re.escape("p t[1]: start 51 is after end 50")):
        resolve(SPEC, req(StartMode.OFFSETS, start_value='{"t": {"1": 51}}'), SNAP, {})


def test_end_beyond_log_end_is_refused():
    with pytest.raises(SpecError, match=re.escape("p t[0]: end 101 is beyond the log end 100")):
        resolve(SPEC, req(end=EndMode.OFFSETS, end_value='{"t": {"0": 101}}'), SNAP, {})


def test_start_below_log_start_is_data_loss_unless_allowed():
    asked = req(StartMode.OFFSETS, start_value='{"t": {"0": 4}}')
    with pytest.raises(DataLossError) as caught:
        resolve(SPEC, asked, SNAP, {})
    message = str(caught.value)
    assert "t[0]" in message and "[4, 10)" in message and "allow_data_loss=true" in message

    allowed = req(StartMode.OFFSETS, start_value='{"t": {"0": 4}}', allow_data_loss=True)
    ranges, lost = resolve(SPEC, allowed, SNAP, {})
    assert ranges == [OffsetRange("t", 0, 10, 100)]
    assert lost == [LostRange("t", 0, 4, 10)]


def test_allowed_loss_of_a_range_entirely_below_log_start_records_it_all_and_plans_nothing():
    asked = req(StartMode.OFFSETS, EndMode.OFFSETS, '{"t": {"0": 2}}', '{"t": {"0": 6}}', allow_data_loss=True)
    ranges, lost = resolve(SPEC, asked, SNAP, {})
    assert [r.width for r in ranges] == [0]
    assert lost == [LostRange("t", 0, 2, 6)]


def test_an_empty_range_whose_start_retention_has_since_passed_reads_nothing_and_loses_nothing():
    """A plan that read nothing at offset 6, applied after retention moved the log start to 10:
    nothing was asked, so nothing is gone (not a DataLossError)."""
    asked = req(StartMode.OFFSETS, EndMode.OFFSETS, '{"t": {"0": 6}}', '{"t": {"0": 6}}')
    ranges, lost = resolve(SPEC, asked, SNAP, {})
    assert spans(ranges) == [("t", 0, 6, 6)]
    assert lost == []


def test_unknown_partition_is_refused():
    with pytest.raises(SpecError, match=r"partition 7 does not exist \(topics have \[0, 1\]\)"):
        resolve(SPEC, req(partitions=(7,)), SNAP, {})


def test_explicit_offsets_for_an_unknown_partition_are_refused():
    asked = req(StartMode.OFFSETS, start_value='{"t": {"9": 0}}')
    with pytest.raises(SpecError, match=re.escape("start_value names t[9], which is not a partition")):
        resolve(SPEC, asked, SNAP, {})


def test_topic_outside_the_spec_is_refused():
    with pytest.raises(SpecError, match="topic 'other' is not one of the pipeline's topics"):
        resolve(SPEC, req(topics=("other",)), SNAP, {})


def test_run_request_from_params_defaults_to_earliest_through_latest():
    request = RunRequest.from_params({})
    assert (request.kind, request.start_mode, request.end_mode) == (
        RunKind.BACKFILL,
        StartMode.EARLIEST,
        EndMode.LATEST,
    )
    assert not request.allow_data_loss and not request.dry_run


def test_run_request_from_params_parses_typed_values():
    request = RunRequest.from_params(
        {
            "start_mode": "offsets",
            "start_value": '{"t": {"0": 5}}',
            "end_mode": "timestamp",
            "end_value": "2026-11-01T00:00:00+01:00",
            "partitions": ["0", 1],
            "allow_data_loss": True,
        }
    )
    assert request.start_mode is StartMode.OFFSETS and request.end_mode is EndMode.TIMESTAMP
    assert request.partitions == (0, 1) and request.allow_data_loss


@pytest.mark.parametrize(
    "params, message",
    [
        pytest.param({"start_mode": "soon"}, r"param start_mode: 'soon' is not one of earliest, ", id="bad-start-mode"),
        pytest.param({"end_mode": "ledger"}, r"param end_mode: 'ledger' is not one of latest, ", id="bad-end-mode"),
        pytest.param({"start_mode": "offsets"}, "param start_value is required when start_mode is offsets", id="no-v"),
        pytest.param(
            {"end_mode": "offsets", "end_value": ""}, "param end_value is required when end_mode is offsets", id="empty"
        ),
        pytest.param({"start_mode": "offsets", "start_value": "{"}, "start_value is not valid JSON", id="bad-json"),
        pytest.param(
            {"start_mode": "timestamp", "start_value": "2026-11-01T00:00:00"}, "has no time zone", id="naive-time"
        ),
        pytest.param(
            {"end_mode": "timestamp", "end_value": "yesterday"}, "is not an RFC 3339 timestamp", id="not-a-time"
        ),
        pytest.param({"batch_size": -1}, "batch_size must be a positive integer", id="negative-batch-size"),
    ],
)
def test_run_request_validation_names_the_param(params, message):
    with pytest.raises(SpecError, match=message):
        RunRequest.from_params(params)
