"""The ``avro`` format on the real parts: records written by confluent-kafka's own
``AvroSerializer`` under two writer schema versions registered in Apicurio Registry (a field
added with a default, a field removed), plus malformed payloads, staged by Spark (``from_avro``
over Connect) and committed to Postgres, through an ``expr`` column (over a value field and a
header) and a ``where``. Expected rows and dead letters are written out here from what was
produced, not computed by the product."""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from sqlalchemy import text

from devstack.process import free_port
from reprocess.core.errors import RegistryError
from reprocess.core.runs import RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.formats.specs import read_spec
from reprocess.runner.start import commit_stored, snapshot_and_migrate
from tests.support.helpers import run_spark_stage

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("postgres")]

_COMMON = [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "placed", "type": {"type": "int", "logicalType": "date"}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "ship", "default": None,
     "type": ["null", {"type": "record", "name": "Ship", "fields": [{"name": "city", "type": "string"}]}]},
]  # fmt: skip
V1 = {"type": "record", "name": "Order", "namespace": "t", "fields": [
    *_COMMON, {"name": "note", "type": ["null", "string"], "default": None}]}  # fmt: skip
V2 = {"type": "record", "name": "Order", "namespace": "t", "fields": [  # note removed, status added
    *_COMMON, {"name": "status", "type": ["null", "string"], "default": None}]}  # fmt: skip


def _spec(name: str, topic: str) -> PipelineSpec:
    raw = {
        "name": name, "topics": [topic], "format": "avro", "key": ["id"], "target_table": f"{name}.orders",
        "max_dead_letter_ratio": 1, "where": "customer <> 'carol'",
        "columns": {
            "label": {"type": "text", "expr": "concat(upper(customer), '@', `$headers.source`)"},
            "id": "bigint", "customer": {"type": "text", "required": True}, "amount": "numeric",
            "placed": "timestamptz", "at": "timestamptz", "uid": "text", "note": "text", "status": "text",
            "city": {"type": "text", "path": "ship.city"}, "source": {"type": "text", "path": "$headers.source"},
            "part": {"type": "integer", "path": "$partition"}, "k": {"type": "text", "path": "$key"},
        },
    }  # fmt: skip
    path = Path(os.environ["REPROCESS_PIPELINES_DIR"]) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return read_spec(path)


def _order(i: int, customer: str, **more: Any) -> dict[str, Any]:
    return {"id": i, "customer": customer, "amount": Decimal(f"{i}.25"), "placed": date(2026, 11, i),
            "at": datetime(2026, 11, 25, 8, i, tzinfo=UTC), "uid": str(uuid.UUID(int=i)), "ship": None,
            **more}  # fmt: skip


def _rows(engine, spec) -> dict[int, tuple[Any, ...]]:
    cols = "id, customer, amount, placed, at, uid, note, status, city, source, part, k, label"
    with engine.connect() as conn:
        conn.execute(text("SET TimeZone = 'UTC'"))
        return {r[0]: tuple(r[1:]) for r in conn.execute(text(f"SELECT {cols} FROM {spec.qualified_target}"))}


def _expected(o: dict[str, Any]) -> tuple[Any, ...]:
    placed = datetime.combine(o["placed"], datetime.min.time(), UTC)
    return (o["customer"], o["amount"], placed, o["at"], o["uid"], o.get("note"), o.get("status"),
            (o["ship"] or {}).get("city"), "shop", 0, str(o["id"]), f"{o['customer'].upper()}@shop")  # fmt: skip


def _dead_letters(engine, spec) -> dict[int, tuple[str, str]]:
    """Offset → (error kind, error) of the pipeline's dead letters."""
    with engine.connect() as conn:
        rows = conn.execute(
            text('SELECT "offset", error_kind, error FROM reprocess.dead_letters WHERE pipeline = :p'), {"p": spec.name}
        )
        return {offset: (kind, error) for offset, kind, error in rows}


def test_two_writer_versions_and_malformed_payloads_then_an_unreachable_registry(
    schema_registry, kafka_config, engine, unique_name
):
    client = SchemaRegistryClient({"url": schema_registry})
    topic = unique_name
    v1 = client.register_schema(f"{topic}-value", Schema(json.dumps(V1), "AVRO"))
    v2 = client.register_schema(f"{topic}-value", Schema(json.dumps(V2), "AVRO"))
    ctx = SerializationContext(topic, MessageField.VALUE)
    # TOPIC: the subjects are "<topic>-value". confluent-kafka's default (ASSOCIATED) first asks the registry
    # for /associations, which Apicurio does not serve: one such request never got its 404 back and hung CI.
    conf = {"auto.register.schemas": False, "use.latest.version": False, "subject.name.strategy.type": "TOPIC"}
    as_v1 = AvroSerializer(client, json.dumps(V1), conf=conf)
    as_v2 = AvroSerializer(client, json.dumps(V2), conf=conf)
    producer = Producer(kafka_config)
    produced: list[tuple[int, bytes]] = []  # (id, value) in offset order

    def send(order_id: int, value: bytes) -> None:
        producer.produce(topic, key=str(order_id).encode(), value=value, headers=[("source", b"shop")])
        producer.flush(30)
        produced.append((order_id, value))

    orders = {
        1: _order(1, "alice", note="first"),
        2: _order(2, "bob", ship={"city": "Lyon"}),
        3: _order(3, "carol"),
    }
    for o in orders.values():
        send(o["id"], as_v1(o, ctx))
    orders[2] = _order(2, "bob", status="paid")  # the same key, newer, under version 2
    orders[4] = _order(4, "dave", status="new", ship={"city": "Oslo"})
    send(2, as_v2(orders[2], ctx))
    send(4, as_v2(orders[4], ctx))
    good = as_v1(_order(9, "x"), ctx)
    send(9, b"\x01" + good[1:])  # offset 5: wrong magic byte
    send(9, b"\x00" + (999_999).to_bytes(4, "big") + good[5:])  # 6: unknown schema id
    send(9, good[:9])  # 7: truncated payload
    send(9, b"\x00\x00")  # 8: shorter than the header
    assert (good[0], int.from_bytes(good[1:5], "big")) == (0, v1) and v1 != v2

    spec = _spec(unique_name, topic)
    run = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-1")
    run_spark_stage(spec, run.run_id, registry_config=json.dumps({"url": schema_registry}))
    result = commit_stored(engine, spec, run.run_id)
    assert (result.records_read, result.dead_letters, result.records_filtered) == (9, 4, 1)  # carol filtered
    kept = {i: _expected(o) for i, o in orders.items() if o["customer"] != "carol"}
    assert _rows(engine, spec) == kept
    dead = _dead_letters(engine, spec)
    kinds = {5: "wrong magic byte", 6: "unknown schema id", 7: "malformed Avro payload", 8: "truncated header"}
    assert {offset: kind for offset, (kind, _) in dead.items()} == kinds
    assert "0x01" in dead[5][1] and "999999" in dead[6][1] and f"schema id {v1} " in dead[7][1], dead
    assert "2 bytes" in dead[8][1], dead

    # The registry unreachable: the run fails with a retryable error naming it, and commits nothing;
    # the same run retried against the registry stages and commits. A port nothing listens on is what a
    # stopped registry is to the client (connection refused); the shared registry keeps running for
    # the tests beside this one (a stop and restart cost a JVM start: ~20-60 s of this test).
    orders[5] = _order(5, "erin", status="new")
    send(5, as_v2(orders[5], ctx))
    before = _rows(engine, spec)
    second = snapshot_and_migrate(engine, kafka_config, spec, RunRequest.incremental(), f"{unique_name}-2")
    unreachable = f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"
    with pytest.raises(RegistryError, match=f"Schema Registry at {unreachable} cannot be reached"):
        run_spark_stage(spec, second.run_id, registry_config=json.dumps({"url": unreachable}))
    assert _rows(engine, spec) == before
    run_spark_stage(spec, second.run_id, registry_config=json.dumps({"url": schema_registry}))  # the retry
    assert commit_stored(engine, spec, second.run_id).rows_upserted == 1
    assert _rows(engine, spec) == {i: _expected(o) for i, o in orders.items() if o["customer"] != "carol"}
