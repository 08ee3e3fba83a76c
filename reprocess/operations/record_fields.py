"""A record's key and ordering fields in Python, per the spec's format, for the rebuild's
verification (:mod:`reprocess.operations.rebuild_verify`), which runs in the commit task without
Spark. Each field is the TEXT the Spark decoder reads before typing it (:mod:`reprocess.formats`):
Postgres casts both the same way, so a key matches whichever side read it. A record the decoders
would dead-letter yields None here too (the verification skips dead-lettered offsets anyway).

JSON keeps numbers as their text (as ``from_json`` reads a string field); Avro values are read
with confluent-kafka's ``AvroDeserializer`` through the registry (the writer schema by id).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from reprocess.core.spec import ColumnSpec, ColumnType, DecimalHandling, Encoding, Format, PipelineSpec, TombstoneMode
from reprocess.kafka.registry import SUBJECTS_BY_TOPIC

if TYPE_CHECKING:
    from confluent_kafka import Message

# A Debezium tombstone's position under column ordering: the lowest of the column's type
# (reprocess.formats.debezium: it deletes nothing a positioned event wrote).
_LOWEST: Final = {
    ColumnType.BIGINT: "-9223372036854775808", ColumnType.INTEGER: "-2147483648", ColumnType.DOUBLE: "-Infinity",
    ColumnType.NUMERIC: "-99999999999999999999999999999.999999999", ColumnType.TIMESTAMPTZ: "0001-01-01T00:00:00Z",
    ColumnType.TEXT: "", ColumnType.BOOLEAN: "false", ColumnType.SMALLINT: "-32768", ColumnType.REAL: "-Infinity",
    ColumnType.TIMESTAMP: "0001-01-01T00:00:00", ColumnType.DATE: "0001-01-01",
}  # fmt: skip
Decode = Callable[[bytes | None, bool], Any]  # (raw, is_key) → the decoded document or None


def json_doc(raw: bytes | None, is_key: bool = False) -> Any:
    """JSON with numbers kept as their text, as Spark's ``from_json`` reads a string field."""
    try:
        return json.loads(raw or b"", parse_int=str, parse_float=str, parse_constant=str)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None


def avro_decoder(registry: Mapping[str, Any], topic: str) -> Decode:
    """Framed Avro → a dict, through the registry (each writer schema fetched once by id)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    deserialize = AvroDeserializer(SchemaRegistryClient(dict(registry)), conf=dict(SUBJECTS_BY_TOPIC))
    contexts = {
        False: SerializationContext(topic, MessageField.VALUE),
        True: SerializationContext(topic, MessageField.KEY),
    }

    def decode(raw: bytes | None, is_key: bool) -> Any:
        if not raw or raw[0] != 0:
            return None
        try:
            return deserialize(raw, contexts[is_key])
        except Exception:  # an unknown id or an unreadable payload: the decoder's dead letter
            return None

    return decode


def at(doc: Any, path: str) -> Any:
    for part in path.split("."):
        doc = doc.get(part) if isinstance(doc, dict) else None
    return doc


def text(node: Any) -> str | None:
    if node is None or isinstance(node, str):
        return node
    if isinstance(node, bytes):
        return "\\x" + node.hex()
    if isinstance(node, bool):
        return "true" if node else "false"
    if isinstance(node, date | datetime):
        return node.isoformat()
    if isinstance(node, dict | list):
        return json.dumps(node, separators=(",", ":"), default=str)
    return str(node)


_EPOCH: Final = datetime(1970, 1, 1)


def semantic_text(c: ColumnSpec, node: Any, spec: PipelineSpec) -> str | None:
    """A Debezium field's text as the decoders type it (:mod:`reprocess.formats.typed`): a count of
    Debezium's temporal types as ISO text, a JSON converter's base64 bytes as ``bytea`` hex or, in
    ``precise`` mode, a decimal at the column's scale; else :func:`text`.

    Examples
    --------
    >>> from reprocess.core.spec_parse import parse_spec
    >>> spec = parse_spec({"name": "p", "topics": ["t"], "key": ["d"], "format": "debezium",
    ...     "decimal_handling_mode": "precise", "columns": {"d": "date", "n": "numeric(5,2)", "b": "bytea"}})
    >>> d, n, b = spec.columns
    >>> semantic_text(d, 19782, spec), semantic_text(n, "/4M=", spec), semantic_text(b, "AAH/", spec)
    ('2024-02-29', '-1.25', '\\\\x0001ff')
    """
    kind = c.type
    integer = isinstance(node, int) and not isinstance(node, bool)
    if integer and kind is ColumnType.DATE:
        return (_EPOCH + timedelta(days=node)).date().isoformat()
    if integer and kind is ColumnType.TIMESTAMP:
        return (_EPOCH + timedelta(microseconds=node)).isoformat()
    if integer and kind is ColumnType.TIME:
        return (_EPOCH + timedelta(microseconds=node)).time().isoformat()
    if isinstance(node, str) and kind is ColumnType.BYTEA and spec.encoding is Encoding.JSON:
        return text(base64.b64decode(node))
    precise = spec.decimal_handling is DecimalHandling.PRECISE and spec.encoding is Encoding.JSON
    if kind is ColumnType.NUMERIC and precise and isinstance(node, str) and c.numeric is not None:
        return str(scaleb(int.from_bytes(base64.b64decode(node), "big", signed=True), -c.numeric[1]))
    if kind is ColumnType.NUMERIC and isinstance(node, dict) and {"scale", "value"} <= set(node):
        value = node["value"] if isinstance(node["value"], bytes) else base64.b64decode(str(node["value"]))
        return str(scaleb(int.from_bytes(value, "big", signed=True), -int(node["scale"])))
    return text(node)


def scaleb(unscaled: int, exponent: int) -> Decimal:
    """``unscaled × 10^exponent``, exact."""
    return Decimal(unscaled).scaleb(exponent)


def _part(c: ColumnSpec, msg: Message, key_doc: Any) -> str | None:
    """A ``$`` path of the record itself (reprocess.formats.record_parts), as text."""
    path = c.path
    if path == "$key":
        return None if msg.key() is None else bytes(msg.key() or b"").decode("utf-8", "replace")
    if path.startswith("$key."):
        return text(at(key_doc, path.removeprefix("$key.")))
    if path.startswith("$headers."):
        name = path.removeprefix("$headers.")
        values: list[Any] = [h[1] for h in msg.headers() or [] if h[0] == name]
        last = values[-1] if values else None
        return last if last is None or isinstance(last, str) else bytes(last).decode("utf-8", "replace")
    if path == "$timestamp":
        ms = msg.timestamp()[1]
        if c.type in (ColumnType.BIGINT, ColumnType.NUMERIC, ColumnType.DOUBLE):
            return str(ms)
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat()
    return {"$partition": str(msg.partition()), "$offset": str(msg.offset()), "$topic": msg.topic()}.get(path)


def record_fields(
    spec: PipelineSpec, fields: Iterable[ColumnSpec], msg: Message, decode: Decode
) -> tuple[bool, list[str | None]] | None:
    """(deletes, the fields' texts) of a record, or None when it carries no state (a null value
    kept as a dead letter, or a record the decoder would dead-letter)."""
    fields = list(fields)
    key_doc = json_doc(msg.key()) if spec.format is not Format.DEBEZIUM or spec.encoding is Encoding.JSON else None
    if spec.format is Format.DEBEZIUM:
        return _debezium(spec, fields, msg, decode, key_doc)
    if msg.value() is None:
        if spec.tombstones is not TombstoneMode.DELETE:
            return None
        if not isinstance(key_doc, dict):  # a plain key is the text of a one-column key
            if msg.key() is None or len(spec.key) != 1:
                return None
            return True, [bytes(msg.key() or b"").decode("utf-8", "replace")]
        return True, [_part(c, msg, key_doc) if not c.from_value else text(at(key_doc, c.path))
                      for c in fields if c.name in spec.key]  # fmt: skip
    doc = decode(msg.value(), False)
    if not isinstance(doc, dict):
        return None
    return False, [_part(c, msg, key_doc) if not c.from_value else text(at(doc, c.path)) for c in fields]


def _debezium(
    spec: PipelineSpec, fields: list[ColumnSpec], msg: Message, decode: Decode, key_doc: Any
) -> tuple[bool, list[str | None]] | None:
    key = decode(msg.key(), True) if spec.encoding is Encoding.AVRO else key_doc
    key = key.get("payload", key) if isinstance(key, dict) and "schema" in key else key
    doc = None if msg.value() is None else decode(msg.value(), False)
    env = doc.get("payload") if isinstance(doc, dict) and isinstance(doc.get("payload"), dict) else doc
    if msg.value() is not None and not isinstance(env, dict):
        return None
    op = None if env is None else env.get("op")
    out: list[str | None] = []
    for c in fields:
        if not c.from_value and not c.path.startswith(("$source.", "$op", "$ts_ms")):
            out.append(_part(c, msg, key_doc))
        elif env is None:  # the tombstone: its key from the Kafka key, the lowest position
            out.append(semantic_text(c, at(key, c.path), spec) if c.name in spec.key else _LOWEST.get(c.type))
        elif not c.from_value:
            out.append(text(at(env, c.path.removeprefix("$"))))
        elif op == "d":
            before = semantic_text(c, at(env, f"before.{c.path}"), spec)
            out.append(before or semantic_text(c, at(key, c.path), spec))
        else:
            out.append(semantic_text(c, at(env, f"after.{c.path}"), spec))
    if env is not None and op not in ("c", "r", "u", "d"):
        return None
    return env is None or op == "d", out
