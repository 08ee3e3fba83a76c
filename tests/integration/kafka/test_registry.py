"""Apicurio Registry as the Schema Registry: confluent-kafka's own client, serializer and
deserializer against its Confluent-compatible API, and Debezium's change events written as Avro
through it by the Kafka Connect worker. Expected values are written out here."""

from __future__ import annotations

import struct
import time
from typing import Any

import psycopg2
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from devstack import debezium, kafka_connect, registry

pytestmark = [pytest.mark.integration("kafka"), pytest.mark.integration("postgres")]

ORDER_V1 = (
    '{"type": "record", "name": "Order", "namespace": "reprocess.test", "fields": ['
    '{"name": "id", "type": "int"}, {"name": "customer", "type": "string"}]}'
)
ORDER_V2 = (  # a field added with a default: a backward-compatible second version
    '{"type": "record", "name": "Order", "namespace": "reprocess.test", "fields": ['
    '{"name": "id", "type": "int"}, {"name": "customer", "type": "string"},'
    '{"name": "status", "type": ["null", "string"], "default": null}]}'
)


def _read(kafka_config: dict[str, Any], topic: str, count: int, seconds: float = 60) -> list[Any]:
    consumer = Consumer({**kafka_config, "group.id": f"{topic}-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    records: list[Any] = []
    deadline = time.monotonic() + seconds
    try:
        while len(records) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                records.append(msg)
    finally:
        consumer.close()
    return records


def test_schemas_register_and_records_round_trip_through_kafka(schema_registry, kafka_config, unique_name):
    client = SchemaRegistryClient({"url": schema_registry})
    subject = f"{unique_name}-value"
    v1 = client.register_schema(subject, Schema(ORDER_V1, "AVRO"))
    assert client.register_schema(subject, Schema(ORDER_V1, "AVRO")) == v1, "registering again is idempotent"
    v2 = client.register_schema(subject, Schema(ORDER_V2, "AVRO"))
    assert v2 != v1
    assert client.get_versions(subject) == [1, 2]
    assert client.get_latest_version(subject).schema_id == v2
    assert '"status"' in client.get_schema(v2).schema_str and '"status"' not in client.get_schema(v1).schema_str

    topic = unique_name
    producer = Producer(kafka_config)
    for schema, record in [(ORDER_V1, {"id": 1, "customer": "alice"}), (ORDER_V2, {"id": 2, "customer": "bob",
                                                                                    "status": "new"})]:  # fmt: skip
        conf = {"auto.register.schemas": False, "use.latest.version": False, "subject.name.strategy.type": "TOPIC"}
        serialize = AvroSerializer(client, schema, conf=conf)  # test_avro_format says why TOPIC
        producer.produce(topic, serialize(record, SerializationContext(topic, MessageField.VALUE)))
    producer.flush(30)

    records = _read(kafka_config, topic, 2)
    # Confluent wire format: magic byte 0, the schema id (big-endian int32), then Avro binary.
    assert [(m.value()[0], struct.unpack(">I", m.value()[1:5])[0]) for m in records] == [(0, v1), (0, v2)]
    # The writer schema comes from the registry by id; subjects by topic (test_avro_format says why).
    deserialize = AvroDeserializer(client, conf={"subject.name.strategy.type": "TOPIC"})
    decoded = [deserialize(m.value(), SerializationContext(topic, MessageField.VALUE)) for m in records]
    assert decoded == [{"id": 1, "customer": "alice"}, {"id": 2, "customer": "bob", "status": "new"}]


@pytest.mark.serial  # restarts the registry, which tests of two lanes use (tests/conftest.py)
def test_registry_keeps_its_schemas_across_a_restart(schema_registry, unique_name):
    client = SchemaRegistryClient({"url": schema_registry})
    schema_id = client.register_schema(f"{unique_name}-value", Schema(ORDER_V1, "AVRO"))
    registry.stop()
    registry.start()
    fresh = SchemaRegistryClient({"url": schema_registry})  # no cache
    assert fresh.get_schema(schema_id).schema_str == client.get_schema(schema_id).schema_str


def test_debezium_change_events_as_avro_through_the_registry(
    debezium_connector, schema_registry, kafka_config, unique_name
):
    table, prefix = unique_name, f"avro_{unique_name}"
    conn = psycopg2.connect(debezium.source_dsn())
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute(f"CREATE TABLE public.{table} (id int PRIMARY KEY, customer text NOT NULL, amount numeric(10, 2))")
    cur.execute(f"INSERT INTO public.{table} VALUES (1, 'alice', 10.50)")
    config = debezium.connector_config(unique_name, [f"public.{table}"], prefix, **{"decimal.handling.mode": "string"},
                                       **kafka_connect.avro_converter(registry.url()))  # fmt: skip
    debezium_connector(unique_name, config)
    cur.execute(f"UPDATE public.{table} SET amount = 11.00 WHERE id = 1")
    cur.execute(f"DELETE FROM public.{table} WHERE id = 1")
    conn.close()

    topic = f"{prefix}.public.{table}"
    records = _read(kafka_config, topic, 4)
    client = SchemaRegistryClient({"url": schema_registry})
    deserialize = AvroDeserializer(client, conf={"subject.name.strategy.type": "TOPIC"})

    def decode(raw: bytes | None, field: MessageField) -> Any:
        return None if raw is None else deserialize(raw, SerializationContext(topic, field))

    got = []
    for m in records:
        value = decode(m.value(), MessageField.VALUE)
        got.append((decode(m.key(), MessageField.KEY), value and (value["op"], value["before"], value["after"])))
    assert got == [
        ({"id": 1}, ("r", None, {"id": 1, "customer": "alice", "amount": "10.50"})),
        ({"id": 1}, ("u", None, {"id": 1, "customer": "alice", "amount": "11.00"})),
        ({"id": 1}, ("d", {"id": 1, "customer": "", "amount": None}, None)),
        ({"id": 1}, None),  # the tombstone: no value, so nothing to decode
    ]
    assert all(m.value() is None or m.value()[0] == 0 for m in records), "Confluent framing (magic byte 0)"
    assert {f"{topic}-key", f"{topic}-value"} <= set(client.get_subjects())
