"""Avro in the Confluent wire format, decoded in the JVM: the pieces the ``avro`` and ``debezium``
decoders share.

A framed payload is magic byte 0, the writer schema's registry id (big-endian int32), then
Avro binary. The driver fetched every version of the record's subject once per run
(:data:`~reprocess.formats.contract.WriterSchemas`); each version becomes one ``from_avro``
column evaluated only for the records carrying its id (:func:`with_versions`), and a field is
the CASE over the versions that have it (:func:`field`): a field a version lacks (added later,
or removed) is NULL there, so one range holding records of several versions decodes them all.

``from_avro`` in PERMISSIVE mode turns a payload it cannot read into a record of NULLs, not a
NULL; a version's first field that cannot be null (:func:`sentinel_field`) tells the two apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from reprocess.core.spec import PipelineSpec
from reprocess.formats.contract import WriterSchemas, sql_string
from reprocess.formats.record_parts import field_ref

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def value_subjects(spec: PipelineSpec) -> list[str]:
    """The subjects of the spec's values under the default TopicNameStrategy (``<topic>-value``)."""
    return [f"{t}-value" for t in spec.topics]


def versions(schemas: WriterSchemas, subjects: Iterable[str]) -> dict[int, str]:
    """The writer schemas by id of ``subjects`` (ids are registry-wide, so one map serves all)."""
    return {sid: schema for s in subjects for sid, schema in schemas.get(s, {}).items()}


def version_column(prefix: str, sid: int) -> str:
    return f"{prefix}_v{sid}"


def with_versions(records: DataFrame, column: str, prefix: str, by_id: Mapping[int, str]) -> DataFrame:
    """The records plus ``<prefix>_sid`` (the framed schema id) and one decoded struct per version."""
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
            F.when(
                F.col(f"{prefix}_sid") == sid, from_avro(F.col(f"{prefix}_payload"), schema, {"mode": "PERMISSIVE"})
            ).alias(version_column(prefix, sid))
            for sid, schema in by_id.items()
        ),
    )


def field(prefix: str, by_id: Mapping[int, str], path: str, spark_type: str | None) -> str:
    """The field at ``path`` across the versions: its text (``spark_type`` None) or its value as
    ``spark_type`` (NULL where it does not convert). NULL for a version without the field."""
    branches = []
    for sid, schema in by_id.items():
        if has_path(schema, path):
            ref = field_ref(version_column(prefix, sid), path)
            value = f"CAST({ref} AS STRING)" if spark_type is None else f"try_cast({ref} AS {spark_type})"
            branches.append(f"WHEN {sid} THEN {value}")
    if not branches:
        return f"CAST(NULL AS {spark_type or 'STRING'})"
    return f"CASE {prefix}_sid {' '.join(branches)} END"


def framing_cases(column: str, prefix: str, by_id: Mapping[int, str], subjects: Iterable[str]) -> list[str]:
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
        for sid, schema in by_id.items()
        if (name := sentinel_field(schema)) is not None
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
    root = json.loads(schema)
    named = _named_types(root, {})
    node = _unwrap(root, named)
    for part in path.split("."):
        if not isinstance(node, dict) or node.get("type") != "record":
            return False
        fields = {f["name"]: f for f in node.get("fields", [])}
        if part not in fields:
            return False
        node = _unwrap(fields[part]["type"], named)
    return True


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
