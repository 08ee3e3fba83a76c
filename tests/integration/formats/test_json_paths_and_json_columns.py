"""The JSON decoder on what the hostile corpus's flat spec does not reach: dotted paths whose parent
holds something other than an object (``from_json`` cannot read it into the struct it reads fields
from, so the record is malformed, as before the Jackson UDF), and json/jsonb columns (stored as the
JSON value the producer wrote, a JSON string as that string; with ``string_is_json``, as the JSON
text the string holds).

Each value is one record of one topic read by one backfill on the real stack (Apache Kafka, Spark
Connect, PostgreSQL); the expectations are stated here, as in :mod:`tests.support.hostile_corpus`.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.support.helpers import backfill, orders_spec
from tests.support.hostile_corpus import Case
from tests.support.hostile_run import produce_corpus, snapshot

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

COLUMNS: dict[str, Any] = {
    "id": {"type": "text", "required": True},
    "n": {"type": "bigint", "path": "meta.n"},
    "t": {"type": "text", "path": "meta.t"},
    "doc": {"type": "jsonb"},
    "raw": {"type": "json"},
    "held": {"type": "jsonb", "string_is_json": True},
}
MALFORMED = "malformed JSON or not a JSON object"


def _value(case_id: str, rest: str) -> bytes:
    return ('{"id":"' + case_id + '"' + rest).encode()


def _dead(name: str, rest: str, error: str) -> Case:
    return Case(name, "json path", _value(name, rest), error=error)


def _row(name: str, rest: str, **row: Any) -> Case:
    return Case(name, "json path", _value(name, rest), row={"id": name, **row})


CASES = [
    _row("nested-fields", ',"meta":{"n":7,"t":"x"}}', n=7, t="x"),
    _row("parent-null", ',"meta":null}', n=None, t=None),
    _dead("parent-a-number", ',"meta":5}', MALFORMED),
    _dead("parent-an-empty-string", ',"meta":""}', MALFORMED),
    _dead("parent-an-array", ',"meta":[{"n":1}]}', MALFORMED),
    _dead("nested-text-an-object", ',"meta":{"t":{"a":1}}}', "field meta.t of text column t is an object"),
    _row("jsonb-object", ',"doc":{"b":1.50,"a":[1,"x",null,true]}}', doc={"a": [1, "x", None, True], "b": 1.5}),
    # A JSON string is stored as that string (issue 53, review V 12): never re-read as JSON.
    _row("jsonb-string-stays-a-string", ',"doc":"{\\"k\\": 2}"}', doc='{"k": 2}'),
    _row("jsonb-digits-string-is-no-number", ',"doc":"123"}', doc="123"),
    _row("jsonb-word-string", ',"doc":"hello"}', doc="hello"),
    _row("json-word-string", ',"raw":"hello \\u00e9"}', raw="hello \u00e9"),
    # ...unless the column says its strings hold JSON text: then that text, and a dead letter when it is none.
    _row("string-is-json-holds-json", ',"held":"{\\"k\\": 2}"}', held={"k": 2}),
    _dead("string-is-json-holds-a-word", ',"held":"hello"}', "type error: column held is not jsonb: "),
    _row("jsonb-number", ',"doc":12}', doc=12),
    _row("jsonb-null", ',"doc":null}', doc=None),
    _row("json-nested", ',"raw":{"z":{"y":[0.5]},"a":"\\u00e9"}}', raw={"z": {"y": [0.5]}, "a": "\u00e9"}),
]


def test_dotted_paths_and_json_columns_end_as_the_decoder_promises(kafka_config: dict[str, Any], engine: Any) -> None:
    name = f"json_paths_{uuid.uuid4().hex[:6]}"
    spec = orders_spec(name, name, key=["id"], columns=COLUMNS, max_dead_letter_ratio=1.0)
    offsets = produce_corpus(kafka_config, name, CASES)
    backfill(engine, kafka_config, spec, f"{name}_run")
    rows, dead_letters = snapshot(engine, spec)
    by_offset = {offsets[case.name]: case for case in CASES}
    got = {r["_kafka_offset"]: {c: r[c] for c in by_offset[r["_kafka_offset"]].row or {}} for r in rows}
    got |= {d["offset"]: d["error"] for d in dead_letters}
    wanted = {offset: case.row if case.row is not None else case.error for offset, case in by_offset.items()}
    for offset, want in wanted.items():
        found = got.get(offset)
        ok = found == want if isinstance(want, dict) else isinstance(found, str) and str(want) in found
        assert ok, (by_offset[offset].name, want, found)
