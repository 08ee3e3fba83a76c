"""Pure offset-range maths: Spark offset JSON and range validation (no services)."""

from __future__ import annotations

import pytest

from reprocess.core.errors import SpecError
from reprocess.core.ranges import (
    EARLIEST,
    LATEST,
    OffsetRange,
    TopicPartition,
    offsets_json,
    parse_offsets_json,
    ranges_to_rows,
)


def test_offsets_json_renders_sorted_partitions_per_topic():
    ranges = [OffsetRange("b", 0, 1, 2), OffsetRange("a", 1, 3, 9), OffsetRange("a", 0, 0, 4)]
    assert offsets_json(ranges, "start") == '{"a": {"0": 0, "1": 3}, "b": {"0": 1}}'
    assert offsets_json(ranges, "end") == '{"a": {"0": 4, "1": 9}, "b": {"0": 2}}'


@pytest.mark.parametrize("field", ["start", "end"])
def test_offsets_json_round_trips_through_parse_offsets_json(field):
    ranges = [OffsetRange("t", 1, 5, 9), OffsetRange("t", 0, 0, 3), OffsetRange("u", 4, 100, 100)]
    parsed = parse_offsets_json(offsets_json(ranges, field), "x")
    assert parsed == {r.tp: getattr(r, field) for r in ranges}


def test_parse_offsets_json_accepts_earliest_and_latest_markers():
    parsed = parse_offsets_json('{"t": {"0": -2, "1": -1, "2": 0}}', "startingOffsets")
    assert parsed == {TopicPartition("t", 0): EARLIEST, TopicPartition("t", 1): LATEST, TopicPartition("t", 2): 0}


@pytest.mark.parametrize(
    "text, message",
    [
        pytest.param("{", r"startingOffsets is not valid JSON", id="not-json"),
        pytest.param("", r"startingOffsets is not valid JSON", id="empty-string"),
        pytest.param("[1]", r"startingOffsets must be an object", id="list-not-object"),
        pytest.param("42", r"startingOffsets must be an object", id="number-not-object"),
        pytest.param('{"t": 5}', r"topic 't' must map partition → offset", id="topic-not-object"),
        pytest.param('{"t": {"a": 1}}', r"partition 'a' of topic 't' is not a number", id="partition-not-numeric"),
        pytest.param('{"t": {"-1": 1}}', r"partition '-1' of topic 't' is not a number", id="partition-negative"),
        pytest.param('{"t": {"0": -3}}', r"offset for t\[0\] must be an integer >= -2", id="offset-below-minus-2"),
        pytest.param('{"t": {"0": true}}', r"offset for t\[0\] must be an integer >= -2", id="bool-offset"),
        pytest.param('{"t": {"0": 1.5}}', r"offset for t\[0\] must be an integer >= -2", id="float-offset"),
        pytest.param('{"t": {"0": "7"}}', r"offset for t\[0\] must be an integer >= -2", id="string-offset"),
    ],
)
def test_malformed_offsets_json_is_refused_naming_the_option_and_the_reason(text, message):
    with pytest.raises(SpecError, match=message):
        parse_offsets_json(text, "startingOffsets")


def test_offset_range_refuses_start_after_end():
    with pytest.raises(SpecError, match=r"t\[0\]: invalid range \[5, 4\)") as refused:
        OffsetRange("t", 0, 5, 4)
    assert (refused.value.topic, refused.value.partition, refused.value.offsets) == ("t", 0, range(5, 4))


def test_offset_range_refuses_a_negative_start():
    with pytest.raises(SpecError, match="invalid range"):
        OffsetRange("t", 0, -2, 4)


def test_empty_offset_range_is_valid_and_has_zero_width():
    r = OffsetRange("t", 0, 7, 7)
    assert r.width == 0
    assert str(r) == "t[0] [7, 7)"


def test_ranges_become_sorted_rows_for_xcom_and_sql():
    ranges = [OffsetRange("t", 1, 5, 9), OffsetRange("t", 0, 0, 3)]
    rows = ranges_to_rows(ranges)
    assert rows == [
        {"topic": "t", "partition": 0, "start": 0, "end": 3},
        {"topic": "t", "partition": 1, "start": 5, "end": 9},
    ]


def test_consumer_requests_read_committed_and_never_auto_commits():
    from reprocess.kafka.clients import consumer_config

    conf = consumer_config({"bootstrap.servers": "x:1", "isolation.level": "read_uncommitted"})
    assert conf["isolation.level"] == "read_committed"
    assert conf["enable.auto.commit"] is False and conf["auto.offset.reset"] == "error"
