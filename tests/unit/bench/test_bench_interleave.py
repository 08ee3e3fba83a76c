"""Ceiling A and the warm product timed A B A B A B (bench.interleave), and the Ratios lines of issue 58
items 3 and 4 that come from them (bench.figures)."""

from __future__ import annotations

from bench.context import Result
from bench.figures import Measured, figures
from bench.interleave import interleave

SAME = {"rows": 90, "checksum": 7}


def _result(case: str, seconds: float, **detail: object) -> Result:
    return Result(case, 1_000, seconds, detail={**SAME, **detail})


def test_interleave_alternates_the_two_cases_and_takes_the_ratio_of_their_medians() -> None:
    order: list[str] = []

    def case(name: str, seconds: list[float]):  # type: ignore[no-untyped-def]
        def timed(i: int) -> Result:
            order.append(f"{name}{i}")
            return _result(name, seconds[i])

        return timed

    ab = interleave(case("a", [4.0, 9.0, 5.0]), case("b", [8.0, 10.0, 7.5]))
    assert order == ["a0", "b0", "a1", "b1", "a2", "b2"]
    assert ab.ratio == 5.0 / 8.0  # an outlier in either series (9.0, 10.0) moves neither median


def _measured(ab_seconds: tuple[list[float], list[float]] | None) -> Measured:
    prod = _result("product", 8.0, records_read=1_000)
    ceil_a = _result("ceiling A", 4.0)
    ab = None
    if ab_seconds is not None:
        a, b = ab_seconds
        ab = interleave(lambda i: _result("A", a[i]), lambda i: _result("B", b[i]))
    return Measured(
        n=1_000, ceil_a=ceil_a, ceil_b=ceil_a, base=ceil_a, default="spark-connect", results=[], failed=[],
        peers={}, conc={}, by_launcher={"spark-connect": (prod, _result("1k", 1.0))},
        cold={"spark-connect": _result("cold", 12.0)}, settling={"spark-connect": [0.3, 0.1]}, by_format={},
        scaled={}, partitions=0, peers_ran=False, ab=ab, second={"spark-connect": _result("second", 10.0)},
    )  # fmt: skip


def test_ratios_print_the_interleaved_medians_and_the_runs_after_a_start_with_the_issues_words() -> None:
    ratios, checks = figures(_measured(([4.0, 6.0, 5.0], [10.0, 8.0, 9.0])))
    [product] = [v for k, v in ratios.items() if k.startswith("product ÷ ceiling A")]
    assert product == 5.0 / 9.0
    [spread] = [v for k, v in ratios.items() if "the spread" in k]
    assert (
        spread
        == "ceiling A 4.0 / 6.0 / 5.0 s (median 5.0), product 10.0 / 8.0 / 9.0 s (median 9.0); pair by pair 0.40-0.75"
    )
    [first] = [v for k, v in ratios.items() if "first run after the server's start ÷ warm" in k]
    assert first == 12.0 / 9.0  # warm: the interleaved product runs' median
    [second] = [v for k, v in ratios.items() if "second run after the server's start ÷ ceiling A" in k]
    assert second == 5.0 / 10.0
    assert checks["interleaved ceiling A and product runs: target == ceiling A target"]


def test_an_interleaved_run_with_another_target_fails_its_check() -> None:
    m = _measured(([4.0, 6.0, 5.0], [10.0, 8.0, 9.0]))
    assert m.ab is not None
    m.ab.b[1].detail["checksum"] = 8
    assert not figures(m)[1]["interleaved ceiling A and product runs: target == ceiling A target"]


def test_without_interleaved_runs_the_ratio_is_the_single_runs() -> None:
    ratios, _ = figures(_measured(None))
    assert ratios["product ÷ ceiling A (records/s)"] == 4.0 / 8.0
    [first] = [v for k, v in ratios.items() if "first run after the server's start ÷ warm" in k]
    assert first == 12.0 / 8.0
