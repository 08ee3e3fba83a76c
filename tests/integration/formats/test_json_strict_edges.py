"""JSON values at the edge of any check on the record's text (issue 41, item 2): a key twice that a
string-level test could miss (a key starting with a colon, one spelled with an escape, the empty
key, space before the colon), text after a flat object, and braces, brackets, colons and quotes
inside strings; each ends exactly as the strict rules say. A decoder that skips the strict parse
for records a cheap test clears must pass it (docs/performance.md, "One parse per record, II").

Each value is one record of one topic read by one backfill on the real stack (Apache Kafka, Spark
Connect, PostgreSQL); the expectations are stated here, as in :mod:`tests.support.hostile_corpus`.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.support.helpers import orders_spec
from tests.support.hostile_corpus import COLUMNS, Case
from tests.support.hostile_run import run_and_check

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

TWICE = "malformed JSON: a key appears twice in one object"
NOT_ONE = "malformed JSON: more than one JSON value, or text after the object"


def _value(case_id: str, rest: str) -> bytes:
    return ('{"id":"' + case_id + '"' + rest).encode()


def _dead(name: str, rest: str, error: str) -> Case:
    return Case(name, "json edge", _value(name, rest), error=error)


def _row(name: str, rest: str, t: str) -> Case:
    return Case(name, "json edge", _value(name, rest), row={"id": name, "t": t})


CASES = [
    # A key that starts with a colon: a key test reading strings out of step would miss it.
    _dead("key-starting-with-colon-twice", ',"t":"x",":b":1,":b":2}', TWICE),
    _dead("key-twice-with-space-before-colon", ',"t" :"a","t":"b"}', TWICE),
    _dead("key-twice-once-escaped", ',"t":"a","\\u0074":"b"}', TWICE),
    _dead("empty-key-twice", ',"":1,"":2}', TWICE),
    _dead("key-twice-beside-string-values", ',"t":"a","x":"","y":"","t":"b"}', TWICE),
    _dead("brace-after-flat-object", ',"t":"x"}}', NOT_ONE),
    _dead("second-flat-object", ',"t":"x"}{"t":"y"}', NOT_ONE),
    _dead("fraction-in-text-of-flat-object", ',"t":1.50}', "field t of text column t is a number with a fraction"),
    _dead(
        "negative-out-of-range-number-in-text",
        ',"t":-1e400}',
        "field t of text column t is a number with a fraction or an exponent",
    ),
    _row("braces-and-brackets-inside-a-string", ',"t":"{[x]}"}', "{[x]}"),
    _row("colon-and-escaped-quote-inside-a-string", ',"t":"a\\":b"}', 'a":b'),
    _row("same-key-in-two-objects", ',"t":"x","x":{"t":"y"}}', "x"),
    _row("whitespace-around-a-flat-object", ' ,\n "t" : "y"\r\n}\t\n', "y"),
    _row("string-value-like-a-key", ',"t":"u","x":"t"}', "u"),
]


def test_values_at_the_edge_of_text_level_json_checks_end_as_the_strict_rules_say(
    kafka_config: dict[str, Any], engine: Any
) -> None:
    name = f"json_edges_{uuid.uuid4().hex[:6]}"
    columns = {c: {"type": t, "required": c == "id"} for c, t in COLUMNS.items()}
    spec = orders_spec(name, name, key=["id"], columns=columns, max_dead_letter_ratio=1.0)
    run_and_check(engine, kafka_config, spec, CASES)
