"""The older-slice replay's range (bench.slices): the first half of each partition, in each peer's form."""

from __future__ import annotations

import json

from bench.slices import flink_offsets, older_slice, spark_offsets


def test_older_slice_is_the_first_half_of_each_partition_rounded_down() -> None:
    assert older_slice({0: 250_001, 1: 0, 2: 1, 3: 10}) == {0: 125_000, 1: 0, 2: 0, 3: 5}


def test_older_slice_ends_in_spark_and_flink_form_name_the_same_offsets() -> None:
    ends = older_slice({2: 9, 0: 4, 1: 7})
    assert json.loads(spark_offsets("orders", ends)) == {"orders": {"0": 2, "1": 3, "2": 4}}
    parsed = dict(tuple(int(x.split(":")[1]) for x in part.split(",")) for part in flink_offsets(ends).split(";"))
    assert parsed == ends
