"""The adversary's avro oracle reads records by Avro's rules as docs/formats/avro.md states them
(issue 56): its own binary decoder agrees with fastavro, a rename is followed through aliases in any
version, a field the writer lacks takes the latest live version's default. No service needed."""

from __future__ import annotations

import io
import json
import math

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
        theirs = fastavro.schemaless_reader(io.BytesIO(r.value[5:]), fastavro.parse_schema(writer))
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
