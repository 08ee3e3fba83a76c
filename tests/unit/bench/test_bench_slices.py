"""The older-slice replay's range (bench.slices) in each peer's form, and the Ratios line of rows wrong per case."""

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


def test_wrong_counts_line_names_each_case_in_order_and_a_dash_for_one_that_did_not_run() -> None:
    from bench.context import Result
    from bench.report import wrong_counts

    product = Result("product", 10, 1.0, detail={"wrong_after_older_slice": {"total": 0}})
    flink = Result("flink", 10, 1.0, detail={"wrong_after_older_slice": {"total": 1_500}})
    no_slice = Result("jdbc", 10, 1.0)
    assert wrong_counts([product, no_slice, None, flink], "wrong_after_older_slice") == (
        "**0** / **—** / **—** / **1,500**"
    )
