"""Every column type of the spec from JSON and from Avro's logical types: the target holds the real
PostgreSQL type, each value equals the one the test sent, a replay writes nothing, and a value
each type cannot hold is a dead letter naming its column while the run commits.

The oracle is the values the test wrote (Python's own types), read back with the driver: never the
product's decoders."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from sqlalchemy import text

from reprocess.core.runs import RunRequest
from reprocess.kafka import demo_data
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.helpers import orders_spec, run_spark_stage

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("spark"), pytest.mark.integration("postgres")]

COLUMNS = {
    "id": {"type": "bigint", "required": True}, "doc": "jsonb", "raw_doc": "json", "ref": "uuid", "born": "date",
    "seen": "timestamp", "opens": "time", "rank": "smallint", "ratio": "real", "blob": "bytea",
    "price": "numeric(20,6)", "tags": "text[]", "ids": "bigint[]",
}  # fmt: skip
# What PostgreSQL's format_type reports for each column: the real types, not text.
PG_TYPES = {
    "id": "bigint", "doc": "jsonb", "raw_doc": "json", "ref": "uuid", "born": "date",
    "seen": "timestamp without time zone", "opens": "time without time zone", "rank": "smallint", "ratio": "real",
    "blob": "bytea", "price": "numeric(20,6)", "tags": "text[]", "ids": "bigint[]",
}  # fmt: skip
NAMES = list(COLUMNS)
REF = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"


# The json format reads these json/jsonb fields' JSON strings as the JSON text they hold (Avro's strings always are).
JSON_COLUMNS = {**COLUMNS, **{c: {"type": COLUMNS[c], "string_is_json": True} for c in ("doc", "raw_doc")}}


def _spec(name: str, **settings: Any) -> Any:
    return orders_spec(name, name, columns=JSON_COLUMNS, key=["id"], ordering="offset", max_dead_letter_ratio=0.9,
                       **settings)  # fmt: skip


def _run(engine: Any, kafka_config: dict[str, Any], spec: Any, run_id: str, **stage: Any) -> Any:
    plan = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.from_params({}), run_id)
    run_spark_stage(spec, plan.run_id, **stage)
    return commit_stored(engine, spec, plan.run_id)


def _rows(engine: Any, spec: Any, names: list[str] = NAMES) -> dict[int, tuple[Any, ...]]:
    """id → the row's values as the driver reads them; json and uuid as their text (jsonb's parsed
    with exact decimals), so no loader of the driver's rounds or reshapes them."""
    as_text = {"doc", "raw_doc", "ref"}
    select = ", ".join(f"{n}::text" if n in as_text else n for n in names)
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT {select} FROM {spec.qualified_target} ORDER BY id")).all()

    def value(name: str, v: Any) -> Any:
        if isinstance(v, memoryview):
            return bytes(v)
        return json.loads(v, parse_float=Decimal) if name == "doc" and v is not None else v

    return {r[0]: tuple(value(n, v) for n, v in zip(names[1:], r[1:], strict=True)) for r in rows}


def _pg_types(engine: Any, spec: Any) -> dict[str, str]:
    with engine.connect() as conn:
        found = conn.execute(
            text(
                "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                "WHERE a.attrelid = to_regclass(:t) AND a.attnum > 0 AND NOT a.attisdropped"
            ),
            {"t": spec.qualified_target},
        ).all()
    return {n: t for n, t in found if n in COLUMNS}


def _dead_letters(engine: Any, spec: Any) -> dict[int, str]:
    """offset → error."""
    with engine.connect() as conn:
        rows = conn.execute(
            text('SELECT "offset", error FROM reprocess.dead_letters WHERE pipeline = :p'), {"p": spec.name}
        ).all()
    return {int(o): e for o, e in rows}


def _produce(kafka_config: dict[str, Any], topic: str, values: list[bytes]) -> None:
    demo_data.create_topic(kafka_config, topic, 1)
    producer = Producer(kafka_config)
    for i, value in enumerate(values):
        producer.produce(topic, key=str(i).encode(), value=value)
    producer.flush(30)


# A JSON number no double holds: the produced text carries it as written.
EXACT = "1.000000000000000000001"
# Two good rows and one of NULLs, with the values Python reads back from PostgreSQL.
GOOD_JSON = [
    {
        "id": 1, "doc": {"b": [1, 2.5], "a": "x", "n": EXACT}, "raw_doc": '{"k": 1,  "k": 2}',
        "ref": "{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11}", "born": "2024-02-29", "seen": "2024-01-01T12:34:56.123456",
        "opens": "23:59:59.999999", "rank": 32767, "ratio": 1.5, "blob": base64.b64encode(b"\x00\x01\xff").decode(),
        "price": "12345678901234.567891", "tags": ['a"b', "c\\d", None, "é", "{x,y}"],
        "ids": [1, None, 9223372036854775807],
    },
    {
        "id": 2, "doc": '{"from": "a string holding JSON"}', "raw_doc": [1, "two"], "ref": REF.replace("-", ""),
        "born": "0001-01-01", "seen": "9999-12-31T23:59:59", "opens": "00:00", "rank": -32768, "ratio": -0.25,
        "blob": "", "price": 1234.5, "tags": [], "ids": [],
    },
    {"id": 3},
]  # fmt: skip
EXPECTED = {
    1: (
        {"a": "x", "b": [1, Decimal("2.5")], "n": Decimal("1.000000000000000000001")}, '{"k": 1,  "k": 2}', REF,
        date(2024, 2, 29), datetime(2024, 1, 1, 12, 34, 56, 123456), time(23, 59, 59, 999999), 32767, 1.5,
        b"\x00\x01\xff", Decimal("12345678901234.567891"), ['a"b', "c\\d", None, "é", "{x,y}"],
        [1, None, 9223372036854775807],
    ),
    2: (
        {"from": "a string holding JSON"}, '[1,"two"]', REF, date(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59),
        time(0, 0), -32768, -0.25, b"", Decimal("1234.5"), [], [],
    ),
    3: (None,) * 12,
}  # fmt: skip
# One value per type that the type cannot hold, and the column its dead letter names.
HOSTILE_JSON = [
    ("doc", '{"a": 1', "type error: column doc is not jsonb: Unexpected end-of-input"),
    ("raw_doc", "[1,", "type error: column raw_doc is not json: Unexpected end-of-input"),
    ("ref", "not-a-uuid", "type error: field ref is not uuid: not-a-uuid"),
    ("born", "2024-02-30", "type error: field born is not date (years 1-9999): 2024-02-30"),
    ("seen", "0000-01-01T00:00:00", "type error: field seen is not timestamp (years 1-9999): 0000-01-01T00:00:00"),
    ("opens", "25:00:00", "type error: field opens is not time: 25:00:00"),
    ("rank", 40000, "type error: field rank is not smallint: 40000"),
    ("ratio", 1e39, "type error: field ratio is not real: 1.0E39"),
    ("blob", "!!!", "type error: field blob is not bytea: !!!"),
    ("price", "123456789012345.1", "type error: field price is not numeric(20,6): 123456789012345.1"),
    ("tags", "not an array", "type error: field tags is not text[]: not an array"),
    ("ids", [1.5], "type error: field ids is not bigint[]: [1.5]"),
]


def test_every_type_from_json_lands_as_its_postgresql_type_and_a_replay_writes_nothing(
    kafka_config, engine, unique_name
):
    spec = _spec(unique_name)
    hostile = [{"id": 100 + i, column: value} for i, (column, value, _) in enumerate(HOSTILE_JSON)]
    exact = json.dumps(EXACT)
    _produce(kafka_config, unique_name, [json.dumps(v).replace(exact, EXACT).encode() for v in GOOD_JSON + hostile])

    first = _run(engine, kafka_config, spec, f"{unique_name}-1")
    assert _pg_types(engine, spec) == PG_TYPES
    assert _rows(engine, spec) == EXPECTED
    dead = _dead_letters(engine, spec)
    assert first.dead_letters == len(HOSTILE_JSON) == len(dead), dead
    for i, (column, _, error) in enumerate(HOSTILE_JSON):  # in offset order after the good rows
        assert error in dead[len(GOOD_JSON) + i], (column, dead[len(GOOD_JSON) + i])

    again = _run(engine, kafka_config, spec, f"{unique_name}-2")  # the whole topic again: nothing changes
    assert (again.rows_upserted, again.dead_letters) == (0, len(HOSTILE_JSON))
    assert _rows(engine, spec) == EXPECTED


# Avro's logical types for the same columns (a decimal as bytes and the id's twin as fixed).
AVRO_SCHEMA = {
    "type": "record", "name": "Typed", "namespace": "test.types",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "doc", "type": ["null", "string"], "default": None},
        {"name": "raw_doc", "type": ["null", "string"], "default": None},
        {"name": "ref", "type": ["null", {"type": "string", "logicalType": "uuid"}], "default": None},
        {"name": "born", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None},
        {"name": "seen", "type": ["null", {"type": "long", "logicalType": "local-timestamp-micros"}], "default": None},
        {"name": "seen_utc", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}], "default": None},
        {"name": "opens", "type": ["null", {"type": "long", "logicalType": "time-micros"}], "default": None},
        {"name": "closes", "type": ["null", {"type": "int", "logicalType": "time-millis"}], "default": None},
        {"name": "rank", "type": ["null", "int"], "default": None},
        {"name": "ratio", "type": ["null", "float"], "default": None},
        {"name": "blob", "type": ["null", "bytes"], "default": None},
        {"name": "price", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 6}],
         "default": None},
        {"name": "cost", "type": ["null", {"type": "fixed", "name": "Cost", "size": 9, "logicalType": "decimal",
                                           "precision": 20, "scale": 2}], "default": None},
        {"name": "tags", "type": ["null", {"type": "array", "items": ["null", "string"]}], "default": None},
        {"name": "ids", "type": ["null", {"type": "array", "items": ["null", "long"]}], "default": None},
    ],
}  # fmt: skip
AVRO_COLUMNS = {**COLUMNS, "seen_utc": "timestamp", "closes": "time", "cost": "numeric(20,2)"}


def test_every_type_from_avro_logical_types_lands_exactly_and_what_a_type_cannot_hold_is_a_dead_letter(
    schema_registry, kafka_config, engine, unique_name
):
    topic = unique_name
    client = SchemaRegistryClient({"url": schema_registry})
    client.register_schema(f"{topic}-value", Schema(json.dumps(AVRO_SCHEMA), "AVRO"))
    conf = {"auto.register.schemas": False, "use.latest.version": False, "subject.name.strategy.type": "TOPIC"}
    serialize = AvroSerializer(client, json.dumps(AVRO_SCHEMA), conf=conf)
    ctx = SerializationContext(topic, MessageField.VALUE)
    good = {
        "id": 1, "doc": '{"b": [1, 2.5], "a": "x"}', "raw_doc": '{"k": 1,  "k": 2}', "ref": uuid.UUID(REF),
        "born": date(2024, 2, 29), "seen": datetime(2024, 1, 1, 12, 34, 56, 123456),
        "seen_utc": datetime(2024, 1, 1, 12, 0, 0, 5000, tzinfo=UTC), "opens": time(23, 59, 59, 999999),
        "closes": time(1, 2, 3, 4000), "rank": 32767, "ratio": 1.5, "blob": b"\x00\x01\xff",
        "price": Decimal("-12345678901234.567891"), "cost": Decimal("123456789012345678.91"),
        "tags": ['a"b', None, "é"], "ids": [1, None, -9223372036854775808],
    }  # fmt: skip
    empty = {"id": 2}
    hostile = [  # a value Avro can write that the column cannot hold
        ({"id": 10, "rank": 40000}, "type error: field rank is not smallint: 40000"),
        ({"id": 11, "doc": "{not json"}, "type error: column doc is not jsonb: Unexpected character"),
    ]
    values = [serialize({**{f["name"]: None for f in AVRO_SCHEMA["fields"]}, **v}, ctx) for v in
              [good, empty, *(h for h, _ in hostile)]]  # fmt: skip
    _produce(kafka_config, topic, values)
    spec = orders_spec(unique_name, topic, columns=AVRO_COLUMNS, key=["id"], ordering="offset", format="avro",
                       max_dead_letter_ratio=0.9)  # fmt: skip
    registry_config = json.dumps({"url": schema_registry})

    first = _run(engine, kafka_config, spec, f"{unique_name}-1", registry_config=registry_config)
    names = [*NAMES, "seen_utc", "closes", "cost"]
    rows = _rows(engine, spec, names)
    assert rows[1] == (
        {"a": "x", "b": [1, Decimal("2.5")]}, '{"k": 1,  "k": 2}', REF, date(2024, 2, 29),
        datetime(2024, 1, 1, 12, 34, 56, 123456), time(23, 59, 59, 999999), 32767, 1.5, b"\x00\x01\xff",
        Decimal("-12345678901234.567891"), ['a"b', None, "é"], [1, None, -9223372036854775808],
        datetime(2024, 1, 1, 12, 0, 0, 5000), time(1, 2, 3, 4000),
        Decimal("123456789012345678.91"),
    )  # fmt: skip
    assert rows[2] == (None,) * (len(names) - 1)
    dead = _dead_letters(engine, spec)
    assert first.dead_letters == len(hostile), dead
    for offset, (_, error) in enumerate(hostile, start=2):
        assert error in dead[offset], dead
    again = _run(engine, kafka_config, spec, f"{unique_name}-2", registry_config=registry_config)
    assert again.rows_upserted == 0
