"""The JSON decoder's fast path (typed values read in the Jackson pass, reprocess/jvm/FastValues.java;
docs/performance.md, "Typed values in the Jackson pass") against Spark's own casts, on the real Spark
Connect server: over edge timestamps, integers, numerics and texts, the decoder with its fast slots
gives every record the same typed values and the same ``_error`` as without them, and the fast path
takes exactly the values it is meant to (a canonical form) and leaves every other one to the casts.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from reprocess.formats import json_udf
from reprocess.formats.contract import sql_string, typed_name
from reprocess.formats.json.decode import schema_of
from reprocess.formats.specs import parse_spec
from reprocess.spark.transform import decode
from tests.support.helpers import connect_session

pytestmark = [pytest.mark.integration("spark")]

COLUMNS = {
    "id": "text",
    "t": "timestamptz",
    "n": "numeric",
    "i": "integer",
    "s": "smallint",
    "b": "bigint",
    "x": "text",
}
SPEC = parse_spec({"name": "fast", "topics": ["fast"], "key": ["id"], "columns": COLUMNS, "max_dead_letter_ratio": 1.0})

FAST, SLOW = True, False
# (field, the value as JSON text, whether the fast path takes it)
CASES: list[tuple[str, str, bool]] = [
    *(("t", json.dumps(v), FAST) for v in (
        "2026-11-01T00:00:00Z", "2026-11-01T00:00:00.1Z", "2026-11-01T00:00:00.123456Z",
        "2026-11-01T00:00:00.000000Z", "2024-02-29T23:59:59.999999+05:30", "2000-02-29T12:00:00Z",
        "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z", "0001-01-01T00:30:00+00:30",
        "9999-12-31T22:00:00-01:00", "2026-06-30T12:00:00-00:00", "2026-06-30T12:00:00+00:00",
        "2026-01-01T00:00:00+17:59", "2026-01-01T00:00:00-17:59", "1969-12-31T23:59:59.5Z", "1970-01-01T00:00:00Z",
    )),
    *(("t", json.dumps(v), SLOW) for v in (
        "0001-01-01T00:00:00+01:00", "9999-12-31T23:00:00-01:00", "0000-01-01T00:00:00Z",
        "2026-11-01T00:00:00.1234567Z", "2026-11-01T00:00:00.Z", "2026-11-01 00:00:00Z", "2026-11-01T24:00:00Z",
        "2026-11-01T23:59:60Z", "2026-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2026-13-01T00:00:00Z",
        "2026-04-31T00:00:00Z", "+2026-11-01T00:00:00Z", " 2026-11-01T00:00:00Z", "2026-11-01T00:00:00Z ",
        "2026-11-01T00:00:00", "2026-11-01T00:00:00+18:00", "2026-11-01T00:00:00-18:00", "2026-11-01T00:00:00+1800",
        "2026-11-01T00:00:00+05:30:00", "2026-11-01T00:00:00UTC", "2026-11-01T00:00:00z", "2026-11-01T00:00Z",
        "2026-11-01", "12026-11-01T00:00:00Z", "2026-1-01T00:00:00Z", "2026-11-01T00:00:00.12:00", "",
        "2026-11-01t00:00:00Z", "2026-11-01T00:00:00+5:30",
    )),
    ("t", "1793491200", SLOW), ("t", "null", SLOW), ("t", "true", SLOW),
    *(("i", v, FAST) for v in ("0", "-0", "5", "-5", "2147483647", "-2147483648", '"42"', '"-7"', '"007"', '"-0"')),
    *(("i", v, SLOW) for v in (
        "2147483648", "-2147483649", "1.0", "1e2", '"+5"', '" 5"', '"5 "', '"1.5"', "true", '""', '"-"',
        "123456789012345678901", '"\\u0663"', "null", '"0x10"',
    )),
    *(("s", v, FAST) for v in ("32767", "-32768", '"12"')),
    *(("s", v, SLOW) for v in ("32768", "-32769", "1.5")),
    *(("b", v, FAST) for v in ("123456789012345678", "-999999999999999999", '"17"')),
    *(("b", v, SLOW) for v in (
        "9223372036854775807", "-9223372036854775808", "9223372036854775808", '"1234567890123456789"',
    )),
    *(("n", v, FAST) for v in (
        '"12.50"', '"-0.5"', '".5"', '"5."', '"+1e5"', '"1E-3"', '"1e+999"', '"007"', "12.5", "7", "-0",
        "0.000000000123456789", json.dumps("9" * 1000),
    )),
    *(("n", v, SLOW) for v in (
        '"1e1000"', '"1.2.3"', '""', '" 1.5"', '"1.5 "', '"abc"', '"NaN"', '"-"', '"."', '"e5"', '"1e"', '"+"',
        '"1.5\\n"', json.dumps("9" * 1001), "1e5", "12345678901234567890123456789012345678901", "true", "null",
    )),
    *(("x", v, SLOW) for v in ('"plain"', '"nul\\u0000here"', '"\\u0000"', "null", "12")),
]  # fmt: skip


def _decoded(spark: Any) -> tuple[dict[int, tuple[Any, ...]], dict[int, Any]]:
    """Each record's typed values and ``_error`` by offset, and each record's fast slot of its field."""
    rows = [
        (None, ('{"id":"r' + str(k) + f'","{f}":{v}}}').encode(), "fast", 0, k, None)
        for k, (f, v, _) in enumerate(CASES)
    ]
    records = spark.createDataFrame(
        rows, "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
    )
    lay = json_udf.layout(SPEC, schema_of([c.path for c in SPEC.columns]))
    columns = [c for c in SPEC.columns if c.name != "id"]
    slots = {c.name: lay.fast(c.path, c) for c in columns}
    fast = " ".join(f"WHEN {sql_string(name)} THEN CAST({slot} AS STRING)" for name, slot in slots.items() if slot)
    field = "CASE " + " ".join(f"WHEN offset = {k} THEN {sql_string(f)}" for k, (f, _, _) in enumerate(CASES)) + " END"
    values = [f"CAST({typed_name(i)} AS STRING)" for i in range(len(SPEC.columns))]
    out = (
        decode(records, SPEC)
        .selectExpr(
            "offset", *values, "_error", f"{f'CASE {field} {fast} END' if fast else 'CAST(NULL AS STRING)'} AS fast"
        )
        .collect()
    )
    return {r["offset"]: tuple(r)[1:-1] for r in out}, {r["offset"]: r["fast"] for r in out}


def test_the_fast_path_gives_what_the_casts_give_and_takes_only_canonical_values(monkeypatch: Any) -> None:
    with connect_session() as spark:
        with_fast, slots = _decoded(spark)
        monkeypatch.setattr(json_udf, "_FAST_TYPES", {})  # the decoder without fast slots: Spark's casts alone
        without = _decoded(spark)[0]
    differ = [(CASES[k], with_fast[k], without[k]) for k in with_fast if with_fast[k] != without[k]]
    assert differ == []
    taken = {k for k, slot in slots.items() if slot is not None}
    assert [c for k, c in enumerate(CASES) if (k in taken) != c[2]] == []
    assert len(without) == len(CASES)
