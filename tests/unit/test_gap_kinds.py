"""Each kind of reconciliation gap gets its own label wherever gaps show, read from the verdict's detail."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from reprocess.cli.output import calendar_text
from reprocess.core.ranges import OffsetRange
from reprocess.operations.coverage import CalendarCell
from reprocess.operations.gap_kinds import KINDS, gap_kinds
from reprocess.operations.reconcile import KeyCheck, PartitionVerdict, ValueCheck

R = OffsetRange("t", 0, 0, 100)
VALUES = ValueCheck(3, (("status", 3), ("amount", 1)), (5, 9), (('{"id": "a"}', "status", "x", "y"),))
VERDICTS = {
    "uncovered": PartitionVerdict(R, [(10, 20)], [(0, 10)]),
    "missing": PartitionVerdict(R, [], [(0, 100)], KeyCheck(5, missing=2, missing_examples=("a", "b"))),
    "older": PartitionVerdict(R, [], [(0, 100)], KeyCheck(5, stale=1, stale_examples=("a",))),
    "dead letters unrecorded": PartitionVerdict(R, [], [(0, 100)], KeyCheck(5, dead=2, dead_unrecorded=1)),
    "spec version": PartitionVerdict(R, [], [(0, 100)], stale="4 rows from spec v1; current is v2: run a backfill"),
    "values differ": PartitionVerdict(R, [], [(0, 100)], values=VALUES),
    "values incomplete": PartitionVerdict(R, [], [(0, 100)], incomplete=2),
}


@pytest.mark.parametrize("label", [label for label, _ in KINDS])
def test_each_gap_kind_of_a_verdict_detail_is_labelled_alone(label: str) -> None:
    verdict = VERDICTS[label]
    assert not verdict.ok
    assert gap_kinds(verdict.detail()) == (label,)


def test_ok_detail_has_no_kind_and_a_verdict_with_two_gaps_has_both() -> None:
    assert gap_kinds(PartitionVerdict(R, [], [(0, 100)], KeyCheck(5)).detail()) == ()
    both = PartitionVerdict(R, [], [(0, 100)], KeyCheck(5, missing=1, missing_examples=("a",)), values=VALUES)
    assert gap_kinds(both.detail()) == ("missing", "values differ")


def _cell(verdict: str, detail: str, gap_detail: str | None = None) -> CalendarCell:
    day = datetime(2026, 11, 1, tzinfo=UTC)
    return CalendarCell(
        window_start=day, window_end=day, topic="t", partition=0, kafka_start=0, kafka_end=100, verdict=verdict,
        detail=detail, checked_at=day, heal_conf=None, healed_by="r1" if gap_detail else None, gap_detail=gap_detail,
        gap_checked_at=day if gap_detail else None,
    )  # fmt: skip


def test_calendar_and_status_label_the_value_gap_as_its_own_kind() -> None:
    value_gap = VERDICTS["values differ"].detail()
    cells = [_cell("gap", value_gap), _cell("gap", VERDICTS["missing"].detail()), _cell("healed", "ok", value_gap)]
    assert [c.kinds for c in cells] == [("values differ",), ("missing",), ("values differ",)]
    assert cells[0].as_dict()["kinds"] == ["values differ"]
    text = calendar_text(cells)
    assert "1 gap, 0 healed" not in text
    assert "2 gap (missing 1, values differ 1)" in text, text
    assert "gap [values differ]: 3 rows differ from what their newest record derives (status ×3, amount ×1)" in text
    assert "healed by r1 (values differ gap found" in text, text
