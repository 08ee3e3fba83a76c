"""An audit's verdict from its counts, and what a person reads of it (no services)."""

from __future__ import annotations

from reprocess.cli.audit import format_audit
from reprocess.operations.audit import AuditReport


def _report(**counts: int) -> AuditReport:
    base = {"differ": 0, "missing": 0, "must not be": 0, "unprovable": 0}
    return AuditReport("a1", "orders", {**base, **counts}, {}, {}, [], [], [])


def test_any_difference_is_differences_unprovable_rows_alone_are_never_equal():
    assert _report().verdict == "equal"
    assert _report(unprovable=3).verdict == "unprovable"
    assert AuditReport("a", "p", {"must not be": 1}, {}, {}, [], [], []).verdict == "differences"
    assert _report(differ=1, unprovable=2).verdict == "differences"
    assert _report(missing=1).verdict == "differences"


def test_the_text_names_each_kind_the_columns_the_values_and_what_a_heal_would_do():
    report = AuditReport(
        "a1", "orders", {"differ": 1, "missing": 2, "must not be": 0, "unprovable": 7}, {"status": 1},
        {"missing": [{"key": "k2", "columns": [], "stored_record": None}]}, [["k1", "status", "wrong", "paid"]],
        [], [{"topic": "t", "partition": 1, "start": 0, "end": 40}],
    )  # fmt: skip
    text = format_audit(report.as_dict(), plan=True)
    assert text.splitlines()[0] == "audit orders (a1): differences: differ 1, missing 2, unprovable 7"
    assert '  k1 status: stored "wrong" vs derived "paid"' in text
    assert "  missing: k2 …" in text  # 2 missing, 1 example
    assert "the log no longer holds t[1] [0, 40), which the ledger says was read" in text
    assert "a heal would rewrite 1 rows, insert 2, delete 0, and leave 7 unprovable rows alone" in text
