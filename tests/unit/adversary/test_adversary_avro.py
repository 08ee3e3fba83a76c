"""The adversary's avro oracle reads records by Avro's rules as docs/formats/avro.md states them
(issue 56): its own binary decoder agrees with fastavro, a rename is followed through aliases in any
version, a field the writer lacks takes the latest live version's default. No service needed."""

from __future__ import annotations

import io
import json
import math
from datetime import date, datetime
from decimal import Decimal

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings

from tests.adversary import avro
from tests.adversary.avro_oracle import Subject, _Body, decode, values
from tests.adversary.model import Pipeline, Scenario
from tests.adversary.values import Column, Invalid

K = Column("k0", "bigint", True)


def _schema(*fields: dict) -> str:
    return json.dumps({"type": "record", "name": "Row", "fields": [{"name": "k0", "type": "long"}, *fields]})


def _pipeline(*columns: Column) -> Pipeline:
    return Pipeline((K,), (K, *columns), None, "dead_letter", 1, "avro")


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(avro.scenarios(max_records=10, max_steps=0))
def test_the_oracle_decoder_reads_what_fastavro_writes(s: Scenario) -> None:
    subject = Subject.of(s.registry)
    for r in s.records:
        if r.value is None or len(r.value) < 5 or r.value[0] != 0 or not r.note.startswith("v") or " " in r.note:
            continue
        writer = subject.schemas[int.from_bytes(r.value[1:5], "big")]
        plain = json.loads(json.dumps(writer).replace('"logicalType"', '"plainType"'))  # the underlying values
        theirs = fastavro.schemaless_reader(io.BytesIO(r.value[5:]), fastavro.parse_schema(plain))
        ours = decode(writer, _Body(r.value[5:]))
        assert json.dumps(ours, default=repr) == json.dumps(theirs, default=repr)


def test_a_chained_rename_reads_the_old_name_and_a_missing_field_takes_the_latest_default() -> None:
    v1 = _schema({"name": "c0", "type": "double"})
    v2 = _schema({"name": "c0_r1", "type": "double", "aliases": ["c0"]})
    v3 = _schema({"name": "c0_r2", "type": "double", "aliases": ["c0_r1"]}, {"name": "c1", "type": "int", "default": 5})
    registry = {"schemas": [v1, v2, v3], "ops": [["register", 0], ["register", 1], ["register", 2]]}
    p = _pipeline(Column("c0", "double precision"), Column("c1", "integer"))
    old = avro.encode(json.loads(v1), 0, {"k0": 1, "c0": 1.5})
    assert values(p, old, registry) == {"k0": ("int", 1), "c0": ("float", 1.5), "c1": ("int", 5)}


def test_the_latest_is_by_version_number_after_a_soft_deleted_version_is_registered_again() -> None:
    one = _schema({"name": "c0", "type": "string", "default": "one"})
    two = _schema({"name": "c0", "type": "string", "default": "two"})
    ops = [["register", 0], ["register", 1], ["register", 2], ["delete", 2], ["register", 2]]
    registry = {"schemas": [_schema(), one, two], "ops": ops}
    first = avro.encode(json.loads(_schema()), 0, {"k0": 1})
    assert values(_pipeline(Column("c0", "text")), first, registry)["c0"] == "two"
    registry["ops"] = ops[:4]  # deleted, not registered again: version 2 is the latest
    assert values(_pipeline(Column("c0", "text")), first, registry)["c0"] == "one"


@pytest.mark.parametrize(
    ("value", "why"),
    [(b"\x00\x00\x00", "truncated header"), (b"\x01\x00\x00\x00\x00\x02", "wrong magic byte"),
     (b"\x00" + avro.UNKNOWN.to_bytes(4, "big") + b"\x02", "unknown schema id"),
     (b"\x00\x00\x00\x00\x00\x82", "the body ends early")],
)  # fmt: skip
def test_malformed_avro_records_are_dead_letters(value: bytes, why: str) -> None:
    registry = {"schemas": [_schema()], "ops": [["register", 0]]}
    with pytest.raises(Invalid, match=why):
        values(_pipeline(), value, registry)


def test_a_float_written_then_promoted_to_double_keeps_its_float_value() -> None:
    v1, v2 = _schema({"name": "c0", "type": "float"}), _schema({"name": "c0", "type": "double"})
    registry = {"schemas": [v1, v2], "ops": [["register", 0], ["register", 1]]}
    got = values(_pipeline(Column("c0", "double precision")), avro.encode(json.loads(v1), 0, {"k0": 1, "c0": 0.1}),
                 registry)["c0"]  # fmt: skip
    assert got[1] != 0.1 and math.isclose(got[1], 0.1, rel_tol=1e-7)


def test_a_record_the_latest_cannot_read_after_an_older_version_is_registered_again_is_a_dead_letter() -> None:
    narrow, wide = _schema({"name": "c0", "type": ["null", "int"]}), _schema({"name": "c0", "type": ["null", "long"]})
    registry = {"schemas": [narrow, wide], "ops": [["register", 0], ["register", 1], ["delete", 0], ["register", 0]]}
    p = _pipeline(Column("c0", "bigint"))
    with pytest.raises(Invalid, match="cannot read c0"):
        values(p, avro.encode(json.loads(wide), 1, {"k0": 1, "c0": 10}), registry)
    assert values(p, avro.encode(json.loads(wide), 1, {"k0": 1, "c0": None}), registry)["c0"] is None


def _read_one(column: Column, schema: dict, value: object) -> object:
    """What the oracle stores for ``value`` written as ``schema`` in a one-version subject."""
    fields = [{"name": "k0", "type": "long"}, {"name": "c", "type": schema}]
    writer = {"type": "record", "name": "Row", "fields": fields}
    registry = {"schemas": [json.dumps(writer)], "ops": [["register", 0]]}
    return values(_pipeline(column), avro.encode(writer, 0, {"k0": 1, "c": value}), registry)["c"]


@pytest.mark.parametrize(
    ("column", "schema", "value", "stored"),
    [
        (Column("c", "date"), {"type": "int", "logicalType": "date"}, date(9999, 12, 31), ("date", date(9999, 12, 31))),
        (Column("c", "timestamptz"), {"type": "long", "logicalType": "timestamp-millis"},
         datetime(2026, 1, 1, 0, 0, 0, 123000), ("ts", datetime(2026, 1, 1, 0, 0, 0, 123000))),
        (Column("c", "time"), {"type": "long", "logicalType": "time-micros"}, 86_400_000_000, ("time", 86_400_000_000)),
        (Column("c", "numeric(p,s)", False, (6, 2)),
         {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}, Decimal("-9999.95"),
         ("num", Decimal("-9999.95"))),
        (Column("c", "uuid"), {"type": "string", "logicalType": "uuid"}, "A0000000-0000-0000-0000-00000000000F",
         ("uuid", "a0000000-0000-0000-0000-00000000000f")),
    ],
)  # fmt: skip
def test_a_logical_type_reads_as_its_column_reads_the_same_day_instant_or_number(
    column: Column, schema: dict, value: object, stored: object
) -> None:
    assert _read_one(column, schema, value) == stored


@pytest.mark.parametrize(
    ("kind", "raw", "why"),
    [("date", 2_932_897, "beyond years 1-9999"), ("date", -719_163, "beyond years 1-9999"),
     ("timestamp-micros", 253_402_300_800_000_000, "beyond years 1-9999"),
     ("time-millis", 86_400_001, "beyond 24:00:00")],
)  # fmt: skip
def test_a_logical_value_past_what_the_column_holds_is_a_dead_letter(kind: str, raw: int, why: str) -> None:
    column = Column("c", {"date": "date", "timestamp-micros": "timestamptz", "time-millis": "time"}[kind])
    schema = {"type": avro.LOGICAL[kind], "logicalType": kind}
    with pytest.raises(Invalid, match=why):
        _read_one(column, schema, raw)
