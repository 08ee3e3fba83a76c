"""Reconciliation's checks: one module each in ``reprocess/checks``, registered once; a verdict's gap
kinds are the kinds of the checks that found something, kept as values (never read back out of the
detail's prose); each check's detail and heal range are the ones reconciliation gave before the checks
had a folder (the expected texts and ranges below were printed by that code)."""

from __future__ import annotations

import pkgutil
from datetime import UTC, datetime
from typing import Any

import pytest

import reprocess.checks
from reprocess.checks import (
    coverage,
    dead_letters,
    missing_keys,
    older_rows,
    spec_version,
    values_differ,
    values_incomplete,
)
from reprocess.checks.registry import CHECKS, KINDS
from reprocess.checks.verdict import partition_verdict
from reprocess.cli.output import calendar_text
from reprocess.core.ranges import OffsetRange
from reprocess.operations.coverage import CalendarCell
from reprocess.operations.reconcile import heal_conf

R = OffsetRange("t", 0, 0, 100)
VALUES = values_differ.ValueCheck(3, (("status", 3), ("amount", 1)), (5, 9), (('{"id": "a"}', "status", "x", "y"),))
INCOMPLETE = (
    " values incomplete: the connector left them out and no record or stored row held them, so the target holds NULL "
    "(reprocess.incomplete_values); set REPLICA IDENTITY FULL on the source table and have the connector re-snapshot it"
)
DIFFER = (
    '3 rows differ from what their newest record derives (status ×3, amount ×1); e.g. {"id": "a"} status: '
    'stored "x" vs derived "y"'
)
KEYS = missing_keys.KeyRows
# kind -> (the check's result alone, the detail reconciliation wrote, heal [start, end) without and with
# "status" as a column an event may leave out)
ALONE: dict[str, tuple[dict[Any, Any], str, tuple[int, int], tuple[int, int]]] = {
    "uncovered": (
        {coverage.CHECK: coverage.Coverage(((0, 10), (20, 30)), ((10, 20), (30, 40)))},
        "uncovered offsets [10, 20), [30, 40)",
        (10, 40),
        (10, 40),
    ),
    "missing": (
        {missing_keys.CHECK: KEYS(5, missing=2, missing_examples=("a", "b"))},
        "2 keys missing from the target (e.g. a, b)",
        (0, 100),
        (0, 100),
    ),
    "older": (
        {older_rows.CHECK: KEYS(5, stale=1, stale_examples=("a",))},
        "stale: 1 keys whose target row is older than their newest record (e.g. a)",
        (0, 100),
        (0, 100),
    ),
    "dead letters unrecorded": (
        {dead_letters.CHECK: dead_letters.DeadRows(2, 1)},
        "1 invalid records not in the dead letters",
        (0, 100),
        (0, 100),
    ),
    "spec version": (
        {spec_version.CHECK: "4 rows from spec v1; current is v2: run a backfill"},
        "4 rows from spec v1; current is v2: run a backfill",
        (0, 100),
        (0, 100),
    ),
    "values differ": ({values_differ.CHECK: VALUES}, DIFFER, (5, 9), (0, 9)),
    "values incomplete": ({values_incomplete.CHECK: 2}, "2" + INCOMPLETE, (0, 100), (0, 100)),
}
# two kinds at once: (results, kinds, detail, heal without / with a left-out "status")
COVERED = coverage.Coverage(((0, 30), (40, 100)), ((30, 40),))
TOGETHER = [
    (
        {missing_keys.CHECK: KEYS(5, missing=1, missing_examples=("a",)), values_differ.CHECK: VALUES},
        ("missing", "values differ"),
        "1 keys missing from the target (e.g. a); " + DIFFER,
        (0, 100),
        (0, 100),
    ),
    (
        {coverage.CHECK: COVERED, values_differ.CHECK: VALUES},
        ("uncovered", "values differ"),
        "uncovered offsets [30, 40); " + DIFFER,
        (5, 40),
        (0, 40),
    ),
    (
        {values_incomplete.CHECK: 1, values_differ.CHECK: VALUES},
        ("values differ", "values incomplete"),
        DIFFER + "; 1" + INCOMPLETE,
        (5, 9),
        (0, 9),
    ),
    (
        {coverage.CHECK: COVERED, values_incomplete.CHECK: 1},
        ("uncovered", "values incomplete"),
        "uncovered offsets [30, 40); 1" + INCOMPLETE,
        (30, 40),
        (30, 40),
    ),
]
WINDOW = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC)


def _heal(results: dict[Any, Any], left_out: tuple[str, ...]) -> tuple[int, int]:
    conf = heal_conf([partition_verdict(R, results, left_out=left_out)], *WINDOW)
    return int(conf["start_value"].split(": ")[-1].rstrip("}")), int(conf["end_value"].split(": ")[-1].rstrip("}"))


def test_every_module_of_the_checks_folder_is_one_registered_check_with_a_kind_of_its_own() -> None:
    modules = {m.name for m in pkgutil.iter_modules(reprocess.checks.__path__)} - {"base", "registry", "verdict"}
    registered = {type(c).__module__.rsplit(".", 1)[1] for c in CHECKS}
    assert registered == modules
    assert len(KINDS) == len(set(KINDS)) == len(CHECKS) == len(ALONE)
    assert list(ALONE) == list(KINDS)  # the order a detail lists them in


@pytest.mark.parametrize("kind", list(ALONE))
def test_each_check_found_alone_is_its_kind_as_a_value_with_the_detail_and_heal_it_had(kind: str) -> None:
    results, detail, heal, heal_left_out = ALONE[kind]
    verdict = partition_verdict(R, results)
    assert (verdict.verdict, verdict.kinds, verdict.detail()) == ("gap", (kind,), detail)
    assert (_heal(results, ()), _heal(results, ("status",))) == (heal, heal_left_out)


@pytest.mark.parametrize("case", range(len(TOGETHER)))
def test_two_kinds_found_together_keep_the_detail_and_the_heal_they_had(case: int) -> None:
    results, kinds, detail, heal, heal_left_out = TOGETHER[case]
    verdict = partition_verdict(R, results)
    assert (verdict.kinds, verdict.detail()) == (kinds, detail)
    assert (_heal(results, ()), _heal(results, ("status",))) == (heal, heal_left_out)


def test_a_window_found_fine_or_not_yet_read_has_no_kind_and_says_what_it_accounted_for() -> None:
    ok = partition_verdict(R, {}, keys=5, dead=3)
    assert (ok.verdict, ok.kinds, ok.detail()) == ("ok", (), "5 keys, 3 dead letters, all accounted for")
    unread = partition_verdict(R, {}, keys=5, dead=3, unread=OffsetRange("t", 0, 100, 150))
    assert (unread.verdict, unread.kinds) == ("not yet stable", ())
    assert unread.detail().startswith("not yet stable: not read yet: the ledger is at 100, below the window's end 150")
    held = partition_verdict(R, {coverage.CHECK: COVERED}, unstable=OffsetRange("t", 0, 100, 120))
    assert (held.verdict, held.kinds, held.detail()) == ("gap", ("uncovered",), "uncovered offsets [30, 40)")


def _cell(verdict: str, detail: str, kinds: tuple[str, ...], gap_detail: str | None = None) -> CalendarCell:
    day = WINDOW[0]
    return CalendarCell(
        window_start=day, window_end=day, topic="t", partition=0, kafka_start=0, kafka_end=100, verdict=verdict,
        detail=detail, checked_at=day, heal_conf=None, healed_by="r1" if gap_detail else None, gap_detail=gap_detail,
        gap_checked_at=day if gap_detail else None, kinds=kinds,
    )  # fmt: skip


def test_calendar_and_status_label_gaps_by_their_stored_kinds_not_by_their_prose() -> None:
    # the stored kinds say "values differ" although this detail's words name a missing key: the kinds win
    cells = [
        _cell("gap", "2 keys missing from the target", ("values differ",)),
        _cell("gap", ALONE["missing"][1], ("missing",)),
        _cell("healed", "ok", ("values differ",), DIFFER),
    ]
    assert cells[0].as_dict()["kinds"] == ["values differ"]
    text = calendar_text(cells)
    assert "2 gap (missing 1, values differ 1)" in text, text
    assert "gap [values differ]: 2 keys missing from the target" in text
    assert "healed by r1 (values differ gap found" in text, text
