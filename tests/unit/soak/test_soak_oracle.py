"""The soak's oracle (soak/oracle.py): offset ordering keeps a key's last record and a tombstone
removes it, version ordering keeps the highest version against late older ones, and malformed
records are left out; a comparison names lost, doubled and wrong keys."""

from __future__ import annotations

import json
from pathlib import Path

from soak.oracle import compare, expected_orders, expected_payments, malformed


def _log(tmp_path: Path, lines: list[dict[str, object]]) -> Path:
    path = tmp_path / "produced.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in reversed(lines)))  # written out of offset order
    return path


def _order(offset: int, key: str, status: str, seq: int) -> dict[str, object]:
    value = json.dumps({"order_id": key, "status": status, "amount": "12.50", "seq": seq})
    return {"p": 0, "o": offset, "k": key, "v": value, "bad": False}


def test_offset_ordering_keeps_each_keys_last_record_and_a_tombstone_deletes_it(tmp_path: Path) -> None:
    log = _log(tmp_path, [
        _order(0, "a", "new", 1), _order(1, "a", "paid", 2), _order(2, "b", "new", 3),
        {"p": 0, "o": 3, "k": "b", "v": None, "bad": False}, {"p": 0, "o": 4, "k": None, "v": "{x", "bad": True},
    ])  # fmt: skip
    assert expected_orders(log) == {"a": ("paid", "12.5", "2")}
    assert malformed(log) == 1


def test_version_ordering_keeps_the_highest_version_against_a_late_older_one(tmp_path: Path) -> None:
    def pay(offset: int, version: int) -> dict[str, object]:
        value = {"payment_id": "p", "status": f"s{version}", "amount": "3.00", "version": version}
        return {"p": 1, "o": offset, "k": "p", "v": json.dumps(value), "bad": False}

    assert expected_payments(_log(tmp_path, [pay(0, 1), pay(1, 3), pay(2, 2)])) == {"p": ("s3", "3", "3")}


def test_compare_names_lost_doubled_and_wrong_keys() -> None:
    checks = compare("t", {"a": ("1",), "b": ("2",)}, {"a": ("9",), "c": ("3",)}, count=3)
    assert [c.passed for c in checks] == [False, False, False]
    assert "['b']" in checks[0].detail and "3 rows for 2 keys" in checks[1].detail and "2 wrong" in checks[2].detail
