"""What an ``avro`` record holds, by Avro's rules, written out here (no Avro library, no product code).

A scenario's value is the Confluent wire format with a placeholder header: magic byte 0, then the
index of the writer version in ``Scenario.registry["schemas"]`` (big-endian int32; the driver swaps
in the schema id the registry gave it when it produces). The record is decoded by the Avro binary
encoding's rules (zig-zag varints, IEEE little-endian floats, length-prefixed bytes and UTF-8
strings, a union's branch index) with its writer version, and a spec column reads, as
docs/formats/avro.md says (the spec is the reader):

- the writer's field of the column's name, or of a name the subject's versions declare the same
  (``aliases``, in any version, soft-deleted ones too, chained), its value promoted to the latest
  version's type by Avro's rules (int → long → double, float → double, bytes → string);
- else the latest live version's ``default`` for that field (latest by version number);
- else NULL (a dead letter when the column is required or a key).

A logical type's value is read as its column reads the same instant, day or number (years 1-9999 and
times up to 24:00:00, else a dead letter): ``date`` days since 1970-01-01, ``time-*`` since midnight,
``timestamp-*`` and ``local-timestamp-*`` since the epoch as UTC's wall clock, ``decimal`` the
big-endian two's-complement unscaled integer at the schema's scale, rounded to the column's.

A record the latest version cannot read by Avro's resolution (a value of a type its field cannot be
promoted to: a version registered again after a later one promoted the field) is a dead letter.

A header shorter than 5 bytes, a magic byte other than 0, an index no registered version has (its
id unknown to the subject) or a body the writer version cannot read is a dead letter.
Nothing here imports the product.
"""

from __future__ import annotations

import json
import struct
import uuid
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Context, Decimal
from typing import Any

from tests.adversary.model import Pipeline
from tests.adversary.values import INT_BOUNDS, MICROS_PER_DAY, Column, Invalid, from_json

Schema = dict[str, Any]


@dataclass(frozen=True)
class Subject:
    """The subject's end state after the scenario's registry steps."""

    schemas: tuple[Schema, ...]
    registered: frozenset[int]  # the indexes of the versions registered at least once (their ids known)
    latest: Schema  # the live version with the highest version number

    @classmethod
    def of(cls, registry: dict[str, Any]) -> Subject:
        """``registry``: ``{"schemas": [json, …], "ops": [["register" | "delete", index], …]}``. Registering
        a schema a live version holds adds no version; registering a soft-deleted one again adds one."""
        versions: list[list[Any]] = []  # [index, live] in version-number order
        for op, i in registry["ops"]:
            live = [v for v in versions if v[0] == i and v[1]]
            if op == "register" and not live:
                versions.append([i, True])
            elif op == "delete":
                for v in live:
                    v[1] = False
        schemas = tuple(json.loads(s) for s in registry["schemas"])
        alive = [i for i, live in versions if live]
        return cls(schemas, frozenset(i for i, _ in versions), schemas[alive[-1]])

    def same_names(self, name: str) -> set[str]:
        """``name`` and every name the versions link to it through ``aliases`` (chained)."""
        group, grew = {name}, True
        while grew:
            grew = False
            for s in (self.schemas[i] for i in self.registered):
                for f in s["fields"]:
                    names = {f["name"], *f.get("aliases", [])}
                    if names & group and not names <= group:
                        group |= names
                        grew = True
        return group


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise Invalid("malformed Avro payload: the body ends early")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def long(self) -> int:
        shift = n = 0
        while True:
            b = self.take(1)[0]
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return (n >> 1) ^ -(n & 1)
            if shift > 63:
                raise Invalid("malformed Avro payload: a varint longer than 10 bytes")


def decode(schema: Any, body: _Body) -> Any:
    """One value of ``schema`` (primitives, unions, records) from the binary encoding."""
    if isinstance(schema, list):
        branch = body.long()
        if not 0 <= branch < len(schema):
            raise Invalid(f"malformed Avro payload: union branch {branch}")
        return decode(schema[branch], body)
    kind = schema["type"] if isinstance(schema, dict) else schema
    if kind == "record":
        return {f["name"]: decode(f["type"], body) for f in schema["fields"]}
    if kind == "null":
        return None
    if kind == "boolean":
        return body.take(1) != b"\x00"
    if kind in ("int", "long"):
        return body.long()
    if kind == "float":
        return struct.unpack("<f", body.take(4))[0]
    if kind == "double":
        return struct.unpack("<d", body.take(8))[0]
    raw = body.take(body.long())
    if kind == "bytes":
        return raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Invalid("malformed Avro payload: a string that is no UTF-8") from None


def _branch(t: Any) -> Any:
    """A field's type without its null branch."""
    rest = [x for x in t if x != "null"] if isinstance(t, list) else [t]
    return rest[0] if rest else "null"


def _base(t: Any) -> str:
    """A field's type without its null branch, as text (a logical type's schema as its dict's text)."""
    return str(_branch(t))


@dataclass(frozen=True)
class Read:
    """A logical type's value already in the form its column stores (tests.adversary.values' tags)."""

    stored: Any


_EPOCH_DAY, _EPOCH = date(1970, 1, 1), datetime(1970, 1, 1)


def logical(c: Column, t: dict[str, Any], v: Any) -> Read:
    """An Avro logical type's underlying value → what column ``c`` stores; raises Invalid."""
    kind = t["logicalType"]
    try:
        if kind == "date":
            return Read(("date", _EPOCH_DAY + timedelta(days=v)))
        if kind.startswith(("timestamp-", "local-timestamp-")):
            micros = v * 1000 if kind.endswith("millis") else v
            return Read(("ts", _EPOCH + timedelta(microseconds=micros)))
    except OverflowError:
        raise Invalid(f"{c.name}: {kind} {v} beyond years 1-9999") from None
    if kind.startswith("time-"):
        micros = v * 1000 if kind.endswith("millis") else v
        if not 0 <= micros <= MICROS_PER_DAY:
            raise Invalid(f"{c.name}: {kind} {v} beyond 24:00:00")
        return Read(("time", micros))
    if kind == "uuid":
        try:
            return Read(("uuid", str(uuid.UUID(v))))
        except ValueError:
            raise Invalid(f"{c.name}: {v!r} is no uuid") from None
    if kind == "decimal":
        unscaled = Decimal(int.from_bytes(v, "big", signed=True)).scaleb(-t["scale"], Context(prec=80))  # exact
        return Read(from_json(c, format(unscaled, "f")))  # rounded to the column's scale as a string is
    raise AssertionError(kind)


def _promoted(v: Any, to: str) -> Any:
    """Avro's promotions to the reader's type (the value a writer's smaller type reads as)."""
    if to == "float" and isinstance(v, float):
        return struct.unpack("<f", struct.pack("<f", v))[0]  # a float default is read as a float
    if to == "string" and isinstance(v, bytes):
        return v.decode("utf-8")
    return v


# Avro's promotions (writer type → reader type); any other pair of different types cannot be read.
PROMOTABLE = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
              ("float", "double"), ("string", "bytes"), ("bytes", "string")}  # fmt: skip


def check_readable(subject: Subject, writer: Schema, record: dict[str, Any]) -> None:
    """Avro's resolution fails the whole record when a writer field the latest version matches (by its
    name or its own ``aliases``) holds a value of a type the latest's cannot read (a long into an int,
    after an older version was registered again) or a null it cannot hold."""
    for f in subject.latest["fields"]:
        w = next((x for x in writer["fields"] if x["name"] in {f["name"], *f.get("aliases", [])}), None)
        if w is None:
            continue
        v, into = record[w["name"]], _base(f["type"])
        if (v is None and not (isinstance(f["type"], list) and "null" in f["type"])) or (
            v is not None and _base(w["type"]) != into and (_base(w["type"]), into) not in PROMOTABLE
        ):
            raise Invalid(f"malformed Avro payload: the latest version cannot read {w['name']}")


def column_value(subject: Subject, writer: Schema, record: dict[str, Any], column: Column) -> Any:
    """The spec column's Avro value for one decoded record (None: NULL)."""
    names = subject.same_names(column.name)
    latest = next((f for f in subject.latest["fields"] if f["name"] in names), None)
    found = next((f for f in writer["fields"] if f["name"] in names), None)
    if found is not None:
        v, written = record[found["name"]], _branch(found["type"])
        if isinstance(written, dict) and v is not None:
            return logical(column, written, v)
        return _promoted(v, _base(latest["type"]) if latest else _base(found["type"]))
    if latest is not None and "default" in latest:
        return _promoted(latest["default"], _base(latest["type"]))
    return None


def stored(c: Column, v: Any) -> Any:
    """An Avro value (not None) → the comparable value column ``c`` stores (tests.adversary.values' tags)."""
    if isinstance(v, Read):
        return v.stored
    if c.type == "bytea":
        return ("bytes", v)
    if c.type == "text":
        text = v.decode("utf-8") if isinstance(v, bytes) else v
        if "\x00" in text:
            raise Invalid(f"{c.name}: NUL in text")
        return text
    if c.type in INT_BOUNDS:
        if not -(2 ** INT_BOUNDS[c.type]) <= v < 2 ** INT_BOUNDS[c.type]:
            raise Invalid(f"{c.name}: {v} beyond {c.type}")
        return ("int", v)
    if c.type == "double precision":
        return ("float", float(v))
    if c.type == "real":
        return ("float", struct.unpack("<f", struct.pack("<f", float(v)))[0])
    if c.type == "boolean":
        return ("bool", bool(v))
    raise AssertionError(c.type)


def values(p: Pipeline, value: bytes, registry: dict[str, Any]) -> dict[str, Any]:
    """Column name → stored value of an Avro record; raises Invalid (a dead letter)."""
    subject = Subject.of(registry)
    if len(value) < 5:
        raise Invalid("truncated header")
    if value[0] != 0:
        raise Invalid("wrong magic byte")
    index = int.from_bytes(value[1:5], "big")
    if index not in subject.registered:
        raise Invalid("unknown schema id")
    writer = subject.schemas[index]
    record = decode(writer, _Body(value[5:]))
    check_readable(subject, writer, record)
    out = {}
    for c in p.columns:
        v = column_value(subject, writer, record, c)
        if v is None and (c.required or c in p.key):
            raise Invalid(f"missing required field {c.name}")
        out[c.name] = None if v is None else stored(c, v)
    return out
