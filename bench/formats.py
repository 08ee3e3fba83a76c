"""One product line per spec ``format`` (``--formats``): the bench's N order events written as
Avro (confluent-kafka's ``AvroSerializer``, writer schema in the registry) and as Debezium change
events (JSON envelopes, ``source.lsn`` the record's number), each staged by the product over
Spark Connect like the ``json`` line. The same events in the same partitions and offsets, so
every format's target must equal ceiling A's (the cross-checks say so).
"""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from typing import Any, Final

from bench.context import Bench, Result
from bench.data import Dataset, Encoder, produce_dataset
from bench.product import SparkConnect, product

FORMATS: Final = ("avro", "debezium")
AVRO_SCHEMA: Final = {
    "type": "record", "name": "Order", "namespace": "bench",
    "fields": [
        {"name": "order_id", "type": "string"}, {"name": "customer_id", "type": "string"},
        {"name": "status", "type": "string"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
        {"name": "currency", "type": "string"}, {"name": "items", "type": "int"},
        {"name": "updated_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "channel", "type": "string"}, {"name": "note", "type": "string"},
    ],
}  # fmt: skip


def _avro_encoder(topic: str) -> Encoder:
    """Confluent-framed Avro of an event, its schema registered under ``<topic>-value``; a
    tombstone stays a null value."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from devstack import registry

    registry.start()
    client = SchemaRegistryClient({"url": registry.ccompat_url()})
    # TOPIC: the subject is "<topic>-value"; confluent-kafka's default (ASSOCIATED) first asks the
    # registry for /associations, which Apicurio does not serve.
    serializer = AvroSerializer(client, json.dumps(AVRO_SCHEMA), conf={"subject.name.strategy.type": "TOPIC"})
    ctx = SerializationContext(topic, MessageField.VALUE)

    def encode(_i: int, _key: str, body: dict[str, Any] | None) -> bytes | None:
        if body is None:
            return None
        typed = {**body, "amount": Decimal(body["amount"]),
                 "updated_at": datetime.fromisoformat(body["updated_at"].replace("Z", "+00:00"))}  # fmt: skip
        return bytes(serializer(typed, ctx) or b"")

    return encode


def _debezium(i: int, key: str, body: dict[str, Any] | None) -> bytes:
    """A Debezium change event (JSON converter without schemas) of event ``i``; a tombstone of the
    bench data is a delete (``op: d``, the key in ``before``), which carries its position."""
    if body is None:
        envelope = {"before": {"order_id": key}, "after": None, "op": "d",
                    "source": {"connector": "postgresql", "lsn": 1_000 + i}, "ts_ms": 0}  # fmt: skip
        return json.dumps(envelope, separators=(",", ":")).encode()
    envelope = {"before": None, "after": body, "op": "c" if body["status"] == "created" else "u",
                "source": {"connector": "postgresql", "lsn": 1_000 + i}, "ts_ms": 0}  # fmt: skip
    return json.dumps(envelope, separators=(",", ":")).encode()


def _spec_overrides(fmt: str) -> dict[str, Any]:
    if fmt == "avro":
        return {"format": "avro"}
    columns = {"lsn": {"type": "bigint", "path": "$source.lsn", "required": True}}
    return {"format": "debezium", "ordering": {"mode": "column", "column": "lsn"}, "extra_columns": columns}


def format_dataset(bench: Bench, fmt: str, records: int) -> Dataset:
    """The bench's events in format ``fmt``, in a topic of their own."""
    topic = f"{bench.tag}_{fmt}_{records}"
    return produce_dataset(bench.kafka, topic, records, encode=_avro_encoder(topic) if fmt == "avro" else _debezium)


def format_product(bench: Bench, ds: Dataset, fmt: str, label: str) -> Result:
    """The product over Spark Connect on the format's topic, its spec the orders spec in that format."""
    result = product(bench, ds, SparkConnect(), label, **_spec_overrides(fmt))
    result.case = f"product on spark-connect, format {fmt}: plan → Spark → commit ({label})"
    return result
