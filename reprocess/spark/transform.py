"""Kafka records → stage rows in Spark, per the pipeline spec: decode (the spec's format), then
keep the newest good row per key and every dead letter.

The result is ONE DataFrame holding both, so the job runs a single Spark action (one read of
Kafka).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reprocess.core.errors import SpecError
from reprocess.core.spec import ColumnSpec, ColumnType, PipelineSpec, TombstoneMode
from reprocess.core.stage_rows import DEAD, FILTERED, MOVED, ROW, TOMBSTONE, UNCHANGED, stage_columns
from reprocess.formats import decoder, json_udf
from reprocess.formats.contract import (
    DELETES,
    KEEP,
    ORDER_OF_DELETE,
    WriterSchemas,
    key_name,
    oversized_key_error_sql,
    typed_name,
    unstorable_error_sql,
)
from reprocess.formats.typed import ordering_sql
from reprocess.spark import left_out, user_transform

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def decode(records: DataFrame, spec: PipelineSpec, schemas: WriterSchemas | None = None) -> DataFrame:
    """The spec's format decoder (:mod:`reprocess.formats.contract`): the stage and ``reprocess
    validate``'s sample use this one function, so a sample decodes as a run would. A text value
    PostgreSQL cannot store makes a dead letter whatever the format (the contract). ``schemas``
    are the Avro writer schemas the driver fetched for the run (:mod:`reprocess.kafka.registry`).

    The session's time zone is set to UTC first: the rules read a timestamp without a zone as UTC
    on every cluster alike (Spark's default is the JVM's zone, so a replay elsewhere would differ)."""
    from pyspark.sql import functions as F

    records.sparkSession.conf.set("spark.sql.session.timeZone", "UTC")
    if any(c.type in (ColumnType.JSON, ColumnType.JSONB) for c in spec.columns):
        json_udf.register_json_text(records.sparkSession)  # the check of _error_with_unstorable_text
    decoded = decoder(spec).decode(records, spec, schemas or {})  # the format's Decoder (reprocess.formats)
    return decoded.withColumn("_error", F.expr(_error_with_unstorable_text(spec)))


def checked_stage(records: DataFrame, spec: PipelineSpec, schemas: WriterSchemas | None = None) -> DataFrame:
    """:func:`to_stage` once Spark has analysed it (no record read): an ``expr``, a ``where`` or a
    transform that only Spark can reject (an unknown function or column, a type that does not fit)
    fails here naming the spec's file and what it derives, not as a stack trace from inside the job."""
    from pyspark.errors import AnalysisException

    derives = [f"columns.{c.name}.expr: {c.expr!r}" for c in spec.columns if c.expr]
    derives += [f"where: {spec.where!r}"] if spec.where else []
    derives += [f"transform: {spec.transform.function!r}"] if spec.transform else []
    try:
        stage = to_stage(records, spec, schemas)
        if derives:
            stage.schema  # noqa: B018 (the analysis is the point)
    except AnalysisException as exc:
        raise SpecError(
            f"{spec.source_file}: Spark cannot evaluate the spec's expressions ({'; '.join(derives)}): "
            f"{str(exc).splitlines()[0]}. Fix the spec or the function; nothing was read"
        ) from None
    return stage


def to_stage(records: DataFrame, spec: PipelineSpec, schemas: WriterSchemas | None = None) -> DataFrame:
    """Kafka records → stage rows: the newest good row per key plus every dead letter (and,
    with ``tombstones: delete``, the newest tombstone per key: the merge orders it against the row).

    One scan and one aggregation: good records group by their key, dead letters by their
    own (topic, partition, offset), so they pass through the same ``groupBy`` untouched.
    A union of two branches would make Spark read Kafka twice (a ``transform:`` function does:
    it is given the good rows alone, :mod:`reprocess.spark.user_transform`). ``schemas`` are the
    Avro writer schemas the driver fetched for the run (:mod:`reprocess.kafka.registry`).

    Good records the spec's ``where`` does not keep have no key and no dead-letter lineage, so
    they all fall into ONE ``filtered`` row whose ``_records`` counts them.
    """
    from pyspark.sql import functions as F

    rows = record_rows(records, spec, schemas)
    carried = [c for c in stage_columns(spec) if c not in spec.key and c not in ("_kind", "_records")]
    newest = rows.groupBy("_kind", *spec.key, "_key_partition", *left_out.ALONE).agg(
        F.max_by(F.struct(*carried), F.struct(*map(F.expr, ordering_sql(spec)))).alias("_newest"),
        F.count(F.when(F.col("_kind") != MOVED, 1)).alias("_records"),  # a moved row's record is its tombstone
    )
    return newest.select(*(_stage_column(spec, c) for c in stage_columns(spec)))


def record_rows(records: DataFrame, spec: PipelineSpec, schemas: WriterSchemas | None = None) -> DataFrame:
    """Kafka records → one row per record, before the dedupe: its ``_kind`` (a row, a dead letter, a
    tombstone, filtered out by ``where``), the spec's columns as the stage holds them (the
    ``transform:`` function applied to the good rows), the lineage and ``_error``. :func:`to_stage`
    keeps the newest per key; ``reprocess validate``'s sample judges each (:mod:`reprocess.spark.sample`)."""
    from pyspark.sql import functions as F

    parsed = decode(records, spec, schemas)
    deletes = spec.tombstones is TombstoneMode.DELETE
    ok = F.col("_error").isNull()
    # Debezium: a change the `where` does not keep takes the key's row out as its delete would (the
    # source row no longer matches the filter), never leaves the row's last kept values in place.
    out_of_where = ok & ~F.col(DELETES) & ~F.col(KEEP) if left_out.removes_filtered(spec) else F.lit(False)
    tombstone = (F.col(DELETES) | out_of_where) if deletes else F.lit(False)
    row = ok & ~tombstone & F.col(KEEP)
    key_index = {c.name: i for i, c in enumerate(spec.key_columns)}

    def good_value(i: int, c: ColumnSpec) -> Column:
        """A row's typed value; a tombstone carries its key columns only (a change out of the
        ``where`` its values too, for the left-out values of the key's later changes)."""
        if c.name in key_index and deletes:
            return F.when(ok & tombstone, F.col(key_name(key_index[c.name]))).when(row, F.col(typed_name(i)))
        if deletes and c.name == spec.ordering.column:  # a delete ordered by its source position (Debezium)
            return F.when(ok & tombstone, F.col(ORDER_OF_DELETE)).when(row, F.col(typed_name(i)))
        return F.when(row | out_of_where, F.col(typed_name(i)))

    def when_dead(col: Column) -> Column:
        return F.when(~ok, col)

    # Offsets order records only within one partition: under offset ordering the newest record is
    # kept per (key, partition), so a key found on two partitions reaches the commit, which refuses it.
    split = F.when(ok, F.col("partition")) if spec.ordering.column is None else F.lit(None)
    rows = parsed.select(
        F.when(ok & tombstone, F.lit(TOMBSTONE))
        .when(row, F.lit(ROW))
        .when(ok, F.lit(FILTERED))
        .otherwise(F.lit(DEAD))
        .alias("_kind"),
        split.alias("_key_partition"),
        *(good_value(i, c).alias(c.name) for i, c in enumerate(spec.columns)),
        F.col("topic").alias("_kafka_topic"),
        F.col("partition").alias("_kafka_partition"),
        F.col("offset").alias("_kafka_offset"),
        F.col("timestamp").alias("_kafka_timestamp"),
        "_error",
        # Upper-case hex as Spark writes it: Postgres' decode(..., 'hex') reads either case, and
        # lower() would load ICU's case tables (2-3 s of every job's first dead letter).
        when_dead(F.hex("key")).alias("_raw_key"),
        when_dead(F.hex("value")).alias("_raw_value"),
        when_dead(F.col("topic")).alias("_record_topic"),  # left_out.ALONE: a dead letter is a stage row of its own
        when_dead(F.col("partition")).alias("_record_partition"),
        when_dead(F.col("offset")).alias("_record_offset"),
        *(user_transform.RAW if spec.transform else ()),
        *(F.when(ok, F.col(c)).alias(c) for c in (left_out.DECODED if spec.unchanged_columns else ())),
        *([out_of_where.alias(left_out.OUT_OF_WHERE)] if left_out.removes_filtered(spec) else []),
    )
    if spec.unchanged_columns:  # Debezium's left-out values, from the key's own records in the range
        rows = left_out.resolve_in_range(rows, spec)
    elif left_out.removes_filtered(spec):
        rows = rows.drop(left_out.OUT_OF_WHERE)
    return user_transform.apply(rows, spec) if spec.transform is not None else rows


def _stage_column(spec: PipelineSpec, column: str) -> Column:
    """A stage column from the aggregated row: the group's own or the newest record's (the names
    of its left-out values the range could not give joined by commas)."""
    from pyspark.sql import functions as F

    if column in spec.key or column in ("_kind", "_records"):
        return F.col(column)
    if column == UNCHANGED:
        return F.nullif(F.array_join(F.col(f"_newest.{column}"), ","), F.lit("")).alias(column)
    return F.col(f"_newest.{column}").alias(column)


def _error_with_unstorable_text(spec: PipelineSpec) -> str:
    """The decoder's ``_error``, else the first column whose value PostgreSQL's COPY would refuse
    (:func:`~reprocess.formats.contract.unstorable_error_sql`: a NUL character, bytes that are not
    UTF-8, text PostgreSQL's json or jsonb input refuses), else a key too long for the target's index
    (:func:`~reprocess.formats.contract.oversized_key_error_sql`): whatever the format, such a
    record is a dead letter naming the column or the limit, never a COPY or a merge that fails the
    run (the decoder contract)."""
    key_index = {c.name: i for i, c in enumerate(spec.key_columns)}
    checks = []
    keys = []
    for i, c in enumerate(spec.columns):
        value = typed_name(i)
        if spec.tombstones is TombstoneMode.DELETE and c.name in key_index:  # a delete's key comes from its key
            value = f"CASE WHEN {DELETES} THEN {key_name(key_index[c.name])} ELSE {value} END"
        if c.name in key_index:
            keys.append((c.name, value))
        unstorable = unstorable_error_sql(c.name, c.type, c.sql_type, value)
        checks += [unstorable] if unstorable else []
    oversized = oversized_key_error_sql(keys)
    checks += [oversized] if oversized else []
    return f"coalesce(_error, {', '.join(checks)})" if checks else "_error"
