"""The hostile-value corpus: values a producer can legally write, built from PostgreSQL's type and
encoding rules, Spark's cast and JSON rules and librdkafka's limits, each with what it must become
(docs/formats/json.md). It imports nothing of the product: every expectation is stated here.

The spec (:data:`COLUMNS`) has a column of every type; each case is one Kafka value whose ``id``
is unique, so it ends as exactly one row (:attr:`Case.row`: the columns it sets, the others NULL)
or one dead letter whose error holds :attr:`Case.error` (the column and the reason).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

COLUMNS: dict[str, str] = {
    "id": "text",
    "t": "text",
    "b": "bigint",
    "i": "integer",
    "d": "double precision",
    "n": "numeric",
    "f": "boolean",
    "ts": "timestamptz",
}
MAX_RECORD_BYTES = 1_048_576  # the spec's default max_record_bytes
# librdkafka's message.max.bytes and the broker's max.message.bytes default to about 1 MB; the huge
# values are produced to a topic (and by a producer) that allow TOPIC_MAX_BYTES.
TOPIC_MAX_BYTES = 2_097_152


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    value: bytes | None
    row: dict[str, Any] | None = None
    error: str | None = None
    note: str = field(default="", compare=False)


def _obj(case_id: str, **fields: Any) -> bytes:
    return json.dumps({"id": case_id, **fields}).encode()


def _raw(case_id: str, rest: str) -> bytes:
    """``{"id": …`` followed by ``rest`` verbatim (JSON that json.dumps would never write)."""
    return ('{"id":"' + case_id + '"' + rest).encode()


def _row(name: str, kind: str, row: dict[str, Any], value: bytes | None = None, **fields: Any) -> Case:
    return Case(name, kind, value if value is not None else _obj(name, **fields), row={"id": name, **row})


def _dead(name: str, kind: str, error: str, value: bytes | None = None, **fields: Any) -> Case:
    return Case(name, kind, value if value is not None else _obj(name, **fields), error=error)


def _ts(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


_OVERSIZED = _obj("huge-over-max-record-bytes", t="x" * MAX_RECORD_BYTES)
TYPE = "type error: field "
MALFORMED = "malformed JSON or not a JSON object"
NOT_ONE = "malformed JSON: more than one JSON value, or text after the object"
TEXT_ERROR = "which PostgreSQL text cannot store"

CORPUS: list[Case] = [
    # --- text PostgreSQL cannot store, and text it can ------------------------------------------
    _dead(
        "nul-escape",
        "text",
        f"text error: column t holds a NUL character or bytes that are not UTF-8, {TEXT_ERROR}: 0x610062",
        t="a\u0000b",
    ),
    _dead("nul-in-key", "text", "text error: column id holds a NUL character", value=b'{"id":"k\\u0000"}'),
    _dead("raw-nul-byte", "text", MALFORMED, value=_raw("raw-nul-byte", ',"t":"a\x00b"}')),
    _dead(
        "not-utf8",
        "text",
        "value is not valid UTF-8",
        value=_raw("not-utf8", ',"t":"\xff"}').replace(b"\xc3\xbf", b"\xff"),
    ),
    _dead(
        "utf8-overlong",
        "text",
        "value is not valid UTF-8",
        value=_raw("utf8-overlong", ',"t":"x"}').replace(b'"x"', b'"\xc0\xaf"'),
    ),
    _dead(
        "utf8-encoded-surrogate",
        "text",
        "value is not valid UTF-8",
        value=_raw("utf8-encoded-surrogate", ',"t":"x"}').replace(b'"x"', b'"\xed\xa0\x80"'),
    ),
    _dead(
        "utf8-beyond-u10ffff",
        "text",
        "value is not valid UTF-8",
        value=_raw("utf8-beyond-u10ffff", ',"t":"x"}').replace(b'"x"', b'"\xf4\x90\x80\x80"'),
    ),
    _dead("raw-control-char", "text", MALFORMED, value=_raw("raw-control-char", ',"t":"a\tb"}')),
    _row("escaped-controls", "text", {"t": 'a\tb\n\u0001\u001f"\\/'}, t='a\tb\n\u0001\u001f"\\/'),
    _row("surrogate-pair", "text", {"t": "\U0001f600"}, value=_raw("surrogate-pair", ',"t":"\\ud83d\\ude00"}')),
    _row("noncharacter-uffff", "text", {"t": "\uffff"}, value=_raw("noncharacter-uffff", ',"t":"\\uffff"}')),
    _row("line-separator-u2028", "text", {"t": "\u2028\u2029"}, t="\u2028\u2029"),
    _row("escaped-backslash-u", "text", {"t": "\\ud800"}, t="\\ud800"),
    _row("empty-string", "text", {"t": ""}, t=""),
    # --- invalid or lone Unicode escapes --------------------------------------------------------
    _dead(
        "lone-high-surrogate",
        "unicode escape",
        "malformed JSON: a lone UTF-16 surrogate escape",
        value=_raw("lone-high-surrogate", ',"t":"\\ud800"}'),
    ),
    _dead(
        "lone-low-surrogate",
        "unicode escape",
        "malformed JSON: a lone UTF-16 surrogate escape",
        value=_raw("lone-low-surrogate", ',"t":"\\udc00x"}'),
    ),
    _dead(
        "reversed-surrogates",
        "unicode escape",
        "malformed JSON: a lone UTF-16 surrogate escape",
        value=_raw("reversed-surrogates", ',"t":"\\ude00\\ud83d"}'),
    ),
    _dead("short-unicode-escape", "unicode escape", MALFORMED, value=_raw("short-unicode-escape", ',"t":"\\u12"}')),
    _dead("unknown-escape", "unicode escape", MALFORMED, value=_raw("unknown-escape", ',"t":"\\x41"}')),
    # --- not exactly one JSON object ------------------------------------------------------------
    _dead("trailing-garbage", "json text", NOT_ONE, value=_raw("trailing-garbage", "} garbage")),
    _dead("two-objects", "json text", NOT_ONE, value=_raw("two-objects", '}{"id":"other"}')),
    _dead("two-objects-ndjson", "json text", NOT_ONE, value=_raw("two-objects-ndjson", '}\n{"id":"other"}')),
    _dead("trailing-comment", "json text", NOT_ONE, value=_raw("trailing-comment", "} // done")),
    _dead("trailing-bracket", "json text", NOT_ONE, value=_raw("trailing-bracket", "}] x")),
    _dead("trailing-comma-value", "json text", NOT_ONE, value=_raw("trailing-comma-value", '},{"id":"x"}')),
    _row("whitespace-around", "json text", {}, value=b" \t\r\n" + _obj("whitespace-around") + b"\n\n"),
    _dead("bom", "json text", MALFORMED, value=b"\xef\xbb\xbf" + _obj("bom")),
    _dead("single-quotes", "json text", MALFORMED, value=b"{'id':'single-quotes'}"),
    _dead("unquoted-key", "json text", MALFORMED, value=b'{id:"unquoted-key"}'),
    _dead("comment-inside", "json text", MALFORMED, value=_raw("comment-inside", " /* c */}")),
    _dead("trailing-comma", "json text", MALFORMED, value=_raw("trailing-comma", ',"t":"x",}')),
    _dead("nan-token", "json text", MALFORMED, value=_raw("nan-token", ',"d":NaN}')),
    _dead("infinity-token", "json text", MALFORMED, value=_raw("infinity-token", ',"d":-Infinity}')),
    _dead("leading-zero", "json text", MALFORMED, value=_raw("leading-zero", ',"b":012}')),
    _dead("array-root", "json text", MALFORMED, value=b'[{"id":"array-root"}]'),
    _dead("string-root", "json text", MALFORMED, value=b'"string-root"'),
    _dead("null-root", "json text", MALFORMED, value=b"null"),
    _dead("number-root", "json text", MALFORMED, value=b"42"),
    _dead("truncated", "json text", MALFORMED, value=_raw("truncated", ',"t":"abc')),
    _dead("confluent-framed", "json text", MALFORMED, value=b"\x00\x00\x00\x00\x05" + _obj("confluent-framed")),
    _dead("empty-value", "json text", "empty value", value=b""),
    _dead("whitespace-value", "json text", MALFORMED, value=b"   "),
    _dead(
        "deep-nesting-2000",
        "json text",
        MALFORMED,
        value=_raw("deep-nesting-2000", ',"x":' + "[" * 2000 + "]" * 2000 + "}"),
    ),
    _row("deep-nesting-900", "json text", {}, value=_raw("deep-nesting-900", ',"x":' + "[" * 900 + "]" * 900 + "}")),
    # --- duplicate keys -------------------------------------------------------------------------
    _dead(
        "duplicate-key",
        "duplicate key",
        "malformed JSON: a key appears twice in one object",
        value=_raw("duplicate-key", ',"t":"a","t":"b"}'),
    ),
    _dead(
        "duplicate-key-nested",
        "duplicate key",
        "malformed JSON: a key appears twice in one object",
        value=_raw("duplicate-key-nested", ',"x":{"a":1,"a":2}}'),
    ),
    _dead(
        "duplicate-id",
        "duplicate key",
        "malformed JSON: a key appears twice in one object",
        value=_raw("duplicate-id", ',"id":"other"}'),
    ),
    _row("same-key-two-objects", "duplicate key", {"t": "x"}, t="x", x={"t": "y"}),
    # --- arrays, objects and other JSON types where a scalar is expected ------------------------
    _dead("object-in-text", "json type", "field t of text column t is an object", t={"x": 1}),
    _dead("array-in-text", "json type", "field t of text column t is an array", t=[1, 2]),
    _dead(
        "fraction-in-text",
        "json type",
        "field t of text column t is a number with a fraction",
        value=_raw("fraction-in-text", ',"t":12.50}'),
    ),
    _dead(
        "exponent-in-text",
        "json type",
        "field t of text column t is a number with a fraction",
        value=_raw("exponent-in-text", ',"t":1e2}'),
    ),
    _dead(
        "zero-fraction-in-text",
        "json type",
        "field t of text column t is a number with a fraction",
        value=_raw("zero-fraction-in-text", ',"t":9333303126185904.0}'),
    ),
    # a number beyond a double: Spark's reader renders it as the JSON string "Infinity", quotes included
    _dead(
        "out-of-range-number-in-text",
        "json type",
        "field t of text column t is a number with a fraction or an exponent",
        value=_raw("out-of-range-number-in-text", ',"t":1e400}'),
    ),
    _row("integer-in-text", "json type", {"t": "-12"}, t=-12),
    # strings that read like the kinds above stay text (the decoder asks their kind only then)
    _row("object-text-in-a-string", "json type", {"t": '{"x": 1}'}, t='{"x": 1}'),
    _row("fraction-text-in-a-string", "json type", {"t": "-12.50"}, t="-12.50"),
    _row("infinity-text-in-a-string", "json type", {"t": '"Infinity"'}, t='"Infinity"'),
    _row(
        "big-integer-in-text",
        "json type",
        {"t": "123456789012345678901234567890123456789012"},
        value=_raw("big-integer-in-text", ',"t":123456789012345678901234567890123456789012}'),
    ),
    _row("true-in-text", "json type", {"t": "true"}, t=True),
    _row("null-in-text", "json type", {}, t=None),
    _dead("object-in-bigint", "json type", TYPE + "b is not bigint", b={"$numberLong": "1"}),
    _dead("array-in-integer", "json type", TYPE + "i is not integer", i=[1]),
    _dead("object-in-numeric", "json type", TYPE + "n is not numeric", n={"v": 1}),
    _dead("array-in-boolean", "json type", TYPE + "f is not boolean", f=[True]),
    _dead("object-in-timestamp", "json type", TYPE + "ts is not timestamptz", ts={"s": 1}),
    _dead("string-in-boolean", "json type", TYPE + "f is not boolean", f="maybe"),
    _row("boolean-words", "json type", {"f": True}, f="yes"),
    _row("boolean-one", "json type", {"f": False}, f=0),
    # --- keys of the wrong JSON type ------------------------------------------------------------
    _dead("key-is-object", "key type", "field id of text column id is an object", value=b'{"id":{"k":1}}'),
    _dead("key-is-array", "key type", "field id of text column id is an array", value=b'{"id":["key-is-array"]}'),
    _dead("key-is-fraction", "key type", "field id of text column id is a number with a fraction", value=b'{"id":7.5}'),
    _dead("key-is-null", "key type", "missing required field id", value=b'{"id":null}'),
    _dead("key-missing", "key type", "missing required field id", value=b'{"ID":"key-missing"}'),
    _dead("object-key-not-string", "key type", MALFORMED, value=b'{"id":"object-key-not-string",1:2}'),
    Case("key-is-integer", "key type", b'{"id":424242}', row={"id": "424242"}),
    # --- numbers beyond a column's range or precision -------------------------------------------
    _row("bigint-max", "number", {"b": 2**63 - 1}, b=2**63 - 1),
    _row("bigint-min", "number", {"b": -(2**63)}, b=-(2**63)),
    _dead("bigint-over", "number", TYPE + "b is not bigint: 9223372036854775808", b=2**63),
    _dead("bigint-under", "number", TYPE + "b is not bigint", b=-(2**63) - 1),
    _row("integer-max", "number", {"i": 2**31 - 1}, i=2**31 - 1),
    _dead("integer-over", "number", TYPE + "i is not integer: 2147483648", i=2**31),
    _dead("integer-under", "number", TYPE + "i is not integer", i=-(2**31) - 1),
    _dead("integer-fraction", "number", TYPE + "i is not integer", i=1.5),
    _dead("integer-exponent", "number", TYPE + "i is not integer", value=_raw("integer-exponent", ',"i":1e2}')),
    _row("integer-as-string", "number", {"i": 12}, i=" 12 "),
    _dead("integer-hex-string", "number", TYPE + "i is not integer", i="0x10"),
    _row(
        "numeric-exact",
        "number",
        {"n": Decimal("0.000000000123456789")},
        value=_raw("numeric-exact", ',"n":0.000000000123456789}'),
    ),
    _row(
        "numeric-38-digits",
        "number",
        {"n": Decimal("12345678901234567890.123456789012345678")},
        value=_raw("numeric-38-digits", ',"n":12345678901234567890.123456789012345678}'),
    ),
    _dead(
        "numeric-39-digits-number",
        "number",
        TYPE + "n is a JSON number of more than 38 digits",
        value=_raw("numeric-39-digits-number", ',"n":1234567890123456789012345678901234567890.5}'),
    ),
    _row("numeric-long-string", "number", {"n": Decimal("9" * 200 + "." + "1" * 100)}, n="9" * 200 + "." + "1" * 100),
    _row("numeric-1e400-string", "number", {"n": Decimal("1e400")}, n="1e400"),
    _row("numeric-tiny-string", "number", {"n": Decimal("1e-999")}, n="1e-999"),
    _dead("numeric-exponent-too-big", "number", TYPE + "n is not numeric", n="1e131072"),
    _dead("numeric-too-long", "number", TYPE + "n is not numeric", n="1" * 1001),
    _dead("numeric-nan", "number", TYPE + "n is not numeric: NaN", n="NaN"),
    _dead("numeric-infinity", "number", TYPE + "n is not numeric: Infinity", n="Infinity"),
    _dead("numeric-hex", "number", TYPE + "n is not numeric", n="0x1A"),
    _dead("numeric-object", "number", TYPE + "n is not numeric", n={"$numberDecimal": "1.5"}),
    _row("double-nan-word", "number", {"d": float("nan")}, d="NaN"),
    _row("double-infinity-word", "number", {"d": float("-inf")}, d="-Infinity"),
    _row(
        "double-max", "number", {"d": 1.7976931348623157e308}, value=_raw("double-max", ',"d":1.7976931348623157e308}')
    ),
    _row("double-negative-zero", "number", {"d": -0.0}, value=_raw("double-negative-zero", ',"d":-0.0}')),
    _dead(
        "double-1e400-number",
        "number",
        TYPE + "d is not double precision",
        value=_raw("double-1e400-number", ',"d":1e400}'),
    ),
    _dead("double-1e400-string", "number", TYPE + "d is not double precision: 1e400", d="1e400"),
    _dead("double-underflow-string", "number", TYPE + "d is not double precision: 1e-400", d="1e-400"),
    # --- timestamps outside what PostgreSQL, Spark or Python hold -------------------------------
    _row("ts-utc", "timestamp", {"ts": _ts(2026, 11, 1)}, ts="2026-11-01T00:00:00Z"),
    _row("ts-offset", "timestamp", {"ts": _ts(2026, 10, 31, 22)}, ts="2026-11-01T00:00:00+02:00"),
    _row("ts-without-zone-is-utc", "timestamp", {"ts": _ts(2026, 11, 1, 12)}, ts="2026-11-01T12:00:00"),
    _row("ts-date-only", "timestamp", {"ts": _ts(2026, 11, 1)}, ts="2026-11-01"),
    _row(
        "ts-nanoseconds-truncated",
        "timestamp",
        {"ts": datetime(2026, 11, 1, 0, 0, 0, 123456, tzinfo=UTC)},
        ts="2026-11-01T00:00:00.123456789Z",
    ),
    _row("ts-year-1", "timestamp", {"ts": _ts(1, 1, 1)}, ts="0001-01-01T00:00:00Z"),
    _row(
        "ts-year-9999", "timestamp", {"ts": datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)}, ts="9999-12-31T23:59:59Z"
    ),
    _dead(
        "ts-year-0",
        "timestamp",
        TYPE + "ts is not timestamptz (years 1-9999): 0000-01-01T00:00:00Z",
        ts="0000-01-01T00:00:00Z",
    ),
    _dead("ts-year-10000", "timestamp", TYPE + "ts is not timestamptz (years 1-9999)", ts="10000-01-01T00:00:00Z"),
    _dead("ts-year-294277", "timestamp", TYPE + "ts is not timestamptz (years 1-9999)", ts="294277-01-01T00:00:00Z"),
    _dead("ts-before-4713-bc", "timestamp", TYPE + "ts is not timestamptz (years 1-9999)", ts="-4714-11-23T00:00:00Z"),
    _dead(
        "ts-year-1-east-of-utc",
        "timestamp",
        TYPE + "ts is not timestamptz (years 1-9999)",
        ts="0001-01-01T00:00:00+01:00",
    ),
    _dead(
        "ts-year-9999-west-of-utc",
        "timestamp",
        TYPE + "ts is not timestamptz (years 1-9999)",
        ts="9999-12-31T23:59:59-01:00",
    ),
    _dead("ts-time-only", "timestamp", TYPE + "ts is not timestamptz (years 1-9999): 12:00", ts="12:00"),
    _dead("ts-february-30", "timestamp", TYPE + "ts is not timestamptz", ts="2026-02-30T00:00:00Z"),
    _dead("ts-leap-second", "timestamp", TYPE + "ts is not timestamptz", ts="2026-12-31T23:59:60Z"),
    _dead("ts-epoch-number", "timestamp", TYPE + "ts is not timestamptz", ts=1700000000),
    _dead("ts-words", "timestamp", TYPE + "ts is not timestamptz", ts="infinity"),
    # --- huge messages --------------------------------------------------------------------------
    _row("huge-under-max-record-bytes", "size", {"t": "x" * 1_040_000}, t="x" * 1_040_000),
    _dead(
        "huge-over-max-record-bytes",
        "size",
        f"oversized value: {len(_OVERSIZED)} bytes > max_record_bytes {MAX_RECORD_BYTES}",
        value=_OVERSIZED,
    ),
    _row(
        "many-fields",
        "size",
        {"t": "x"},
        value=_raw("many-fields", "," + ",".join(f'"f{k}":{k}' for k in range(20_000)) + ',"t":"x"}'),
    ),
]
