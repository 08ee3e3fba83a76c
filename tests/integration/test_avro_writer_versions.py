"""Avro writer schemas the way a Confluent deserializer reads them, on the real parts: records
written by confluent-kafka's ``AvroSerializer`` under two versions registered in Apicurio Registry,
staged by Spark (``from_avro`` over Connect) and committed to Postgres. A record is read with the
writer schema its id names, even when that subject version was soft-deleted since, and resolved
against the subject's latest version by Avro's rules: a field the writer lacks takes the reader's
``default``, a field the reader renamed (``aliases``) keeps its value under the new name.

The oracle decodes each produced payload with plain fastavro (the writer schema fetched by id over
HTTP, the latest version as the reader schema) and imports nothing of the product."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import fastavro
import pytest
import requests
import yaml
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from sqlalchemy import text

from reprocess.core.runs import RunRequest
from reprocess.core.spec import PipelineSpec
from reprocess.core.spec_parse import read_spec
from reprocess.operations.rebuild import swap_in
from reprocess.postgres.commit import commit_run
from reprocess.runner.start import start_run
from tests.support.helpers import run_spark_stage

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("postgres")]

_ID = {"name": "id", "type": "long"}
_STATUS = {"name": "status", "type": ["null", "string"], "default": None}


def _record(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "Order", "namespace": "t", "fields": [_ID, *fields]}


def _spec(name: str, topic: str) -> PipelineSpec:
    raw = {
        "name": name, "topics": [topic], "format": "avro", "key": ["id"], "target_table": f"{name}.orders",
        "max_dead_letter_ratio": 1, "columns": {"id": "bigint", "customer": "text", "status": "text"},
    }  # fmt: skip
    path = Path(os.environ["REPROCESS_PIPELINES_DIR"]) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return read_spec(path)


def _produce(
    registry: str, kafka_config: dict[str, Any], topic: str, writes: list[tuple[dict, dict]]
) -> dict[int, tuple[Any, Any]]:
    """Register each writer schema in turn under ``<topic>-value`` and produce its record; what
    the oracle decodes from the values sent."""
    client = SchemaRegistryClient({"url": registry})
    ctx = SerializationContext(topic, MessageField.VALUE)
    conf = {"auto.register.schemas": False, "use.latest.version": False, "subject.name.strategy.type": "TOPIC"}
    producer = Producer(kafka_config)
    sent = []
    for schema, record in writes:
        client.register_schema(f"{topic}-value", Schema(json.dumps(schema), "AVRO"))
        value = AvroSerializer(client, json.dumps(schema), conf=conf)(record, ctx)
        producer.produce(topic, key=str(record.get("id", record.get("ident"))).encode(), value=value)
        sent.append(value)
    producer.flush(30)
    return _oracle(registry, topic, sent)


def _oracle(registry: str, topic: str, sent: list[bytes]) -> dict[int, tuple[Any, Any]]:
    """id → (customer, status): each value decoded by fastavro with its writer schema (by id, as
    a Confluent deserializer fetches it) and the subject's latest version as the reader schema."""
    latest = requests.get(f"{registry}/subjects/{topic}-value/versions/latest", timeout=30).json()["schema"]
    reader = fastavro.parse_schema(json.loads(latest))
    rows = {}
    for value in sent:
        assert value[0] == 0
        sid = int.from_bytes(value[1:5], "big")
        writer = requests.get(f"{registry}/schemas/ids/{sid}", timeout=30).json()["schema"]
        doc = fastavro.schemaless_reader(io.BytesIO(value[5:]), fastavro.parse_schema(json.loads(writer)), reader)
        rows[doc["id"]] = (doc.get("customer"), doc.get("status"))
    return rows


def _run(engine: Any, kafka_config: dict[str, Any], spec: PipelineSpec, registry: str, run_id: str,
         params: dict[str, Any]) -> Any:  # fmt: skip
    config = {"url": registry}
    start_run(engine, kafka_config, spec, RunRequest.from_params(params), run_id)
    run_spark_stage(spec, run_id, registry_config=json.dumps(config))
    if params.get("mode") == "rebuild":
        return swap_in(engine, spec, run_id)
    return commit_run(engine, spec, run_id)


def _rows(engine: Any, spec: PipelineSpec) -> dict[int, tuple[Any, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(text(f"SELECT id, customer, status FROM {spec.qualified_target}"))
        return {i: (c, s) for i, c, s in rows}


def _dead_letters(engine: Any, spec: PipelineSpec) -> list[str]:
    with engine.connect() as conn:
        sql = "SELECT error FROM reprocess.dead_letters WHERE pipeline LIKE :p"
        rows = conn.execute(text(sql), {"p": f"{spec.name}%"})
        return [e for (e,) in rows]


def _assert_lands(engine: Any, kafka_config: dict[str, Any], registry: str, name: str,
                  expected: dict[int, tuple[Any, Any]], *, rebuild: bool = False) -> None:  # fmt: skip
    """An incremental (then, with ``rebuild``, a rebuild) of the topic ``name`` leaves the target
    equal to ``expected`` with no dead letter."""
    spec = _spec(name, name)
    _run(engine, kafka_config, spec, registry, f"{name}-1", {})
    assert (_rows(engine, spec), _dead_letters(engine, spec)) == (expected, [])
    if rebuild:
        _run(engine, kafka_config, spec, registry, f"{name}-rebuild", {"mode": "rebuild"})
        assert (_rows(engine, spec), _dead_letters(engine, spec)) == (expected, [])


def test_records_of_a_soft_deleted_subject_version_still_decode_and_survive_a_rebuild(
    schema_registry, kafka_config, engine, unique_name
):
    v1 = _record({"name": "customer", "type": "string"})
    v2 = _record({"name": "customer", "type": "string"}, _STATUS)
    expected = _produce(schema_registry, kafka_config, unique_name, [
        (v1, {"id": 1, "customer": "alice"}), (v1, {"id": 2, "customer": "bob"}),
        (v2, {"id": 3, "customer": "carol", "status": "paid"}),
    ])  # fmt: skip
    deleted = requests.delete(f"{schema_registry}/subjects/{unique_name}-value/versions/1", timeout=30)
    assert deleted.status_code == 200, deleted.text
    assert expected == {1: ("alice", None), 2: ("bob", None), 3: ("carol", "paid")}
    _assert_lands(engine, kafka_config, schema_registry, unique_name, expected, rebuild=True)


def test_a_field_the_writer_version_lacks_takes_the_reader_default(schema_registry, kafka_config, engine, unique_name):
    v1 = _record({"name": "customer", "type": "string"})
    v2 = _record({"name": "customer", "type": "string"}, {"name": "status", "type": "string", "default": "new"})
    expected = _produce(schema_registry, kafka_config, unique_name, [
        (v1, {"id": 1, "customer": "alice"}), (v2, {"id": 2, "customer": "bob", "status": "paid"}),
    ])  # fmt: skip
    assert expected == {1: ("alice", "new"), 2: ("bob", "paid")}
    _assert_lands(engine, kafka_config, schema_registry, unique_name, expected)


def test_a_field_renamed_with_aliases_keeps_its_value_under_the_new_name(
    schema_registry, kafka_config, engine, unique_name
):
    v1 = _record({"name": "buyer", "type": "string"}, _STATUS)
    v2 = _record({"name": "customer", "type": "string", "aliases": ["buyer"]}, _STATUS)
    expected = _produce(schema_registry, kafka_config, unique_name, [
        (v1, {"id": 1, "customer": "x", "buyer": "alice", "status": "new"}),
        (v2, {"id": 2, "customer": "bob", "status": "paid"}),
    ])  # fmt: skip
    assert expected == {1: ("alice", "new"), 2: ("bob", "paid")}
    _assert_lands(engine, kafka_config, schema_registry, unique_name, expected)


def test_a_rebuild_verifies_a_key_renamed_with_aliases_as_the_job_reads_it(
    schema_registry, kafka_config, engine, unique_name
):
    """The rebuild's check reads the records the way the job does: a key under its old name in
    version 1 is the same key, so the shadow is complete and the swap goes through."""
    customer = {"name": "customer", "type": "string"}
    v1 = {"type": "record", "name": "Order", "namespace": "t", "fields": [
        {"name": "ident", "type": "long"}, customer, _STATUS]}  # fmt: skip
    v2 = _record(customer, _STATUS)
    v2["fields"][0] = {**_ID, "aliases": ["ident"]}
    expected = _produce(schema_registry, kafka_config, unique_name, [
        (v1, {"ident": 1, "customer": "alice", "status": "new"}), (v2, {"id": 2, "customer": "bob", "status": "paid"}),
    ])  # fmt: skip
    assert expected == {1: ("alice", "new"), 2: ("bob", "paid")}
    _assert_lands(engine, kafka_config, schema_registry, unique_name, expected, rebuild=True)
