"""No record can stall a pipeline, checked with generated values (issue 27, item 1).

Hypothesis generates records: JSON objects whose field for every column type holds an arbitrary
JSON value (or a value shaped like the type: numbers at and past its bounds, decimal strings,
times with zones), the same serialized and then damaged by inserted bytes, and arbitrary byte
strings. They are collected first and then produced into ONE topic and read by ONE backfill
(a Spark run per example would take hours): every record must end as exactly one row or one
dead letter, the run must commit, a text or integer the producer wrote must be stored unaltered,
and a second run must change nothing.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from reprocess.core.runs import RunRequest
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.helpers import orders_spec, run_spark_stage
from tests.support.hostile_corpus import COLUMNS, Case
from tests.support.hostile_run import produce_corpus, snapshot

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

EXAMPLES = 800  # records generated into the one run

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
BOUNDS = [2**15, 2**31, 2**63, 2**64]
SHAPED = {
    "text": st.text(),
    "bigint": st.sampled_from([b + d for b in BOUNDS for d in (-1, 0)] + [-b - d for b in BOUNDS for d in (0, 1)])
    | st.integers().map(str),
    "integer": st.integers(min_value=-(2**32), max_value=2**32) | st.integers().map(lambda i: f" {i} "),
    "double precision": st.floats() | st.floats().map(repr) | st.sampled_from(["1e400", "-1e-400", "NaN", "inf"]),
    "numeric": st.decimals(allow_nan=False, allow_infinity=False).map(str)
    | st.decimals(allow_nan=False, allow_infinity=False, places=6).map(float)
    | st.sampled_from(["NaN", "Infinity", "1e999", "1e1000", "-0", ".5", "5."]),
    "boolean": st.booleans() | st.sampled_from(["t", "no", "on", "2", "yes", 1, 0, 2]),
    "timestamptz": st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)).map(
        lambda d: d.isoformat()
    )
    | st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat())
    | st.sampled_from(["0000-01-01T00:00:00Z", "10000-01-01T00:00:00Z", "12:00", "2026-02-30", "2026"]),
}
ABSENT = object()


@st.composite
def records(draw: Any) -> tuple[bytes, dict[str, Any]]:
    """(value, fields) with the ``id`` left for the caller to set; ``fields`` is empty for bytes."""
    shape = draw(st.sampled_from(["object", "object", "object", "damaged", "bytes"]))
    if shape == "bytes":
        return draw(st.binary(max_size=64)), {}
    fields = {}
    for column, type_ in COLUMNS.items():
        if column == "id":
            continue
        value = draw(st.sampled_from([ABSENT, ABSENT, "shaped", "shaped", "shaped", "json"]))
        if value is not ABSENT:
            fields[column] = draw(SHAPED[type_] if value == "shaped" else JSON)
    ascii_only = draw(st.booleans())
    if shape == "object":
        return b"", {"_ascii": ascii_only, **fields}
    tail = json.dumps(fields, ensure_ascii=ascii_only)[1:].encode()
    at = draw(st.integers(min_value=0, max_value=len(tail)))
    return tail[:at] + draw(st.binary(min_size=1, max_size=8)) + tail[at:], {"_damaged": True}


def generated(n: int) -> list[Case]:
    """``n`` records from :func:`records`, each given a unique id (so none supersedes another)."""
    drawn: list[tuple[bytes, dict[str, Any]]] = []

    @settings(
        max_examples=n, database=None, phases=[Phase.generate], deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(records())
    def collect(record: tuple[bytes, dict[str, Any]]) -> None:
        drawn.append(record)

    collect()
    cases = []
    for k, (raw, fields) in enumerate(drawn):
        key = f"h-{k:05d}"
        if fields.pop("_damaged", False):  # the bytes after the id were damaged
            value = b'{"id":"' + key.encode() + b'",' + raw
        elif raw or not fields:
            value = raw
        else:
            ascii_only = fields.pop("_ascii")
            fields = {"id": key, **fields}
            value = json.dumps(fields, ensure_ascii=ascii_only).encode()
        cases.append(Case(key, "generated", value, row=fields or None))
    return cases


def strict_json_object(value: bytes) -> dict[str, Any] | None:
    """The value as JSON (RFC 8259: one object, unique keys, no NaN, whole characters), else None."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({k for k, _ in pairs}) != len(pairs):
            raise ValueError("duplicate key")
        return dict(pairs)

    def no_constant(name: str) -> Any:
        raise ValueError(name)

    try:
        doc = json.loads(value.decode("utf-8"), object_pairs_hook=unique, parse_constant=no_constant)
        json.dumps(doc, ensure_ascii=False).encode("utf-8")  # a lone surrogate cannot be encoded
    except (UnicodeError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _text(written: str | int | bool | None) -> str | None:
    if isinstance(written, bool):
        return "true" if written else "false"
    return None if written is None else str(written)


def test_generated_records_each_end_as_one_row_or_one_dead_letter(kafka_config, engine):
    cases = generated(EXAMPLES)
    name = f"hostile_gen_{uuid.uuid4().hex[:6]}"
    columns = {c: {"type": t, "required": c == "id"} for c, t in COLUMNS.items()}
    spec = orders_spec(name, name, key=["id"], columns=columns, max_dead_letter_ratio=1.0)
    offsets = produce_corpus(kafka_config, name, cases)
    results, states = [], []
    for attempt in ("first", "second"):
        plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), f"{name}_{attempt}")
        run_spark_stage(spec, plan.run_id)
        results.append(commit_stored(engine, spec, plan.run_id))
        states.append(snapshot(engine, spec))

    rows = {r["_kafka_offset"]: r for r in states[0][0]}
    dead = {d["offset"] for d in states[0][1]}
    assert results[0].records_read == len(cases)
    assert set(rows).isdisjoint(dead) and set(rows) | dead == set(offsets.values())
    assert (results[0].rows_upserted, results[0].dead_letters) == (len(rows), len(dead))
    for case in cases:
        row = rows.get(offsets[case.name])
        if row is None:
            continue
        assert strict_json_object(case.value) is not None, case.value  # JSON's own rules: only an object is a row
        assert row["id"] == case.name  # a row is its own record's
        for column, written in (case.row or {}).items():
            if COLUMNS.get(column) == "text":
                # stored as written; an object, an array or a fractional number is no text
                assert isinstance(written, str | int | None) and row[column] == _text(written), (case.value, column)
            if COLUMNS.get(column) in ("bigint", "integer") and type(written) is int:
                assert row[column] == written, (case.value, column)
    assert (results[1].rows_upserted, results[1].dead_letters) == (0, results[0].dead_letters)
    assert repr(states[1]) == repr(states[0])  # the second run changed nothing
    print(f"generated={len(cases)} rows={len(rows)} dead_letters={len(dead)}")


AVRO = {"type": "record", "name": "Gen", "namespace": "h", "fields": [
    {"name": "t", "type": ["null", "string"], "default": None},
    {"name": "b", "type": ["null", "long"], "default": None},
    {"name": "d", "type": ["null", "double"], "default": None},
    {"name": "f", "type": ["null", "boolean"], "default": None},
]}  # fmt: skip
AVRO_VALUES = st.fixed_dictionaries(
    {},
    optional={
        "t": st.none() | st.text(),
        "b": st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1),
        "d": st.none() | st.floats(),
        "f": st.none() | st.booleans(),
    },
)
AVRO_EXAMPLES = 600


def test_generated_avro_payloads_each_end_as_one_row_or_one_dead_letter(schema_registry, kafka_config, engine):
    """Avro (Confluent wire format): values serialized by confluent-kafka's ``AvroSerializer`` (any
    text, NUL included; NaN and infinite doubles; the long's bounds) and arbitrary bytes after a
    valid header. The key is the record's offset (``$offset``), so no record supersedes another."""
    import os
    from pathlib import Path

    import yaml
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from reprocess.formats.specs import read_spec

    name = f"hostile_avro_{uuid.uuid4().hex[:6]}"
    client = SchemaRegistryClient({"url": schema_registry})
    schema_id = client.register_schema(f"{name}-value", Schema(json.dumps(AVRO), "AVRO"))
    conf = {"auto.register.schemas": False, "subject.name.strategy.type": "TOPIC"}  # test_avro_format says why TOPIC
    serialize = AvroSerializer(client, json.dumps(AVRO), conf=conf)
    ctx = SerializationContext(name, MessageField.VALUE)
    header = b"\x00" + schema_id.to_bytes(4, "big")
    drawn: list[bytes] = []

    @settings(max_examples=AVRO_EXAMPLES, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(st.one_of(AVRO_VALUES.map(lambda v: serialize(v, ctx)), st.binary(max_size=48).map(header.__add__)))
    def collect(value: bytes) -> None:
        drawn.append(value)

    collect()
    cases = [Case(f"a-{k:05d}", "generated avro", value) for k, value in enumerate(drawn)]
    raw = {
        "name": name, "topics": [name], "format": "avro", "key": ["off"], "target_table": f"{name}.gen",
        "max_dead_letter_ratio": 1,
        "columns": {"off": {"type": "bigint", "path": "$offset"}, "t": "text", "b": "bigint",
                    "d": "double precision", "f": "boolean"},
    }  # fmt: skip
    path = Path(os.environ["REPROCESS_PIPELINES_DIR"]) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    spec = read_spec(path)
    offsets = produce_corpus(kafka_config, name, cases)
    results, states = [], []
    for attempt in ("first", "second"):
        plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), f"{name}_{attempt}")
        run_spark_stage(spec, plan.run_id, registry_config=json.dumps({"url": schema_registry}))
        results.append(commit_stored(engine, spec, plan.run_id))
        states.append(snapshot(engine, spec))

    rows = {r["off"] for r in states[0][0]}
    dead = {d["offset"] for d in states[0][1]}
    assert results[0].records_read == len(cases)
    assert rows.isdisjoint(dead) and rows | dead == set(offsets.values())
    assert (results[1].rows_upserted, results[1].dead_letters) == (0, results[0].dead_letters)
    assert repr(states[1]) == repr(states[0])
    print(f"avro generated={len(cases)} rows={len(rows)} dead_letters={len(dead)}")
