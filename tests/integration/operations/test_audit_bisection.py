"""The whole-table audit's checksum bisection (issue 57 item 2): a few corrupted rows among many keys are
found by comparing checksums per key range, and only the rows of the ranges that differ are staged.

A key's range is the first hex digits of the md5 of its length-prefixed text (``<bytes>:<key>``): the oracle
recomputes it from the produced keys and imports nothing of the product.
"""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import text

from reprocess.kafka import demo_data
from tests.integration.operations.test_audit import _audit, _newest, _stored
from tests.support.helpers import PAYMENTS_SPEC, backfill, orders_spec

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark")]


def _range(key: str, digits: int) -> str:
    return hashlib.md5(f"{len(key.encode())}:{key}".encode()).hexdigest()[:digits]


def test_audit_stages_only_the_key_ranges_whose_checksums_differ_and_finds_exactly_the_corrupted_rows(
    kafka_config, engine, unique_name
):
    spec = orders_spec(unique_name, unique_name, base=PAYMENTS_SPEC)
    demo_data.create_topic(kafka_config, unique_name, 2)
    produced = demo_data.produce(kafka_config, unique_name, 2, demo_data.payment_events(5000), malformed=())
    newest = _newest(produced)
    backfill(engine, kafka_config, spec, f"{unique_name}-load")
    assert _stored(engine, spec) == {k: v[:2] for k, v in newest.items()}

    keys = sorted(newest)
    changed, deleted = keys[10:13], keys[2000]
    with engine.begin() as conn:
        for k in changed:
            conn.execute(text(f"UPDATE {spec.qualified_target} SET status = 'wrong' WHERE payment_id = :k"), {"k": k})
        conn.execute(text(f"DELETE FROM {spec.qualified_target} WHERE payment_id = :k"), {"k": deleted})

    found = _audit(engine, kafka_config, spec, f"{unique_name}-a1", heal=True)
    assert found["counts"] == {"differ": 3, "missing": 1, "must not be": 0, "unprovable": 0}, found
    assert found["columns"] == {"status": 3}
    assert [e["key"] for e in found["examples"]["missing"]] == [deleted]
    bisection = found["bisection"]
    digits = bisection["range_digits"]
    ranges = {_range(k, digits) for k in [*changed, deleted]}
    assert digits >= 2 and bisection["ranges"] == 16**digits
    assert bisection["ranges_differing"] == len(ranges), bisection
    expected_rows = sum(1 for k in keys if _range(k, digits) in ranges)  # the keys of those ranges, no other
    assert bisection["rows_staged"] == expected_rows < len(keys) / 20, bisection
    assert _stored(engine, spec) == {k: v[:2] for k, v in newest.items()}

    again = _audit(engine, kafka_config, spec, f"{unique_name}-a2")
    assert again["verdict"] == "equal", again
    assert again["bisection"] == {"range_digits": digits, "ranges": 16**digits, "ranges_differing": 0,
                                  "rows_staged": 0}  # fmt: skip
