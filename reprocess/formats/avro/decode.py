"""The ``avro`` format: a Kafka value in the Confluent wire format (magic byte 0, 4-byte schema
id, Avro binary), its writer schema fetched from the Schema Registry by id once per run.

Decoded in the JVM with Spark's ``from_avro`` (:mod:`reprocess.formats.avro_schema`), one column
per writer schema version, then typed per the spec's columns with ``try_cast``: Avro's logical
types arrive as Spark's (decimal → decimal, date → date, timestamp-millis/-micros → timestamp,
uuid → string) and convert to the column types. Columns are mapped by dotted path into nested
records (each possibly a union with null). Dead letters name the problem: an empty value, too
short for the header, a wrong magic byte, an unknown schema id, a payload Avro cannot read, a
missing required field, a type error. Keys, headers and metadata as in every format
(:mod:`reprocess.formats.record_parts`); a tombstone's key as in ``json``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from reprocess.core.spec import PipelineSpec, TombstoneMode
from reprocess.formats import avro_schema, derive, record_parts
from reprocess.formats.contract import DELETES, WriterSchemas
from reprocess.formats.json import decode as json

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

PREFIX = "_av"


def _extract_fields(spec: PipelineSpec, by_id: dict[int, avro_schema.Version]) -> list[str]:
    return json.extracted_fields(
        spec,
        lambda c: (
            avro_schema.field(PREFIX, by_id, c.path, None),
            avro_schema.typed_field(PREFIX, by_id, c.path, c),
        ),
    )


def decode(records: DataFrame, spec: PipelineSpec, schemas: WriterSchemas) -> DataFrame:
    """Kafka records plus the contract's columns: typed values, tombstone keys and ``_error``."""
    from pyspark.sql import functions as F

    subjects = avro_schema.value_subjects(spec)
    by_id = avro_schema.versions(schemas, subjects)
    deletes = spec.tombstones is TombstoneMode.DELETE
    paths = record_parts.key_paths(spec)
    if deletes:
        paths += [c.path for c in spec.key_columns if c.from_value]
    parsed = avro_schema.with_versions(records, "value", PREFIX, by_id)
    if paths or deletes:
        parsed = json.with_json_key(parsed, paths)
    parsed = parsed.selectExpr("*", *_extract_fields(spec, by_id))
    if deletes:
        parsed = parsed.selectExpr("*", *json.tombstone_key_fields(spec))
    value_ref = functools.partial(_value_ref, by_id)
    parsed = derive.with_derived(parsed, spec, value_ref, json.raw_name)
    cases = [
        *json.tombstone_cases(spec),
        *json.empty_value_cases(),
        f"WHEN length(value) > {spec.max_record_bytes} THEN concat('oversized value: ', length(value), "
        f"' bytes > max_record_bytes {spec.max_record_bytes}')",
        *avro_schema.framing_cases("value", PREFIX, by_id, subjects),
        *json.column_cases(spec),
    ]
    error = "CASE " + " ".join(cases) + " END"
    decoded = parsed.withColumn(DELETES, F.col("value").isNull()).withColumn("_error", F.expr(error))
    return derive.with_keep(decoded, spec, value_ref)


def readings(spec: PipelineSpec, schemas: WriterSchemas) -> dict[str, str]:
    """How the run reads the spec's value fields from each writer schema id (a digest per id,
    :func:`reprocess.formats.avro_schema.readings`)."""
    paths = [c.path for c in spec.columns if c.from_value] + [f for f in spec.value_fields if not f.startswith("$")]
    return avro_schema.readings(avro_schema.versions(schemas, avro_schema.value_subjects(spec)), dict.fromkeys(paths))


def _value_ref(by_id: dict[int, avro_schema.Version], path: str) -> str:
    """A field an ``expr``/``where`` reads: a record part by its ``$`` path, else the value's
    field across the writer schema versions, as text (as the json format gives it)."""
    return record_parts.native(path) or avro_schema.field(PREFIX, by_id, path, None)
