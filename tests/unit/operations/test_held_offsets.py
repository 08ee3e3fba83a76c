"""The verdict and the texts of a partition whose last stable offset an open transaction holds."""

from __future__ import annotations

from datetime import UTC, datetime

from reprocess.checks import coverage
from reprocess.checks.verdict import partition_verdict
from reprocess.core.ranges import OffsetRange
from reprocess.operations.coverage import PartitionCoverage

WINDOW = OffsetRange("t", 0, 0, 40)
HELD = OffsetRange("t", 0, 40, 48)  # [LSO, HW)


def test_a_window_reaching_a_held_lso_is_not_yet_stable_unless_it_has_a_gap_a_backfill_closes():
    assert partition_verdict(WINDOW, {}, committed=[(0, 40)]).verdict == "ok"
    held = partition_verdict(WINDOW, {}, committed=[(0, 40)], unstable=HELD)
    assert (held.verdict, held.ok, held.gap) == ("not yet stable", False, False)
    assert held.detail().startswith("not yet stable: an open transaction holds the last stable offset at 40 below "
                                    "the high watermark 48")  # fmt: skip
    gap = {coverage.CHECK: coverage.Coverage(((0, 30),), ((30, 40),))}
    assert partition_verdict(WINDOW, gap, unstable=HELD).verdict == "gap"


def _coverage(log_end: int, high_watermark: int | None) -> PartitionCoverage:
    return PartitionCoverage(
        pipeline="p", topic="t", partition=0, log_start=0, ledger=log_end, log_end=log_end, ledger_run=None,
        verdict=None, verdict_window=None, verdict_healed_by=None, snapshot_at=None, unread_since=None, islands=(),
        lost=(), high_watermark=high_watermark, held_since=datetime(2026, 11, 28, 13, 0, tzinfo=UTC),
    )  # fmt: skip


def test_held_offsets_are_the_high_watermark_above_the_lso_and_say_since_when_with_lag_zero():
    held = _coverage(40, 48)
    assert (held.lag, held.unstable) == (0, 8)
    assert held.held_text() == (
        "t[0] held by an open transaction since 2026-11-28T13:00:00+00:00: 8 offsets between the last stable offset "
        "40 and the high watermark 48 stay unread until its producer commits or aborts (the broker aborts it after "
        "its transaction.timeout.ms)"
    )
    assert _coverage(40, 40).held_text() is None and _coverage(40, None).unstable == 0
