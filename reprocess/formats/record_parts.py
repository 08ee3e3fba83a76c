"""Columns from the parts of a Kafka record other than its value, the same for every format:
``$key`` (the key's text), ``$key.<path>`` (a field of a JSON key), ``$headers.<name>`` (the
text of the header's last value), ``$timestamp``, ``$partition``, ``$offset`` and ``$topic``.

Each is a Spark SQL expression over Spark's Kafka records (``key``, ``headers``, ``timestamp``,
``partition``, ``offset``, ``topic``; :func:`reprocess.spark.read.read_ranges` asks for the
headers). A decoder types it as it types a value field (:func:`typed`).
"""

from __future__ import annotations

from typing import Final

from reprocess.core.spec import ColumnSpec, ColumnType, PipelineSpec
from reprocess.formats.contract import sql_string
from reprocess.formats.typed import typed_value_sql

KEY_JSON: Final = "_kj"  # the Kafka key parsed as JSON, by the decoders that need it
_METADATA: Final = {"$timestamp": "timestamp", "$partition": "partition", "$offset": "offset", "$topic": "topic"}


def field_ref(struct: str, path: str) -> str:
    """``struct.`a`.`b``` for the dotted ``path`` (each part quoted)."""
    return struct + "." + ".".join(f"`{p}`" for p in path.split("."))


def _paths_read(spec: PipelineSpec) -> list[str]:
    """Every path the columns and the expressions (``expr``, ``where``) read."""
    return [c.path for c in spec.columns] + list(spec.value_fields)


def key_paths(spec: PipelineSpec) -> list[str]:
    """The paths into a JSON key the columns and expressions read (``$key.a.b`` → ``a.b``)."""
    return [p.removeprefix("$key.") for p in _paths_read(spec) if p.startswith("$key.")]


def reads_headers(spec: PipelineSpec) -> bool:
    """Whether a column or an expression reads a record header (``$headers.<name>``), or the
    decoder follows primary-key changes through theirs (a spec with ``unchanged_columns``:
    :mod:`reprocess.formats.debezium`): the read asks Spark's source for the headers only then
    (:func:`reprocess.spark.read.read_ranges`)."""
    return bool(spec.unchanged_columns) or any(p.startswith("$headers.") for p in _paths_read(spec))


def native(path: str) -> str | None:
    """The expression of a ``$`` path of a record part, or None for any other path.

    Examples
    --------
    >>> native("$headers.event_type")
    "CAST(try_element_at(filter(headers, h -> h.key = 'event_type'), -1).value AS STRING)"
    >>> native("$key.id"), native("$partition"), native("amount") is None
    ('_kj.`id`', 'partition', True)
    """
    if path == "$key":
        return "CAST(key AS STRING)"
    if path.startswith("$key."):
        return field_ref(KEY_JSON, path.removeprefix("$key."))
    if path.startswith("$headers."):
        name = sql_string(path.removeprefix("$headers."))
        return f"CAST(try_element_at(filter(headers, h -> h.key = {name}), -1).value AS STRING)"
    return _METADATA.get(path)


def typed(expr: str, column: ColumnSpec) -> str:
    """``expr`` as the column's Spark type: NULL where it does not convert (the decoder reports
    a type error when the text is not NULL). A timestamp read as a number is epoch milliseconds,
    as Kafka and Avro's timestamp-millis count time."""
    target = column.type.spark_type
    if column.path == "$timestamp" and column.type in (ColumnType.BIGINT, ColumnType.NUMERIC, ColumnType.DOUBLE):
        return f"try_cast(unix_millis({expr}) AS {target})"
    if column.type.staged_as_text:  # a uuid, a jsonb… from a header: checked as a value field is
        return typed_value_sql(expr, column)
    return f"try_cast({expr} AS {target})"


def text(expr: str) -> str:
    """``expr`` as text for a dead letter's message."""
    return f"CAST({expr} AS STRING)"
