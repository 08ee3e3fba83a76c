"""Avro in the Confluent wire format, decoded in the JVM: the pieces the ``avro`` and ``debezium``
decoders share.

A framed payload is magic byte 0, the writer schema's registry id (big-endian int32), then
Avro binary. The driver fetched every version of the record's subject once per run
(:data:`~reprocess.formats.contract.WriterSchemas`); each version becomes one ``from_avro``
column evaluated only for the records carrying its id (:func:`with_versions`), read as its
:class:`Version`'s reader schema (Avro's resolution against the subject's latest version by
version number: defaults, aliases; :mod:`reprocess.formats.avro_resolution`), and a field is the
CASE over the versions that have it (:func:`field`): a field a version lacks (without a default)
is NULL there, so one range holding records of several versions decodes them all.

The spec's names are the reader that does not move: a spec path is found in each version by its
name, else by a name the subject's versions declare the same (``aliases``, in any version), so
registering a rename before the spec changes cannot turn a mapped column NULL in a replay.

``from_avro`` in PERMISSIVE mode turns a payload it cannot read into a record of NULLs, not a
NULL; a version's first field that cannot be null (:func:`sentinel_field`) tells the two apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from reprocess.core.column_types import ColumnType
from reprocess.core.spec import ColumnSpec, PipelineSpec
from reprocess.formats.avro_resolution import reader_schema, same_names
from reprocess.formats.contract import WriterSchemas, sql_string
from reprocess.formats.record_parts import field_ref
from reprocess.formats.typed import decimal_of_bytes, time_of_micros, typed_sql

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def value_subjects(spec: PipelineSpec) -> list[str]:
    """The subjects of the spec's values under the default TopicNameStrategy (``<topic>-value``)."""
    return [f"{t}-value" for t in spec.topics]


class Version(NamedTuple):
    """A writer schema version, the schema its records are read as (both JSON), and the names the
    subject's versions declare the same (:func:`~reprocess.formats.avro_resolution.same_names`)."""

    writer: str
    reader: str
    same: Mapping[str, frozenset[str]] = {}


def versions(schemas: WriterSchemas, subjects: Iterable[str]) -> dict[int, Version]:
    """The versions by id of ``subjects`` (ids are registry-wide, so one map serves all), each
    resolved against its subject's latest version (the subject's last entry, the highest version
    number: :func:`reprocess.kafka.registry.writer_schemas`)."""
    out = {}
    for s in subjects:
        by_id = schemas.get(s, {})
        latest = list(by_id.values())[-1] if by_id else ""
        same = same_names(by_id.values())
        out.update({sid: Version(schema, reader_schema(schema, latest), same) for sid, schema in by_id.items()})
    return out


def version_column(prefix: str, sid: int) -> str:
    return f"{prefix}_v{sid}"


def with_versions(records: DataFrame, column: str, prefix: str, by_id: Mapping[int, Version]) -> DataFrame:
    """The records plus ``<prefix>_sid`` (the framed schema id) and one decoded struct per version:
    its writer schema read as its reader schema (Spark's ``avroSchema`` option, Avro's resolution)."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    framed = records.selectExpr(
        "*",
        f"CASE WHEN length({column}) >= 5 THEN CAST(conv(hex(substring({column}, 2, 4)), 16, 10) AS BIGINT) "
        f"END AS {prefix}_sid",
        f"substring({column}, 6) AS {prefix}_payload",
    )
    return framed.select(
        "*",
        *(
            F.when(F.col(f"{prefix}_sid") == sid, from_avro(F.col(f"{prefix}_payload"), v.writer, _options(v))).alias(
                version_column(prefix, sid)
            )
            for sid, v in by_id.items()
        ),
    )


def _options(v: Version) -> dict[str, str]:
    return {"mode": "PERMISSIVE"} | ({} if v.reader == v.writer else {"avroSchema": v.reader})


def field(prefix: str, by_id: Mapping[int, Version], path: str, spark_type: str | None) -> str:
    """The field at ``path`` across the versions: its text (``spark_type`` None, :func:`text_of`)
    or its value as ``spark_type`` (NULL where it does not convert). NULL for a version without the field."""
    branches = []
    for sid, v in by_id.items():
        found = read_path(v, path)
        if found is not None:
            actual, node = found
            ref = field_ref(version_column(prefix, sid), actual)
            value = text_of(ref, node) if spark_type is None else f"try_cast({ref} AS {spark_type})"
            branches.append(f"WHEN {sid} THEN {value}")
    if not branches:
        return f"CAST(NULL AS {spark_type or 'STRING'})"
    return f"CASE {prefix}_sid {' '.join(branches)} END"


# The column types an Avro value converts to by a cast; the others are typed from its text
# (:func:`text_of`) by the rule every format shares (reprocess.formats.typed).
_CAST_TYPES: Final = frozenset({
    ColumnType.TEXT, ColumnType.BIGINT, ColumnType.INTEGER, ColumnType.SMALLINT, ColumnType.DOUBLE, ColumnType.REAL,
    ColumnType.BOOLEAN, ColumnType.TIMESTAMPTZ,
})  # fmt: skip


def typed_field(prefix: str, by_id: Mapping[int, Version], path: str, c: ColumnSpec) -> str:
    """The field at ``path`` across the versions as column ``c`` stages it (NULL: a type error)."""
    if c.type in _CAST_TYPES:
        return field(prefix, by_id, path, c.type.spark_type)
    return typed_sql(field(prefix, by_id, path, None), c)


def framing_cases(column: str, prefix: str, by_id: Mapping[int, Version], subjects: Iterable[str]) -> list[str]:
    """CASE branches naming what is wrong with a framed payload, each error's kind (the text
    before its first colon, the coverage page's grouping) fixed: ``truncated header``, ``wrong
    magic byte``, ``unknown schema id`` (no version of the subjects has it), ``malformed Avro
    payload`` (its schema cannot read it)."""
    known = ", ".join(str(sid) for sid in by_id) or "NULL"
    where = sql_string(f", not a version of {', '.join(subjects)}")
    cases = [
        f"WHEN length({column}) < 5 THEN concat('truncated header: ', length({column}), ' bytes, shorter than the "
        "Confluent header (magic byte 0 and a 4-byte schema id)')",
        f"WHEN substring({column}, 1, 1) <> X'00' THEN concat('wrong magic byte: 0x', hex(substring({column}, 1, 1)), "
        "', not the Confluent wire format')",
        f"WHEN {prefix}_sid NOT IN ({known}) THEN concat('unknown schema id: ', {prefix}_sid, {where})",
    ]
    unreadable = [
        f"({prefix}_sid = {sid} AND {field_ref(version_column(prefix, sid), name)} IS NULL)"
        for sid, v in by_id.items()
        if (name := sentinel_field(v.reader)) is not None
    ]
    if unreadable:
        cases.append(
            f"WHEN {' OR '.join(unreadable)} THEN concat('malformed Avro payload: schema id ', "
            f"{prefix}_sid, ' cannot read it (truncated or corrupt)')"
        )
    return cases


def _named_types(node: Any, named: dict[str, Any], namespace: str = "") -> dict[str, Any]:
    """Every named type of a schema by its short and full name: a later field may refer to a record
    defined by an earlier one (Debezium's ``after`` names the ``Value`` that ``before`` defines)."""
    if isinstance(node, list):
        for branch in node:
            _named_types(branch, named, namespace)
    elif isinstance(node, dict):
        if node.get("type") in ("record", "enum", "fixed", "error") and "name" in node:
            name = str(node["name"])
            namespace = str(node.get("namespace", namespace if "." not in name else name.rpartition(".")[0]))
            short = name.rpartition(".")[2]
            named[short] = named[f"{namespace}.{short}" if namespace else short] = node
        for f in node.get("fields", []):
            _named_types(f.get("type"), named, namespace)
        for inner in ("items", "values"):
            if inner in node:
                _named_types(node[inner], named, namespace)
        if isinstance(node.get("type"), dict | list):
            _named_types(node["type"], named, namespace)
    return named


def _unwrap(node: Any, named: dict[str, Any]) -> Any:
    """A type without its null branch, a named type's definition for its name."""
    if isinstance(node, list):
        rest = [t for t in node if t != "null"]
        node = rest[0] if len(rest) == 1 else node
    if isinstance(node, str) and node in named:
        return named[node]
    if isinstance(node, dict) and isinstance(node.get("type"), dict | list | str) and node.get("type") not in (
        "record", "enum", "fixed", "array", "map",
    ):  # fmt: skip
        inner = node["type"]
        return named.get(inner, node) if isinstance(inner, str) else _unwrap(inner, named)
    return node


# Debezium's temporal semantic types (``connect.name``), plain ints and longs in Avro: the text
# of each, as ISO (the JSON converter's integers are read by reprocess.formats.typed instead).
_EPOCH_NTZ = "TIMESTAMP_NTZ'1970-01-01 00:00:00'"
_SEMANTIC_TEXT: Final = {
    "io.debezium.time.Date": "CAST(date_add(DATE'1970-01-01', {ref}) AS STRING)",
    "io.debezium.time.MicroTimestamp": f"CAST(timestampadd(MICROSECOND, {{ref}}, {_EPOCH_NTZ}) AS STRING)",
    "io.debezium.time.Timestamp": f"CAST(timestampadd(MILLISECOND, {{ref}}, {_EPOCH_NTZ}) AS STRING)",
    "io.debezium.time.NanoTimestamp": f"CAST(timestampadd(MICROSECOND, {{ref}} div 1000, {_EPOCH_NTZ}) AS STRING)",
}


def text_of(ref: str, node: Any) -> str:
    """A decoded Avro value as the text a JSON field of the same value has, so one rule types
    both (:mod:`reprocess.formats.typed`): bytes as base64, an array, map or record as JSON (a
    ``VariableScaleDecimal`` is ``{"scale":…,"value":"<base64>"}``), a time of day or a Debezium
    date/timestamp count as ISO text, a decimal as its digits; anything else cast to text."""
    kind = node.get("type") if isinstance(node, dict) else node
    logical = node.get("logicalType") if isinstance(node, dict) else None
    connect = node.get("connect.name") if isinstance(node, dict) else None
    if connect in _SEMANTIC_TEXT:
        return _SEMANTIC_TEXT[connect].format(ref=ref)
    if connect in ("io.debezium.time.MicroTime", "io.debezium.time.Time", "io.debezium.time.NanoTime"):
        scaled = {"io.debezium.time.MicroTime": ref, "io.debezium.time.Time": f"{ref} * 1000"}
        micros = scaled.get(connect, f"{ref} div 1000")
        return time_of_micros(f"CAST({micros} AS BIGINT)")
    if logical == "time-millis":
        return time_of_micros(f"CAST({ref} AS BIGINT) * 1000")
    if connect == "org.apache.kafka.connect.data.Decimal" and logical != "decimal":  # bytes, its scale a parameter
        scale = (node.get("connect.parameters") or {}).get("scale", node.get("scale", 0))
        return decimal_of_bytes(ref, str(int(scale)))
    if kind in ("bytes", "fixed") and logical != "decimal":
        return f"base64({ref})"
    if kind in ("array", "map", "record"):
        return f"to_json({ref})"
    return f"CAST({ref} AS STRING)"


def node_at(schema: str, path: str) -> Any:
    """The type of the field at the dotted ``path`` (without its null branch), None when the
    writer schema lacks it."""
    found = resolve_path(schema, path, {})
    return None if found is None else found[1]


def resolve_path(schema: str, path: str, same: Mapping[str, frozenset[str]]) -> tuple[str, Any] | None:
    """The dotted path the spec's ``path`` is in ``schema`` and its type, None when it lacks it.
    Each part is the field of that name, else the first field whose name ``same`` declares the
    same as it or whose own ``aliases`` hold it (a rename the spec does not know of).

    Examples
    --------
    >>> s = '{"type": "record", "name": "R", "fields": [{"name": "total", "type": "double", "aliases": ["amount"]}]}'
    >>> resolve_path(s, "amount", {}), resolve_path(s, "x", {})
    (('total', 'double'), None)
    """
    found = _fields_at(schema, path, same)
    return None if found is None else (".".join(str(f["name"]) for f in found[0]), found[1])


def read_path(v: Version, path: str) -> tuple[str, Any] | None:
    """:func:`resolve_path` in ``v``'s reader, at the reader field that reads the field the writer
    has: after a chain of renames (``a`` → ``b`` → ``c`` → ``d``) the reader may hold both the
    latest's ``d`` (its default: the writer has no ``c``) and the writer's own ``b``; the spec's ``a``
    is the writer's ``b``, not ``d``'s default."""
    wrote = _fields_at(v.writer, path, v.same)
    found = _fields_at(v.reader, path, v.same, [str(f["name"]) for f in wrote[0]] if wrote else [])
    return None if found is None else (".".join(str(f["name"]) for f in found[0]), found[1])


def _fields_at(
    schema: str, path: str, same: Mapping[str, frozenset[str]], written: list[str] | None = None
) -> tuple[list[Any], Any] | None:
    """The fields :func:`resolve_path` matches, outermost first, and the last one's type; at depth
    ``i`` the field reading the writer's ``written[i]`` first, when given (:func:`read_path`)."""
    root = json.loads(schema)
    named = _named_types(root, {})
    node, matched = _unwrap(root, named), []
    for i, part in enumerate(path.split(".")):
        if not isinstance(node, dict) or node.get("type") != "record":
            return None
        fields = node.get("fields", [])
        others = same.get(part, frozenset())
        own = written[i] if written and i < len(written) else None
        match = (
            next((f for f in fields if own is not None and own in (f["name"], *f.get("aliases", []))), None)
            or next((f for f in fields if f["name"] == part), None)
            or next((f for f in fields if f["name"] in others or part in f.get("aliases", [])), None)
        )
        if match is None:
            return None
        matched.append(match)
        node = _unwrap(match["type"], named)
    return matched, node


def readings(by_id: Mapping[int, Version], paths: Iterable[str]) -> dict[str, str]:
    """How the records of each writer schema id read the spec's value ``paths``, as a digest per id:
    the field each path is found at and its type, or the reader's default the writer lacks. A
    registry change that alters one (a default, a new alias) changes that id's digest; a new version
    adds an id and leaves the others' (the plan's staleness check, :mod:`reprocess.operations.preview`)."""
    import hashlib

    out = {}
    for sid, v in by_id.items():
        read = []
        for path in paths:
            wrote = _fields_at(v.writer, path, v.same)
            found = _fields_at(v.reader, path, v.same, [str(f["name"]) for f in wrote[0]] if wrote else [])
            default = None
            if found is not None and wrote is None:
                default = [found[0][-1].get("default")]  # the writer lacks it: the reader's default
            read.append([path, None if found is None else [[f["name"] for f in found[0]], found[1], default]])
        out[str(sid)] = hashlib.sha256(json.dumps(read, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return out


def has_path(schema: str, path: str) -> bool:
    """Whether the writer schema has the field at the dotted ``path`` (through nested records,
    each possibly a union with null).

    Examples
    --------
    >>> s = '{"type": "record", "name": "R", "fields": [{"name": "a", "type": ["null",'
    >>> s += ' {"type": "record", "name": "A", "fields": [{"name": "b", "type": "int"}]}]}]}'
    >>> has_path(s, "a.b"), has_path(s, "a.c"), has_path(s, "b")
    (True, False, False)
    """
    return node_at(schema, path) is not None


def sentinel_field(schema: str) -> str | None:
    """The first top-level field that cannot be null, or None when every field can be.

    Examples
    --------
    >>> sentinel_field('{"type": "record", "name": "R", "fields": [{"name": "a", "type": ["null", "int"]},'
    ...                ' {"name": "b", "type": "string"}]}')
    'b'
    """
    node = json.loads(schema)
    for f in node.get("fields", []) if isinstance(node, dict) else []:
        kind = f["type"]
        if kind != "null" and not (isinstance(kind, list) and "null" in kind):
            return str(f["name"])
    return None
