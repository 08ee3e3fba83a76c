"""The ``json`` format: a Kafka value holding a JSON object, its fields picked by dotted path
and typed per the spec's columns.

Everything runs as Spark SQL expressions (``from_json`` with a schema of strings, then
``try_cast`` per column), not row by row in Python. :func:`decode` adds to the records the
columns of the decoder contract (:mod:`reprocess.formats.contract`): each column's typed value,
a tombstone's key columns, and ``_error`` naming the first problem of a record. The tombstone,
key and column rules here are shared with the other formats (``avro``, ``debezium`` import them
from here); the format's :class:`~reprocess.formats.decoder.Decoder` is :mod:`reprocess.formats.json`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

from reprocess.core.spec import KEPT_TOMBSTONE, ColumnSpec, ColumnType, PipelineSpec, TombstoneMode
from reprocess.formats import derive, json_udf, record_parts
from reprocess.formats.contract import (
    DELETES,
    WriterSchemas,
    escaped_sql,
    hex_sql,
    key_name,
    sql_string,
    storable_sql,
    typed_name,
)
from reprocess.formats.json import strict as json_strict
from reprocess.formats.record_parts import KEY_JSON
from reprocess.formats.typed import NUMERIC_CHARS, NUMERIC_TEXT, numeric_fit, type_text, typed_sql

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def raw_name(i: int) -> str:
    """The column holding the text of the spec's ``i``-th column (dead letters quote it)."""
    return f"_r_{i}"


def extracted_fields(spec: PipelineSpec, from_value: Callable[[ColumnSpec], tuple[str, str]]) -> list[str]:
    """``text AS _r_i, typed AS _t_i`` for each column a decoder extracts (an ``expr`` column is
    derived afterwards, formats.derive): a record part (``$key``, ``$headers.x``…) the same way for
    every format, a value field by ``from_value`` (its text and typed Spark SQL), the format's own."""
    out = []
    for i, c in enumerate(spec.columns):
        if c.expr is not None:
            continue
        part = record_parts.native(c.path)
        raw, typed = (record_parts.text(part), record_parts.typed(part, c)) if part is not None else from_value(c)
        out += [f"{raw} AS {raw_name(i)}", f"{typed} AS {typed_name(i)}"]
    return out


CORRUPT: str = "_corrupt_record"
# The types whose value field is read as a VARIANT: a numeric keeps its exact value, a json/jsonb
# its JSON value (its text through Spark's JSON reader would pass nested fractions through a double).
_VARIANTS = (ColumnType.NUMERIC, ColumnType.JSON, ColumnType.JSONB)


def json_schema(spec: PipelineSpec) -> str:
    """The ``from_json`` schema: every mapped field read as STRING (typed later with
    ``try_cast``, so a type error is told apart from a missing field), a numeric field as VARIANT
    (which keeps its exact value, see :func:`_exact_numeric`), nested by path, plus the column
    that receives records that are not a JSON object.

    Examples
    --------
    >>> from reprocess.formats.specs import parse_spec
    >>> spec = parse_spec({"name": "p", "topics": ["t"], "key": ["id"],
    ...     "columns": {"id": "text", "n": {"type": "bigint", "path": "meta.n"}, "x": "numeric"}})
    >>> json_schema(spec)
    'struct<`id`:string,`meta`:struct<`n`:string>,`x`:variant,`_corrupt_record`:string>'

    The value fields that only ``expr``/``where`` read are read as STRING too (their JSON text).
    """
    value = [c for c in spec.columns if c.from_value]
    return schema_of(_value_fields(spec), variants={c.path for c in value if c.type in _VARIANTS})


def _value_fields(spec: PipelineSpec) -> list[str]:
    """The value's fields a spec reads: its columns' paths, then those only ``expr``/``where`` read."""
    return [c.path for c in spec.columns if c.from_value] + [f for f in spec.value_fields if not f.startswith("$")]


def schema_of(paths: list[str], variants: Collection[str] = ()) -> str:
    """A ``from_json`` schema reading each dotted path as STRING (those in ``variants`` as
    VARIANT), plus the corrupt-record column. A struct wins over the same field read as text
    (``meta`` and ``meta.region`` read ``meta``'s fields).

    Examples
    --------
    >>> schema_of(["a.b", "c", "a"])
    'struct<`a`:struct<`b`:string>,`c`:string,`_corrupt_record`:string>'
    """
    tree: dict[str, object] = {}
    for path in paths:
        node = tree
        *parents, leaf = path.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node.setdefault(leaf, "variant" if path in variants else "string")

    def render(node: dict[str, object]) -> str:
        return ",".join(f"`{k}`:{v if isinstance(v, str) else 'struct<' + render(v) + '>'}" for k, v in node.items())  # type: ignore[arg-type]

    return f"struct<{render(tree) + ',' if tree else ''}`{CORRUPT}`:string>"


def _extract_fields(spec: PipelineSpec, lay: json_udf.Layout) -> list[str]:
    """Each field's text and typed value, extracted ONCE per record (the CASE reuses them) from the
    UDF's struct: a numeric field's kind is the one a variant gives it (:func:`_exact_numeric`), a
    json/jsonb field's text is Spark's rendering of it as a variant, as when it was read as one; a
    JSON string stays that string (``"123"`` is no number), unless the column's ``string_is_json``
    says it holds JSON text.
    """
    out = []
    for i, c in enumerate(spec.columns):
        if c.expr is not None:
            continue
        part = record_parts.native(c.path)
        if part is not None:  # the key, a header or metadata
            out += [f"{record_parts.text(part)} AS {raw_name(i)}", f"{record_parts.typed(part, c)} AS {typed_name(i)}"]
            continue
        ref = value_ref(c.path)
        if c.type is ColumnType.NUMERIC:
            out += [f"{ref} AS {raw_name(i)}", f"{lay.kind(c.path)} AS {_kind(i)}"]
            continue
        if c.type in _VARIANTS:  # the value's JSON text; a JSON string's, or with string_is_json the text it holds
            string = ref if c.string_is_json else json_string_sql(ref)
            text = (
                f"CASE {lay.kind(c.path)} WHEN 'STRING' THEN {string} WHEN 'VOID' THEN NULL "
                f"ELSE to_json(try_parse_json({ref})) END"
            )
            out += [f"{text} AS {raw_name(i)}", f"{text} AS {typed_name(i)}"]
            continue
        out.append(f"{ref} AS {raw_name(i)}")
        typed = raw_name(i) if c.type is ColumnType.TEXT else lay.typed(c.path, c, typed_sql(ref, c))
        if c.type.array_element is not None:  # a JSON string is no array, whatever text it holds
            typed = f"CASE WHEN {lay.kind(c.path)} = 'STRING' THEN NULL ELSE {typed} END"
        out.append(f"{typed} AS {typed_name(i)}")
    return out


def json_string_sql(text: str) -> str:
    """Spark SQL: the JSON string literal of ``text`` (quoted, escaped as Spark's JSON writer does).

    Examples
    --------
    >>> json_string_sql("s")
    'substring(to_json(array(s)), 2, length(to_json(array(s))) - 2)'
    """
    return f"substring(to_json(array({text})), 2, length(to_json(array({text}))) - 2)"


def _kind(i: int) -> str:
    return f"_nk_{i}"


def _exact_numeric(spec: PipelineSpec, lay: json_udf.Layout) -> list[str]:
    """Each numeric value field's exact text, or NULL (a type error): PostgreSQL casts it at the COPY.

    Read as text, a JSON number with a fraction or an exponent would come through a double
    (``0.000000000123456789`` → ``1.23456789E-10``). Read as a variant it keeps a decimal of up to
    38 digits exactly (and costs about as much); a longer number is a double there and is refused
    (:func:`column_cases`), never rounded. A JSON string keeps its text as written. Where the UDF
    found the text exact already (its fast slot), the checks are skipped.
    """
    out = []
    for i, c in enumerate(spec.columns):
        if c.type is not ColumnType.NUMERIC or not c.from_value:
            continue
        raw, kind, text = raw_name(i), _kind(i), f"trim({raw_name(i)})"
        valid = f"{text} RLIKE {sql_string(NUMERIC_TEXT)} AND length({text}) <= {NUMERIC_CHARS}"
        exact = "'TINYINT', 'SMALLINT', 'INT', 'BIGINT'"
        fast = lay.fast(c.path, c)
        found = (
            f"CASE {f'WHEN {fast} THEN {raw} ' if fast else ''}WHEN {kind} = 'STRING' AND {valid} THEN {text} "
            f"WHEN {kind} LIKE 'DECIMAL%' OR {kind} IN ({exact}) THEN {raw} END"
        )
        out.append(f"{numeric_fit(found, c)} AS {typed_name(i)}")
    return out


def value_ref(path: str) -> str:
    """A field of the parsed value by dotted path (its JSON text); a ``$`` path is the record part."""
    return record_parts.native(path) or record_parts.field_ref("_j", path)


def _from_json(text: str, schema: str) -> str:
    """``from_json`` that keeps text that is not a JSON object in the corrupt-record column."""
    return (
        f"from_json({text}, {sql_string(schema)}, map('mode', 'PERMISSIVE', 'columnNameOfCorruptRecord', "
        f"'{CORRUPT}', {_STRICT_OPTIONS}))"
    )


# Text whose first character after JSON's whitespace is not `{` is no JSON object: ``from_json`` of
# it gives NULL or a corrupt record, which every reader of the key takes alike (no fields).
_MAY_BE_OBJECT = "startswith(TRIM(LEADING ' \\t\\n\\r' FROM {text}), '{{')"


# Spark's JSON reader accepts by default two things JSON does not have: 'single-quoted' strings and
# the bare tokens NaN/Infinity. A record holding them is malformed JSON (a dead letter).
_STRICT_OPTIONS = "'allowSingleQuotes', 'false', 'allowNonNumericNumbers', 'false'"


def tombstone_key_fields(spec: PipelineSpec) -> list[str]:
    """A tombstone's key columns, read from the Kafka KEY (its value is null): by each key
    column's path when the key is a JSON object (Debezium, Kafka Connect), else, for a
    one-column key, the key's text itself. A key column taken from the record's key, a header or
    metadata (a ``$`` path) is that part. A key that maps to no value makes a dead letter."""
    single = len(spec.key_columns) == 1
    out = []
    for c in spec.key_columns:
        part = record_parts.native(c.path)
        if part is not None:
            out.append(record_parts.typed(part, c))
            continue
        ref = record_parts.field_ref(KEY_JSON, c.path)
        fallback = "_kstr" if single else "NULL"
        raw = f"CASE WHEN {KEY_JSON} IS NOT NULL AND {KEY_JSON}.`{CORRUPT}` IS NULL THEN {ref} ELSE {fallback} END"
        out.append(raw if c.type is ColumnType.TEXT else typed_sql(raw, c))
    return [f"{e} AS {key_name(i)}" for i, e in enumerate(out)]


def tombstone_cases(spec: PipelineSpec) -> list[str]:
    """With ``tombstones: delete``, the CASE branches of a tombstone: a dead letter when its key
    does not map to the key columns (quoting the key escaped, or in hex when it is not text),
    else good (NULL)."""
    if spec.tombstones is not TombstoneMode.DELETE:
        return []
    unmapped = " OR ".join(f"{key_name(i)} IS NULL" for i in range(len(spec.key_columns)))
    return [
        f"WHEN value IS NULL AND ({unmapped}) THEN concat('tombstone key does not map to the key columns: ', "
        f"CASE WHEN key IS NULL THEN '(no key)' WHEN {storable_sql('_kstr')} THEN {escaped_sql('_kstr')} "
        f"ELSE {hex_sql('key')} END)",
        "WHEN value IS NULL THEN NULL",
    ]


def column_cases(
    spec: PipelineSpec, *, exact_numeric: bool = False, left_out: Mapping[int, str] | None = None
) -> list[str]:
    """The CASE branches of each column's problems: a required one missing, a text that is not
    of the column's type (over :func:`raw_name` and :func:`typed_name`); with ``exact_numeric``
    (the JSON decoder's variants, :func:`_exact_numeric`), a JSON number too long to read exactly.
    ``left_out`` maps a column's index to Spark SQL true when the record left its value out (a
    Debezium placeholder): its type is not checked then."""
    cases = []
    left_out = left_out or {}
    for i, c in enumerate(spec.columns):
        r, t = raw_name(i), typed_name(i)
        what = f"field {c.path}" if c.expr is None else f"expr of column {c.name}"
        sent = f" AND NOT {left_out[i]}" if i in left_out else ""
        if c.required:
            missing = f"missing required field {c.path}" if c.expr is None else f"{what} is null"
            cases.append(f"WHEN {r} IS NULL{sent} THEN {sql_string(missing)}")
        if exact_numeric and c.from_value and c.type is ColumnType.NUMERIC:
            cases.append(
                f"WHEN {t} IS NULL AND {_kind(i)} IN ('DOUBLE', 'FLOAT') THEN "
                + sql_string(
                    f"type error: field {c.path} is a JSON number of more than 38 digits, which Spark cannot "
                    'read exactly; send it as a JSON string ("1.25") to keep every digit: '
                )
                + f" || {escaped_sql(r)}"
            )
        cases.append(
            f"WHEN {r} IS NOT NULL AND {t} IS NULL{sent} THEN "
            f"concat({sql_string(f'type error: {what} is not {type_text(c)}: ')}, "
            f"{escaped_sql(f'CAST({r} AS STRING)')})"
        )
    return cases


# A record the UDF refused: not read as a JSON object, or breaking a strict rule.
_REFUSED = f"(_j IS NULL OR _j.`{CORRUPT}` IS NOT NULL OR _j.`{json_udf.ERROR}` IS NOT NULL)"
_MALFORMED = f"concat('malformed JSON or not a JSON object: ', {escaped_sql('_str')})"


def parse_value(records: DataFrame, lay: json_udf.Layout, schema: str) -> DataFrame:
    """The records plus the value's text (``_str``) and its one parse by the UDF (``_j``, laid out by
    ``lay``); for the records the UDF refused alone, ``from_json`` by ``schema`` (``_jf``) and the strict
    parse (:data:`json_strict.STRICT`), which name the reason (:func:`refused_cases`)."""
    call = json_udf.call_sql(records.sparkSession, lay, "value")
    return records.selectExpr("*", "CAST(value AS STRING) AS _str", f"{call} AS _j").selectExpr(
        "*",
        f"CASE WHEN {_REFUSED} THEN {_from_json('_str', schema)} END AS _jf",
        f"CASE WHEN {_REFUSED} THEN {json_strict.strict_sql('_str')} END AS {json_strict.STRICT}",
    )


def refused_cases() -> list[str]:
    """The CASE branches of a value that is not UTF-8 or that the UDF refused (:func:`parse_value`),
    named as before its time: ``from_json`` says whether it is malformed, then
    :func:`json_strict.record_cases` which strict rule it breaks."""
    return [
        "WHEN NOT is_valid_utf8(_str) THEN 'value is not valid UTF-8'",
        f"WHEN {_REFUSED} AND (_jf IS NULL OR _jf.`{CORRUPT}` IS NOT NULL) THEN {_MALFORMED}",
        *json_strict.record_cases("_str", _REFUSED),
        f"WHEN {_REFUSED} THEN {_MALFORMED}",
    ]


def empty_value_cases() -> list[str]:
    """The CASE branches of a record with no value: a tombstone the spec keeps as a dead letter
    (``tombstones: dead_letter``; with ``delete`` :func:`tombstone_cases` took it first), said as
    such (it is the spec's rule, not a broken producer: the dead-letter ratio does not count it),
    and an empty value."""
    return [
        f"WHEN value IS NULL THEN {sql_string(KEPT_TOMBSTONE)}",
        "WHEN length(value) = 0 THEN 'empty value'",
    ]


def _error_expression(spec: PipelineSpec, lay: json_udf.Layout) -> str:
    """A CASE that names the first problem of a record, or NULL for a good one (or a tombstone)."""
    cases = tombstone_cases(spec)
    cases += [
        *empty_value_cases(),
        f"WHEN length(value) > {spec.max_record_bytes} THEN concat('oversized value: ', length(value), "
        f"' bytes > max_record_bytes {spec.max_record_bytes}')",
        *refused_cases(),
    ]
    text = [
        json_strict.text_case(c.path, raw_name(i), c.name, lay.kind(c.path))
        for i, c in enumerate(spec.columns)
        if c.type is ColumnType.TEXT and c.from_value
    ]
    return "CASE " + " ".join(cases + column_cases(spec, exact_numeric=True) + text) + " END"


def with_json_key(records: DataFrame, paths: list[str], needed: str | None = None) -> DataFrame:
    """The records plus the key's text (``_kstr``) and, parsed as JSON by ``paths``, the key
    (:data:`~reprocess.formats.record_parts.KEY_JSON`), which ``$key.<path>`` columns and a
    tombstone's key columns read. A key that cannot be an object is not parsed: most keys are
    plain text (an id), and a failed parse costs as much as a value's (1 M keys: ~1 s of a core).
    ``needed``: Spark SQL true for the records whose key anything reads; the others' is not parsed
    (NULL): a Debezium pipeline's key is read by its deletes and tombstones alone (docs/performance.md)."""
    parse = (
        _MAY_BE_OBJECT.format(text="_kstr")
        if needed is None
        else f"({needed}) AND {_MAY_BE_OBJECT.format(text='_kstr')}"
    )
    parse = f"CASE WHEN {parse} THEN {_from_json('_kstr', schema_of(paths))} END"
    return records.selectExpr("*", "CAST(key AS STRING) AS _kstr").selectExpr("*", f"{parse} AS {KEY_JSON}")


def decode(records: DataFrame, spec: PipelineSpec, schemas: WriterSchemas | None = None) -> DataFrame:
    """Kafka records plus the contract's columns: typed values, tombstone keys and ``_error``.
    A JSON value carries no writer schema, so ``schemas`` is unused."""
    from pyspark.sql import functions as F

    deletes = spec.tombstones is TombstoneMode.DELETE
    paths = record_parts.key_paths(spec)
    if deletes:
        paths += [c.path for c in spec.key_columns if c.from_value]
    schema = json_schema(spec)
    lay = json_udf.layout(spec, schema_of(_value_fields(spec)))
    parsed = parse_value(records, lay, schema)
    if paths or deletes:
        parsed = with_json_key(parsed, paths)
    parsed = parsed.selectExpr("*", *_extract_fields(spec, lay))
    numeric = _exact_numeric(spec, lay)
    if numeric:
        parsed = parsed.selectExpr("*", *numeric)
    if deletes:
        parsed = parsed.selectExpr("*", *tombstone_key_fields(spec))
    parsed = derive.with_derived(parsed, spec, value_ref, raw_name)
    decoded = parsed.withColumn(DELETES, F.col("value").isNull()).withColumn(
        "_error", F.expr(_error_expression(spec, lay))
    )
    return derive.with_keep(decoded, spec, value_ref)
