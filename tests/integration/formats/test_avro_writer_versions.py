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
from reprocess.formats.specs import read_spec
from reprocess.runner.start import commit_stored, start_run
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
    return _oracle(registry, topic, _send(registry, kafka_config, topic, writes))


def _send(registry: str, kafka_config: dict[str, Any], topic: str, writes: list[tuple[dict, dict]]) -> list[bytes]:
    """Register each writer schema in turn under ``<topic>-value`` and produce its record; the values sent."""
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
    return sent


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
        return commit_stored(engine, spec, run_id)
    return commit_stored(engine, spec, run_id)


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


def _amounts(engine: Any, spec: PipelineSpec) -> dict[int, Any]:
    with engine.connect() as conn:
        return dict(conn.execute(text(f"SELECT id, amount FROM {spec.qualified_target}")).all())


def test_a_rename_registered_before_the_spec_changes_keeps_the_mapped_column_in_a_replay(
    schema_registry, kafka_config, engine, unique_name
):
    """The spec maps ``amount``; version 2 renames it ``total`` with ``aliases: [amount]`` (BACKWARD
    compatible) before anyone edits the spec. A replay of the range (version 1's records and
    version 2's) reads the spec's field by its alias in every version: no stored value turns NULL."""
    maybe = ["null", "double"]
    v1 = _record({"name": "amount", "type": maybe, "default": None})
    v2 = _record({"name": "total", "type": maybe, "default": None, "aliases": ["amount"]})
    _send(schema_registry, kafka_config, unique_name, [(v1, {"id": 1, "amount": 1.5}), (v1, {"id": 2, "amount": 2.5})])
    raw = {
        "name": unique_name, "topics": [unique_name], "format": "avro", "key": ["id"],
        "target_table": f"{unique_name}.orders", "columns": {"id": "bigint", "amount": "double precision"},
    }  # fmt: skip
    path = Path(os.environ["REPROCESS_PIPELINES_DIR"]) / f"{unique_name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    spec = read_spec(path)
    _run(engine, kafka_config, spec, schema_registry, f"{unique_name}-1", {})
    assert _amounts(engine, spec) == {1: 1.5, 2: 2.5}
    _send(schema_registry, kafka_config, unique_name, [(v2, {"id": 3, "total": 3.5})])
    _run(engine, kafka_config, spec, schema_registry, f"{unique_name}-replay", {})  # the whole range again
    assert (_amounts(engine, spec), _dead_letters(engine, spec)) == ({1: 1.5, 2: 2.5, 3: 3.5}, [])


def test_a_soft_deleted_version_registered_again_is_the_latest_by_version_number(
    schema_registry, kafka_config, engine, unique_name
):
    """Version 3 (status default "two") is soft-deleted and registered again: version 4, under
    version 3's schema id, is the registry's latest, not version 2 (default "one") although its id
    was listed first. Records lacking ``status`` take the latest's default, as a Confluent
    deserializer (the oracle) reads them."""
    subject, customer = f"{unique_name}-value", {"name": "customer", "type": "string"}
    one = _record(customer, {"name": "status", "type": "string", "default": "one"})
    two = _record(customer, {"name": "status", "type": "string", "default": "two"})
    sent = _send(schema_registry, kafka_config, unique_name, [(_record(customer), {"id": 1, "customer": "alice"})])
    client = SchemaRegistryClient({"url": schema_registry})
    client.register_schema(subject, Schema(json.dumps(one), "AVRO"))
    first = client.register_schema(subject, Schema(json.dumps(two), "AVRO"))
    client.delete_version(subject, 3)
    fresh = SchemaRegistryClient({"url": schema_registry})  # the first one answers from its cache
    again = fresh.register_schema(subject, Schema(json.dumps(two), "AVRO"))
    latest = requests.get(f"{schema_registry}/subjects/{subject}/versions/latest", timeout=30).json()
    assert (again, latest["version"], latest["id"]) == (first, 4, first)
    expected = _oracle(schema_registry, unique_name, sent)
    assert expected == {1: ("alice", "two")}
    _assert_lands(engine, kafka_config, schema_registry, unique_name, expected)


def test_a_plan_is_stale_when_the_registry_changes_how_its_records_read(
    schema_registry, kafka_config, engine, unique_name
):
    """A version registered between plan and apply that changes nothing the spec reads (a field it
    does not map) leaves the plan fresh; one that changes what the plan's records read as (the
    latest's default for a field their writer lacks) makes the apply stale, refused before it reads."""
    from reprocess.core.errors import StalePlanError
    from reprocess.core.stages import for_task
    from reprocess.core.tasks import Task
    from reprocess.runner.evaluate import RunContext, evaluate
    from reprocess.runner.preview import start_apply

    subject, customer = f"{unique_name}-value", {"name": "customer", "type": "string"}
    config = json.dumps({"url": schema_registry})
    client = SchemaRegistryClient({"url": schema_registry})
    spec = _spec(unique_name, unique_name)

    def register(default: str, *extra: dict[str, Any]) -> None:
        status = {"name": "status", "type": "string", "default": default}
        client.register_schema(subject, Schema(json.dumps(_record(customer, status, *extra)), "AVRO"))

    def stage(stages: Any, run_id: str) -> None:
        run_spark_stage(spec, run_id, kafka=kafka_config, registry_config=config)
        evaluate(for_task(stages, Task.COMMIT), RunContext(engine, spec))

    def plan(name: str) -> None:
        stage(start_run(engine, kafka_config, spec, RunRequest.from_params({"preview": True}), name)[1], name)

    _send(schema_registry, kafka_config, unique_name, [(_record(customer), {"id": 1, "customer": "alice"})])
    register("one")
    plan(f"{unique_name}-p1")
    register("one", {"name": "note", "type": ["null", "string"], "default": None})  # nothing the spec maps
    stage(start_apply(engine, kafka_config, spec, f"{unique_name}-p1", f"{unique_name}-a1")[1], f"{unique_name}-a1")
    assert _rows(engine, spec) == {1: ("alice", "one")}

    plan(f"{unique_name}-p2")
    register("two")  # the records of the first version now read status "two"
    stages = start_apply(engine, kafka_config, spec, f"{unique_name}-p2", f"{unique_name}-a2")[1]
    with pytest.raises(StalePlanError, match=r"p2 is stale: the Schema Registry changed how the records of schema id"):
        stage(stages, f"{unique_name}-a2")
    assert _rows(engine, spec) == {1: ("alice", "one")}
