"""The adversary's ``avro`` scenarios: a value schema that evolves over 1-4 writer versions, records
written with any of them (Confluent wire format, encoded by fastavro), and the registry steps that
leave the subject's end state (versions soft-deleted, one registered again).

Each version changes the one before compatibly: a field added with a default, a field removed, a
field renamed with ``aliases`` (chains too), a promotion Avro allows (int → long, float → double,
bytes → string), a default changed, the fields reordered, a field the spec does not map. Columns of
``numeric(p,s)``, ``date``, ``time``, ``timestamp``, ``timestamptz``, ``uuid`` and ``bytea`` are written as
Avro's logical types (``decimal``, ``date``, ``time-micros``/``-millis``, ``timestamp-*``,
``local-timestamp-*``, ``uuid``) and ``bytes``, with values at and beyond the years 1-9999 and 24:00:00. A value
carries the writer version's INDEX in its header (:mod:`tests.adversary.avro_oracle`);
:func:`register` registers the versions and :func:`frame` swaps in their ids when the driver
produces. Malformed records too: a wrong magic byte, an unknown schema id, a truncated header or
body. Nothing here imports the product.
"""

from __future__ import annotations

import io
import json
import math
import struct
from decimal import Decimal
from typing import Any

import fastavro
import requests
from hypothesis import strategies as st

from tests.adversary.model import Record, Scenario
from tests.adversary.strategies import KEY_VALUES, _kafka_key, keyed_records, pipelines, steps

UNKNOWN = 0x7FFFFFF0  # a header index no version has: produced as a schema id no registry holds
TYPES = (
    "text",
    "bigint",
    "integer",
    "double precision",
    "real",
    "boolean",
    "numeric(p,s)",
    "date",
    "time",
    "timestamp",
    "timestamptz",
    "uuid",
    "bytea",
)
# spec type → the Avro types a first version may write it as (each may be promoted to the next); the logical
# types are named by their logicalType here (:data:`LOGICAL` gives the schema) and never promoted.
FIRST = {"text": ("string", "bytes"), "bigint": ("long", "int"), "integer": ("int",),
         "double precision": ("double", "float"), "real": ("float",), "boolean": ("boolean",),
         "numeric(p,s)": ("decimal",), "date": ("date",), "time": ("time-micros", "time-millis"),
         "timestamp": ("local-timestamp-micros", "local-timestamp-millis", "timestamp-micros"),
         "timestamptz": ("timestamp-micros", "timestamp-millis"), "uuid": ("uuid",), "bytea": ("bytes",)}  # fmt: skip
LOGICAL = {"date": "int", "time-micros": "long", "time-millis": "int", "timestamp-micros": "long",
           "timestamp-millis": "long", "local-timestamp-micros": "long", "local-timestamp-millis": "long",
           "uuid": "string", "decimal": "bytes"}  # fmt: skip
PROMOTE = {"int": "long", "float": "double", "bytes": "string"}
KEY_AVRO = {"text": "string", "bigint": "long", "integer": "int"}
DECIMAL_DIGITS = 38  # Spark's decimal: a wider Avro decimal cannot be read at all


def _f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


_STRINGS = ["a", "B", "é", "x y", "", "sales-eu", "salesapac", "😀", "12.50", "-12", "a\x00b"]
POOLS: dict[str, list[Any]] = {
    "string": _STRINGS,
    "bytes": [s.encode() for s in _STRINGS],
    "long": [0, 1, -1, 10, 9, 2**63 - 1, -(2**63)],
    "int": [0, 7, -7, 10, 9, 2**31 - 1, -(2**31)],
    "double": [0.0, -0.0, 1.5, 10.0, 9.5, 0.1, 1.7976931348623157e308, -1e-300, math.nan, math.inf, -math.inf],
    "float": [_f32(x) for x in (0.5, 1.25, -2.0, 0.1, 10.0, 3.4e38)] + [math.nan, math.inf],
    "boolean": [True, False],
    # the logical types' underlying values, at and beyond what the column holds (years 1-9999, up to 24:00:00)
    "date": [0, 20463, -1, -719162, 2932896, 2932897, -719163],  # 2026-01-10 … 9999-12-31, 10000-01-01, year 0
    "time-micros": [0, 36_000_000_000, 86_399_999_999, 86_400_000_000, 86_400_000_001, 1],
    "time-millis": [0, 36_000_000, 86_399_999, 86_400_000, 86_400_001],
    "timestamp-micros": [
        0,
        1_767_225_600_123_456,
        -1,
        -62_135_596_800_000_000,
        253_402_300_799_999_999,
        253_402_300_800_000_000,
        -62_135_596_800_000_001,
    ],
    "timestamp-millis": [0, 1_767_225_600_123, -62_135_596_800_000, 253_402_300_799_999, 253_402_300_800_000],
    "uuid": ["b0000000-0000-0000-0000-000000000000", "A0000000-0000-0000-0000-00000000000F", "not-a-uuid"],
}
POOLS["local-timestamp-micros"], POOLS["local-timestamp-millis"] = POOLS["timestamp-micros"], POOLS["timestamp-millis"]
DEFAULTS = {"string": "dflt", "long": 42, "int": -3, "double": 2.5, "float": 0.1, "boolean": True}


def _decimal_type(precision: int, scale: int) -> dict[str, Any]:
    """The Avro decimal a ``numeric(p,s)`` column is written as: at most 38 digits, the column's scale where
    it fits, so the writer's values reach past the column's digits only when p > 38 cannot (never here)."""
    p = min(precision, DECIMAL_DIGITS)
    return {"type": "bytes", "logicalType": "decimal", "precision": p, "scale": min(scale, p)}


def decimal_pool(t: dict[str, Any]) -> list[Decimal]:
    """Values of the Avro decimal ``t``: 0, its largest and smallest, one and five units of its last place."""
    p, s = t["precision"], t["scale"]
    unit = Decimal(f"1e-{s}")
    top = Decimal(f"{'9' * (p - s) or '0'}.{'9' * s}") if s else Decimal("9" * p)  # exact: no context rounding
    return [Decimal(0).quantize(unit), top, top.copy_negate(), unit, 5 * unit if p > 1 else unit]


def _avro_type(t: str, numeric: tuple[int, int] | None) -> Any:
    """A track's type name → the Avro schema of its values."""
    if t == "decimal":
        assert numeric is not None
        return _decimal_type(*numeric)
    return {"type": LOGICAL[t], "logicalType": t} if t in LOGICAL else t


def _field(state: dict[str, Any]) -> dict[str, Any]:
    t = state["type"]
    avro = _avro_type(t, state["numeric"])
    out: dict[str, Any] = {"name": state["name"], "type": ["null", avro] if state["nullable"] else avro}
    if state["aliases"]:
        out["aliases"] = list(state["aliases"])
    if state["default"] != "none" and (state["nullable"] or t in DEFAULTS):
        out["default"] = None if state["nullable"] else DEFAULTS[t]
    return out


@st.composite
def versions(draw: st.DrawFn, key: tuple[Any, ...], values: tuple[Any, ...]) -> list[dict[str, Any]]:
    """1-4 writer versions of the value schema, each a compatible change of the one before."""
    tracks = {}
    for c in values:
        t = draw(st.sampled_from(FIRST[c.type]))
        tracks[c.name] = {
            "name": c.name if c.required or draw(st.integers(0, 6)) else None, "type": t, "aliases": (),
            "of": c.type, "required": c.required,
            # a logical type has no default but null: nullable, so a version may add it (BACKWARD compatible)
            "nullable": t in LOGICAL or not c.required or not draw(st.integers(0, 4)),
            "default": draw(st.sampled_from(["none", "set"])), "numeric": c.numeric,
        }  # fmt: skip
    extra: list[str] = []  # fields no spec column maps
    keys = [{"name": c.name, "type": KEY_AVRO[c.type]} for c in key]
    out: list[dict[str, Any]] = []
    renames = 0
    for v in range(draw(st.integers(1, 4))):
        if v:
            for _ in range(draw(st.integers(1, 2))):
                col = draw(st.sampled_from(sorted(tracks)))
                s = tracks[col]
                op = draw(st.sampled_from(["add", "remove", "rename", "promote", "default", "extra"]))
                if op == "add" and s["name"] is None:
                    s.update(name=col, aliases=(), default="set")  # BACKWARD compatible: with a default
                elif op == "remove" and s["name"] is not None and not s["required"]:
                    s["name"] = None
                elif op == "rename" and s["name"] is not None:
                    renames += 1
                    s.update(name=f"{col}_r{renames}", aliases=(s["name"],))
                elif op == "promote" and PROMOTE.get(s["type"]) in FIRST[s["of"]]:  # what the column holds
                    s["type"] = PROMOTE[s["type"]]
                elif op == "default" and s["name"] is not None and s["type"] != "bytes":
                    s["default"] = "none" if s["default"] == "set" else "set"
                elif op == "extra":
                    extra.append(f"x{len(extra)}")
        fields = [_field(s) for s in tracks.values() if s["name"] is not None]
        fields += [{"name": x, "type": ["null", "long"], "default": None} for x in extra]
        fields = draw(st.permutations(fields)) if draw(st.booleans()) else fields
        schema = {"type": "record", "name": "Row", "namespace": "adversary", "fields": [*keys, *fields]}
        if schema not in out:
            out.append(schema)
    return out


@st.composite
def registry_ops(draw: st.DrawFn, n: int) -> list[list[Any]]:
    """Register every version in turn; maybe soft-delete one (never the last live one) and register it again."""
    ops: list[list[Any]] = [["register", i] for i in range(n)]
    if n > 1 and draw(st.booleans()):
        gone = draw(st.integers(0, n - 1))
        ops.append(["delete", gone])
        if draw(st.booleans()):
            ops.append(["register", gone])
    return ops


def encode(schema: dict[str, Any], index: int, record: dict[str, Any]) -> bytes:
    """The placeholder-framed value: magic 0, the version's index, fastavro's binary body."""
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), record)
    return b"\x00" + index.to_bytes(4, "big") + body.getvalue()


@st.composite
def scenarios(draw: st.DrawFn, max_records: int = 40, max_steps: int = 4) -> Scenario:
    pipeline = draw(pipelines(TYPES, "avro"))
    key, partitions, ordering = pipeline.key, pipeline.partitions, pipeline.ordering
    schemas = draw(versions(key, pipeline.columns[len(key) :]))
    registry = {"schemas": [json.dumps(s) for s in schemas], "ops": draw(registry_ops(len(schemas)))}
    logical = draw(st.lists(st.tuples(*(st.sampled_from(KEY_VALUES[c.type]) for c in key)), min_size=1, max_size=6,
                            unique=True))  # fmt: skip

    def row(draw: st.DrawFn, which: int, partition: int, kafka_key: bytes, kind: str) -> Record:
        index = draw(st.integers(0, len(schemas) - 1))
        record = dict(zip((c.name for c in key), logical[which], strict=True))
        for f in schemas[index]["fields"][len(key) :]:
            nullable = isinstance(f["type"], list)
            base = f["type"][1] if nullable else f["type"]
            pool = decimal_pool(base) if isinstance(base, dict) and base["logicalType"] == "decimal" else None
            pool = pool or POOLS[base["logicalType"] if isinstance(base, dict) else base]
            record[f["name"]] = None if nullable and not draw(st.integers(0, 5)) else draw(st.sampled_from(pool))
        value = encode(schemas[index], index, record)
        note = f"v{index + 1}"
        if kind == "malformed":
            how = draw(st.sampled_from(["wrong magic byte", "unknown schema id", "truncated header", "truncated body"]))
            if how == "wrong magic byte":
                value = b"\x01" + value[1:]
            elif how == "unknown schema id":
                value = b"\x00" + UNKNOWN.to_bytes(4, "big") + value[5:]
            elif how == "truncated header":
                value = value[: draw(st.integers(1, 4))]
            else:
                value = value[: draw(st.integers(5, len(value) - 1))]
            note = f"{note} {how}"
        return Record(partition, kafka_key, value, note)

    kinds = ["row"] * 6 + ["tombstone", "malformed", "duplicate"]
    records = draw(keyed_records(len(logical), partitions, ordering is not None, max_records, kinds,
                                 lambda which: _kafka_key(key, logical[which]), row))  # fmt: skip
    return Scenario(pipeline, tuple(records), draw(steps(records, partitions, max_steps)), registry=registry)


_HEADERS = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def register(url: str, subject: str, registry: dict[str, Any]) -> dict[int, int]:
    """Run the scenario's registry steps against the registry at ``url`` (its Confluent API); each
    version's index → the schema id the registry gave it."""
    ids: dict[int, int] = {}
    base = f"{url}/subjects/{subject}/versions"
    for op, i in registry["ops"]:
        if op == "register":
            answer = requests.post(base, json={"schema": registry["schemas"][i]}, headers=_HEADERS, timeout=30)
            answer.raise_for_status()
            ids[i] = int(answer.json()["id"])
            continue
        for number in requests.get(base, timeout=30).json():
            if requests.get(f"{base}/{number}", timeout=30).json()["id"] == ids[i]:
                requests.delete(f"{base}/{number}", timeout=30).raise_for_status()
    return ids


def frame(value: bytes | None, ids: dict[int, int]) -> bytes | None:
    """The value as produced: its header's version index replaced by that version's schema id."""
    if value is None or len(value) < 5 or value[0] != 0:
        return value
    return value[:1] + ids.get(int.from_bytes(value[1:5], "big"), UNKNOWN).to_bytes(4, "big") + value[5:]
