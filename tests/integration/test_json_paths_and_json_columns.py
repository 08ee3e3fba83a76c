"""The JSON decoder on what the hostile corpus's flat spec does not reach: dotted paths whose parent
holds something other than an object (``from_json`` cannot read it into the struct it reads fields
from, so the record is malformed, as before the Jackson UDF), and json/jsonb columns (stored as the
JSON value the producer wrote, a JSON string as its text).

Each value is one record of one topic read by one backfill on the real stack (Apache Kafka, Spark
Connect, PostgreSQL); the expectations are stated here, as in :mod:`tests.support.hostile_corpus`.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from reprocess.core.runs import RunRequest
from reprocess.operations.plan import plan_run
from reprocess.postgres.commit import commit_run
from tests.support.helpers import orders_spec, run_spark_stage
from tests.support.hostile_corpus import Case
from tests.support.hostile_run import produce_corpus, snapshot

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

COLUMNS: dict[str, Any] = {
    "id": {"type": "text", "required": True},
    "n": {"type": "bigint", "path": "meta.n"},
    "t": {"type": "text", "path": "meta.t"},
    "doc": {"type": "jsonb"},
    "raw": {"type": "json"},
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
    _row("jsonb-string-is-its-text", ',"doc":"{\\"k\\": 2}"}', doc={"k": 2}),
    _row("jsonb-number", ',"doc":12}', doc=12),
    _row("jsonb-null", ',"doc":null}', doc=None),
    _row("json-nested", ',"raw":{"z":{"y":[0.5]},"a":"\\u00e9"}}', raw={"z": {"y": [0.5]}, "a": "\u00e9"}),
]


def test_dotted_paths_and_json_columns_end_as_the_decoder_promises(kafka_config: dict[str, Any], engine: Any) -> None:
    name = f"json_paths_{uuid.uuid4().hex[:6]}"
    spec = orders_spec(name, name, key=["id"], columns=COLUMNS, max_dead_letter_ratio=1.0)
    offsets = produce_corpus(kafka_config, name, CASES)
    plan = plan_run(engine, kafka_config, spec, RunRequest.from_params({}), f"{name}_run")
    run_spark_stage(spec, plan.run_id)
    commit_run(engine, spec, plan.run_id)
    rows, dead_letters = snapshot(engine, spec)
    stored = {r["_kafka_offset"]: r for r in rows}
    dead = {d["offset"]: d["error"] for d in dead_letters}
    for case in CASES:
        offset = offsets[case.name]
        if case.row is not None:
            assert offset in stored, (case.name, dead.get(offset))
            assert {c: stored[offset][c] for c in case.row} == case.row, case.name
        else:
            assert case.error is not None and case.error in dead.get(offset, ""), (case.name, dead.get(offset))
