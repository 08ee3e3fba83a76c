"""The ``debezium`` format: change events as Debezium writes them, with the JSON converter (with
or without ``schemas.enable``: both are read, the envelope sits under ``payload`` in the first)
or, with ``encoding: avro``, an Avro converter in the Confluent wire format.

- ``op`` ``r`` (snapshot read), ``c``, ``u``: the row is ``after``; value columns' paths are paths
  into it. ``$op``, ``$ts_ms`` and ``$source.<field>`` read the envelope (e.g. ``$source.lsn``),
  ``$key…``/``$headers…``/metadata the record.
- Order: Kafka offset by default, the order Debezium's own sinks apply (a key's changes stay on
  its partition, in commit order; a re-snapshot or a re-sent event comes later in the log with
  the row as it is then). A WAL position is not commit-ordered
  (:data:`reprocess.core.ordering.UNORDERED_POSITIONS`).
- ``op: d`` deletes its key through the replay-safe deletion markers, ordered as the rows are:
  an older slice replayed later never wins. Its key columns come from ``before`` (the key under
  any replica identity), else from the Kafka key (``{"id": 5}``, its ``schema``/``payload`` form,
  or Avro).
- The Kafka tombstone after a delete is for log compaction only; under column ordering it has
  no position, so it is a deletion marker at the lowest possible one: it deletes nothing a
  positioned event wrote (the ``d`` before it did the delete) and resurrects nothing.
- A primary-key change arrives as ``d`` of the old key (and its tombstone) and ``c`` of the new
  one at one position: two keys, so exactly the new row remains.
- ``op: t`` (truncate) fails the run with a clear error: it names no keys, so the per-key markers
  cannot order it against a replay, and skipping it would keep rows the source no longer has
  (reconciliation compares with Kafka, so it could not notice). The error says what to do.
- A column holding the connector's placeholder (``__debezium_unavailable_value``, or the spec's
  ``unavailable_value_placeholder`` for a connector that sets another; an unchanged TOASTed value
  under REPLICA IDENTITY DEFAULT: PostgreSQL does not send it) is left out, never written: it is listed in
  ``_unchanged`` (:data:`~reprocess.core.stage_rows.UNCHANGED`), the stage keeps the value of
  the key's newest record in the range that sent one (:func:`reprocess.spark.transform.to_stage`),
  else the merge keeps the target row's current value (:func:`reprocess.postgres.merge.merge_sql`).
  The event's other columns are applied as usual. An ``expr`` all of whose inputs the event left
  out is left out too (its inputs did not change); one that reads a left-out value beside a sent
  one, or a ``where`` that reads a left-out value, cannot be derived from the event: the event is
  a dead letter naming the value (:func:`_underivable`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Final

from reprocess.core.derive import RECORD_FIELDS, references
from reprocess.core.spec import ColumnSpec, ColumnType, DecimalHandling, Encoding, PipelineSpec
from reprocess.core.stage_rows import MOVED_AT, NEW_KEY, OLD_KEY, UNCHANGED
from reprocess.formats import avro_schema, derive, json_udf, record_parts
from reprocess.formats.contract import (
    CREATES,
    DELETES,
    ORDER_OF_DELETE,
    WriterSchemas,
    escaped_sql,
    key_json,
    key_name,
    sql_string,
    typed_name,
)
from reprocess.formats.json import decode as json
from reprocess.formats.record_parts import KEY_JSON
from reprocess.formats.typed import left_out_sql, typed_sql

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_VALUE, _KEY = "_dv", "_dk"  # Avro version prefixes of the value and the key
_OPS: Final = "('c', 'r', 'u', 'd')"
# The lowest value of each Spark type: a tombstone's position under column ordering.
_LOWEST: Final = {
    "bigint": "CAST(-9223372036854775808 AS BIGINT)",
    "int": "CAST(-2147483648 AS INT)",
    "double": "CAST('-Infinity' AS DOUBLE)",
    "decimal(38,9)": "CAST('-99999999999999999999999999999.999999999' AS DECIMAL(38,9))",
    "timestamp": "TIMESTAMP'0001-01-01 00:00:00Z'",
    "timestamp_ntz": "TIMESTAMP_NTZ'0001-01-01 00:00:00'",
    "date": "DATE'0001-01-01'",
    "smallint": "CAST(-32768 AS SMALLINT)",
    "float": "CAST('-Infinity' AS FLOAT)",
    "string": "''",
    "boolean": "false",
}


def key_subjects(spec: PipelineSpec) -> list[str]:
    """The subjects of an Avro-encoded pipeline's Kafka keys (``<topic>-key``)."""
    return [f"{t}-key" for t in spec.topics]


class _Envelope:
    """Reads a path of the envelope (``op``, ``after.id``, ``source.lsn``) from the JSON parse or
    the Avro versions, as text or typed."""

    def __init__(self, spec: PipelineSpec, schemas: WriterSchemas) -> None:
        self.avro = spec.encoding is Encoding.AVRO
        self.precise = spec.decimal_handling is DecimalHandling.PRECISE
        self.values = avro_schema.versions(schemas, avro_schema.value_subjects(spec))
        self.keys = avro_schema.versions(schemas, key_subjects(spec))

    def text(self, path: str) -> str:
        if self.avro:
            return avro_schema.field(_VALUE, self.values, path, None)
        return f"coalesce({record_parts.field_ref('_j.payload', path)}, {record_parts.field_ref('_j', path)})"

    def typed(self, path: str, c: ColumnSpec) -> str:
        """Typed by the rule every format shares (:mod:`reprocess.formats.typed`), the JSON
        converter's integers as Debezium's temporal types count and its numerics per the spec's
        ``decimal_handling_mode``."""
        if self.avro:
            return avro_schema.typed_field(_VALUE, self.values, path, c)
        return self.typed_text(self.text(path), c)

    def key_field(self, c: ColumnSpec) -> str:
        """A key column from the Kafka key, typed."""
        if self.avro:
            return avro_schema.typed_field(_KEY, self.keys, c.path, c)
        payload, plain = record_parts.field_ref(f"{KEY_JSON}.payload", c.path), record_parts.field_ref(KEY_JSON, c.path)
        return self.typed_text(f"coalesce({payload}, {plain})", c)

    def typed_text(self, raw: str, c: ColumnSpec) -> str:
        """JSON text typed as Debezium's JSON converter sends the column (the envelope's, and the
        key-change headers', which the worker's JSON header converter writes whatever ``encoding``)."""
        return raw if c.type is ColumnType.TEXT else typed_sql(raw, c, debezium=True, precise=self.precise)


def _value_ref(env: _Envelope, path: str) -> str:
    """A field an ``expr``/``where`` reads, as text: a record part or an envelope part by its ``$``
    path, else a field of the row (``after``)."""
    if path.startswith("$"):
        return record_parts.native(path) or env.text(path.removeprefix("$"))
    return env.text(f"after.{path}")


def _envelope_path(c: ColumnSpec) -> str:
    """The envelope path of a column: ``after.<path>`` for a value column, else the ``$`` part."""
    return f"after.{c.path}" if c.from_value else c.path.removeprefix("$")


def _parse(records: DataFrame, spec: PipelineSpec, env: _Envelope) -> DataFrame:
    """The records with the envelope parsed (JSON: ``_j``; Avro: the value's versions) and the
    Kafka key parsed (``KEY_JSON`` or the key's Avro versions)."""
    read = [f for f in spec.value_fields if not f.startswith("$")]  # by expr/where
    row = [c.path for c in spec.columns if c.from_value]
    envelope = ["op", *(f"before.{p}" for p in row), *(f"after.{p}" for p in row + read)]
    parts = [c.path for c in spec.columns] + list(spec.value_fields)
    envelope += [p.removeprefix("$") for p in parts if p.startswith(("$source.", "$ts_ms"))]
    envelope += ["source.ts_ms"] if spec.unchanged_columns else []  # a moved row's change (_with_links)
    key_paths = record_parts.key_paths(spec)
    if env.avro:
        parsed = avro_schema.with_versions(records, "value", _VALUE, env.values)
        parsed = avro_schema.with_versions(parsed, "key", _KEY, env.keys)
        return json.with_json_key(parsed, key_paths)
    schema = json.schema_of([*envelope, *(f"payload.{p}" for p in envelope)])
    from_row = [c for c in spec.key_columns if c.from_value]
    # Without a $key path or a `where`, only a delete and a tombstone read the Kafka key (their key
    # columns: _fields; a change out of the `where` is staged as a delete too): no other event's key
    # is parsed (1 M keys in the JSON converter's schema form: seconds of a core, docs/performance.md).
    needed = None if key_paths or spec.where else f"value IS NULL OR {env.text('op')} = 'd'"
    key_paths += [p for c in from_row for p in (c.path, f"payload.{c.path}")]
    parsed = json.parse_value(records, json_udf.layout_of(schema, {}), schema)
    return json.with_json_key(parsed, key_paths, needed)


def _fields(spec: PipelineSpec, env: _Envelope) -> list[str]:
    """Each column's text and typed value (rows), and each key column's value on a delete."""
    out = json.extracted_fields(spec, lambda c: (env.text(_envelope_path(c)), env.typed(_envelope_path(c), c)))
    for i, c in enumerate(spec.key_columns):
        part = record_parts.native(c.path)
        if part is not None:
            value = record_parts.typed(part, c)
        else:  # `before` holds the key on a delete; the Kafka key on a tombstone
            value = f"coalesce({env.typed(f'before.{c.path}', c)}, {env.key_field(c)})"
        out.append(f"{value} AS {key_name(i)}")
    return out


def _order_of_delete(spec: PipelineSpec) -> str:
    """The ordering column's value of a delete: the event's own; a tombstone's, the lowest."""
    index = next(i for i, c in enumerate(spec.columns) if c.name == spec.ordering.column)
    lowest = _LOWEST[spec.columns[index].type.spark_type]
    return f"CASE WHEN value IS NULL THEN {lowest} ELSE {typed_name(index)} END"


def _error(spec: PipelineSpec, env: _Envelope) -> str:
    unmapped = " OR ".join(f"{key_name(i)} IS NULL" for i in range(len(spec.key_columns)))
    truncate = (
        sql_string(f"{spec.name}: a truncate event (op t) at ")
        + ", topic, '[', partition, '] offset ', offset, "
        + sql_string(
            ": reprocess cannot replay a truncate (it names no keys, so deletion markers cannot order it against a "
            "replay). Nothing of this run was committed. Rebuild the pipeline from the records after it, or have the "
            "connector skip truncates (skipped.operations=t, Debezium's default)"
        )
    )
    cases = [
        *json.tombstone_cases(spec),
        "WHEN length(value) = 0 THEN 'empty value'",
        f"WHEN length(value) > {spec.max_record_bytes} THEN concat('oversized value: ', length(value), "
        f"' bytes > max_record_bytes {spec.max_record_bytes}')",
    ]
    if env.avro:
        cases += avro_schema.framing_cases("value", _VALUE, env.values, avro_schema.value_subjects(spec))
    else:
        cases += json.refused_cases()
    cases += [
        "WHEN _op IS NULL THEN 'not a Debezium change event: no op'",
        f"WHEN _op = 't' THEN raise_error(concat({truncate}))",
        f"WHEN _op NOT IN {_OPS} THEN concat('unknown Debezium op ', {escaped_sql('_op')})",
        f"WHEN _op = 'd' AND ({unmapped}) THEN 'delete event whose before and key carry no key columns'",
    ]
    if spec.ordering.column:
        cases.append(f"WHEN _op = 'd' AND {ORDER_OF_DELETE} IS NULL THEN 'delete event without its ordering column'")
    cases.append("WHEN _op = 'd' THEN NULL")
    cases += _underivable(spec, env)
    return "CASE " + " ".join(cases + json.column_cases(spec, left_out=_left_out(spec, env))) + " END"


def _left_out(spec: PipelineSpec, env: _Envelope) -> dict[int, str]:
    """Per column that an event may leave out, the Spark SQL saying it did: a row field whose raw
    text is the placeholder, or an ``expr`` all of whose inputs the event left out (what it derives
    from did not change, so neither did it; one that reads a sent value too cannot be derived from
    the event: :func:`_underivable`). Its type is not checked then, and its value is NULL
    (:func:`_without_left_out`)."""
    out = {}
    for i, c in enumerate(spec.columns):
        if c.name not in spec.unchanged_columns:
            continue
        if c.expr is None:
            out[i] = left_out_sql(json.raw_name(i), c, spec.unavailable_value_placeholder)
            continue
        inputs = _inputs(spec, c.expr, env)
        if inputs and None not in inputs.values():
            out[i] = " AND ".join(str(sent) for sent in inputs.values())
    return out


def _inputs(spec: PipelineSpec, text: str, env: _Envelope) -> dict[str, str | None]:
    """Per name an expression reads: the Spark SQL true when the event left it out (a row column or
    a field of ``after`` holding the placeholder), or None for one every event carries and that may
    change (the envelope, the record's parts). The key is left out of it: it is the same in every
    event of the row."""
    placeholder = sql_string(spec.unavailable_value_placeholder)
    columns = {c.name: i for i, c in enumerate(spec.columns)}
    out: dict[str, str | None] = {}
    for parts in references(text):
        name = ".".join(parts)
        if parts[0] in spec.key:
            continue
        if parts[0] in columns:
            c = spec.columns[columns[parts[0]]]
            out[name] = f"({json.raw_name(columns[c.name])} <=> {placeholder})" if c.from_value else None
        elif parts[0] in RECORD_FIELDS or name.startswith("$"):
            out[name] = None
        else:
            out[name] = f"({env.text(f'after.{name}')} <=> {placeholder})"
    return out


def _underivable(spec: PipelineSpec, env: _Envelope) -> list[str]:
    """``_error`` cases: a row event whose ``where`` reads a value the event left out, or whose
    ``expr`` reads one beside a value the event sent, cannot be derived from the event (the left-out
    value is not in it, and the sent one may have changed). It is a dead letter naming the value
    and the fix: never a guessed keep, a stale derived value or one computed from the placeholder."""
    left_out = _left_out(spec, env)  # an expr all of whose inputs the event left out: left out, not a dead letter
    derived: list[tuple[str, str, str | None]] = [("the where predicate", spec.where, None)] if spec.where else []
    derived += [
        (f"the expr of column {c.name}", c.expr, left_out.get(i))
        for i, c in enumerate(spec.columns)
        if c.expr and c.name not in spec.key
    ]
    cases = []
    for what, text, whole in derived:
        leavable = {name: sent for name, sent in _inputs(spec, text, env).items() if sent is not None}
        for name, sent in leavable.items():
            unless = f" AND NOT ({whole})" if whole else ""
            cases.append(
                f"WHEN _op IN ('c', 'r', 'u') AND {sent}{unless} THEN "
                + sql_string(
                    f"{what} reads {name}, which this change event left out (an unchanged TOASTed value: the "
                    "connector's placeholder), so it cannot be derived from the event; set REPLICA IDENTITY FULL on "
                    "the source table, or derive from values the connector always sends"
                )
            )
    return cases


def _without_left_out(parsed: DataFrame, spec: PipelineSpec, env: _Envelope) -> DataFrame:
    """The typed values of the columns the event left out set to NULL, their names in ``_unchanged``."""
    from pyspark.sql import functions as F

    left_out = _left_out(spec, env)
    names = ", ".join(f"CASE WHEN {sent} THEN {sql_string(spec.columns[i].name)} END" for i, sent in left_out.items())
    # array_except drops the NULLs in generated code; filter(…, n -> …) ran interpreted, row by row, with the
    # whole CASE tree under it (a quarter of a Debezium stage's samples, docs/performance.md).
    unchanged = f"array_except(array({names}), array(CAST(NULL AS STRING)))"
    return parsed.withColumns(
        {
            **{
                typed_name(i): F.expr(f"CASE WHEN {sent} THEN NULL ELSE {typed_name(i)} END")
                for i, sent in left_out.items()
            },
            UNCHANGED: F.expr(unchanged if names else "CAST(array() AS ARRAY<STRING>)"),
        }
    )


def _header_key(spec: PipelineSpec, env: _Envelope, header: str) -> str:
    """Spark SQL: the key a primary-key change's header names (``{"id":3}``, the source's column
    names; the Kafka Connect header converter writes it as JSON), as :func:`key_json` of the
    spec's key columns typed as the row's own key is (a ``date`` as Debezium's day count, a
    ``timestamp`` as microseconds: a bare cast would make them NULL, and the link never match),
    or NULL without the header."""
    text = record_parts.native(f"$headers.{header}")
    values = []
    for c in spec.key_columns:
        field = c.path if c.from_value else c.path.rsplit(".", 1)[-1]
        values.append(env.typed_text(f"get_json_object({text}, {sql_string('$.' + field)})", c))
    return f"CASE WHEN {text} IS NOT NULL THEN {key_json([c.name for c in spec.key_columns], values)} END"


def _with_links(parsed: DataFrame, spec: PipelineSpec, env: _Envelope) -> DataFrame:
    """The links a left-out value follows (the contract's :data:`CREATES`, ``OLD_KEY``,
    ``NEW_KEY``): a primary-key change is a delete of the old key naming the new one in header
    ``__debezium.newkey`` and a create of the new key naming the old one in ``__debezium.oldkey``;
    the create leaves out the unchanged TOASTed values, which the old key held."""
    from pyspark.sql import functions as F

    return parsed.withColumns(
        {
            CREATES: F.expr("coalesce(_op = 'c', false)"),
            OLD_KEY: F.expr(f"CASE WHEN _op = 'c' THEN {_header_key(spec, env, '__debezium.oldkey')} END"),
            NEW_KEY: F.expr(f"CASE WHEN _op = 'd' THEN {_header_key(spec, env, '__debezium.newkey')} END"),
            MOVED_AT: F.expr(f"CASE WHEN _op IN ('c', 'd') THEN CAST({env.text('source.ts_ms')} AS STRING) END"),
        }
    )


def decode(records: DataFrame, spec: PipelineSpec, schemas: WriterSchemas) -> DataFrame:
    """Kafka records plus the contract's columns: typed values, a delete's key and position,
    ``_deletes`` and ``_error``."""
    from pyspark.sql import functions as F

    env = _Envelope(spec, schemas)
    parsed = _parse(records, spec, env)
    parsed = parsed.selectExpr("*", f"{env.text('op')} AS _op").selectExpr("*", *_fields(spec, env))
    value_ref = functools.partial(_value_ref, env)
    parsed = derive.with_derived(parsed, spec, value_ref, json.raw_name)
    parsed = _without_left_out(parsed, spec, env)  # after the exprs: those reading a left-out value are left out
    if spec.unchanged_columns:
        parsed = _with_links(parsed, spec, env)
    parsed = parsed.withColumn(DELETES, F.expr("value IS NULL OR _op = 'd'"))
    if spec.ordering.column:
        parsed = parsed.withColumn(ORDER_OF_DELETE, F.expr(_order_of_delete(spec)))
    return derive.with_keep(parsed.withColumn("_error", F.expr(_error(spec, env))), spec, value_ref)
