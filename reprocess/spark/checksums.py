"""The log's side of the audit's checksum bisection (:mod:`reprocess.core.checksums`), in the audit's one
Spark action: the newest record per key of the stage rows (as PostgreSQL's ``DISTINCT ON`` picks it), its
row's hash and key range written as :mod:`reprocess.postgres.checksum_sql` writes the target's, summed per
range and set against the target's sums; only the stage rows of the ranges that differ go on to the COPY,
with one marker row per such range (kind :data:`~reprocess.core.checksums.MARKER`) for the judge.

Kafka is read once: the stage's rows and tombstones are kept on the executors (persisted, memory then disk,
released after the action) and both the sums and the rows written read them; nothing of them passes through
the driver.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping
from typing import TYPE_CHECKING

from reprocess.core.checksums import MARKER, Checksum
from reprocess.core.column_types import ColumnType
from reprocess.core.ordering import LINEAGE_ORDER
from reprocess.core.spec import PipelineSpec
from reprocess.core.stage_rows import ROW, TOMBSTONE, UNCHANGED
from reprocess.formats.typed import ordering_sql

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def _canonical(column: str, kind: ColumnType | None, numeric: tuple[int, int] | None) -> Column:
    from pyspark.sql import functions as F

    value = F.col(column)
    if kind is ColumnType.TIMESTAMPTZ:
        return F.unix_micros(value).cast("string")
    if kind is ColumnType.TIMESTAMP:  # the session's zone is UTC (transform.decode): the wall time as UTC
        return F.unix_micros(value.cast("timestamp")).cast("string")
    if kind is ColumnType.DATE:
        return F.unix_date(value).cast("string")
    if kind is ColumnType.NUMERIC and numeric is not None and numeric[0] <= 38:  # rounded to the scale, as stored
        return F.coalesce(F.expr(f"try_cast(`{column}` AS DECIMAL({numeric[0]},{numeric[1]}))").cast("string"), value)
    return value.cast("string")


def _text(spec: PipelineSpec, columns: list[str]) -> Column:
    from pyspark.sql import functions as F

    specs = {c.name: c for c in spec.columns}
    parts = []
    for c in columns:
        v = _canonical(c, specs[c].type if c in specs else None, specs[c].numeric if c in specs else None)
        parts.append(F.coalesce(F.concat(F.octet_length(v).cast("string"), F.lit(":"), v), F.lit("~")))
    return F.concat(*parts)


def _range(spec: PipelineSpec, digits: int) -> Column:
    from pyspark.sql import functions as F

    return F.conv(F.substring(F.md5(_text(spec, list(spec.key))), 1, digits), 16, 10).cast("int")


def _half(row: Column, at: int) -> Column:
    from pyspark.sql import functions as F

    return F.conv(F.substring(F.md5(row), at, 8), 16, 10).cast("bigint")


def differing_rows(
    stage: DataFrame, spec: PipelineSpec, digits: int, target: Mapping[int, Checksum], kept: list[DataFrame]
) -> DataFrame:
    """The stage rows (rows and tombstones) of the key ranges of ``digits`` hex digits whose sums differ from
    ``target``'s, and one :data:`MARKER` row per such range; the columns are ``stage``'s.

    A key whose newest record left a value out, or whose ordering value Spark could not order as
    PostgreSQL does, makes its range differ (``unsure``): its row is compared row by row.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    spark = stage.sparkSession
    # Kept on the executors (memory, then disk) by the first branch that reads it, so the sums and the rows
    # written come from one read: without it Spark read and decoded the log once per branch (~2x the time).
    # ``kept`` gets it, for the caller to release once the action ran.
    candidates = (
        stage.where(F.col("_kind").isin(ROW, TOMBSTONE))
        .withColumn("_range", _range(spec, digits))
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    kept.append(candidates)
    order = [F.expr(s) for s in ordering_sql(spec)]
    columns = [c.name for c in spec.columns if c.name not in spec.key]
    carried = [*columns, *LINEAGE_ORDER, "_kind", *([UNCHANGED] if spec.unchanged_columns else [])]
    newest = candidates.groupBy("_range", *spec.key).agg(
        F.max_by(F.struct(*carried), F.struct(*order)).alias("_n"),
        F.max(F.when(functools.reduce(operator.or_, (o.isNull() for o in order)), 1).otherwise(0)).alias("_unordered"),
    )
    flat = newest.select("_range", *spec.key, *(F.col(f"_n.{c}").alias(c) for c in carried), "_unordered")
    row = F.col("_kind") == ROW
    text = _text(spec, [c.name for c in spec.columns] + list(LINEAGE_ORDER))
    unsure = F.col("_unordered") == 1
    if spec.unchanged_columns:
        unsure = unsure | (row & F.col(UNCHANGED).isNotNull())
    hashed = flat.select(
        "_range", row.alias("_row"), F.when(row, text).alias("_text"), F.when(unsure, 1).otherwise(0).alias("_unsure")
    )
    ours = hashed.groupBy("_range").agg(
        F.count(F.when(F.col("_row"), 1)).alias("rows"),
        F.coalesce(F.sum(_half(F.col("_text"), 1)), F.lit(0)).alias("high"),
        F.coalesce(F.sum(_half(F.col("_text"), 9)), F.lit(0)).alias("low"),
        F.sum("_unsure").alias("unsure"),
    )
    theirs = spark.createDataFrame(
        [(r, c.rows, c.high, c.low) for r, c in target.items()] or [(-1, 0, 0, 0)],
        "_range int, t_rows bigint, t_high bigint, t_low bigint",
    )
    joined = ours.join(theirs, "_range", "full_outer")
    same = F.coalesce(F.col("rows"), F.lit(0)) == F.coalesce(F.col("t_rows"), F.lit(0))
    for mine, its in (("high", "t_high"), ("low", "t_low")):
        same = same & (F.coalesce(F.col(mine), F.lit(0)) == F.coalesce(F.col(its), F.lit(0)))
    ranges = joined.where(~same | (F.coalesce(F.col("unsure"), F.lit(0)) > 0)).select("_range")
    rows = candidates.join(F.broadcast(ranges), "_range", "left_semi").select(*stage.columns)
    types = dict(stage.dtypes)
    # The ranges that differ, and range -1, always: the judge knows the stage holds these ranges alone.
    markers = ranges.union(spark.createDataFrame([(-1,)], "_range int")).select(
        *(
            F.lit(MARKER).alias(c) if c == "_kind"
            else F.col("_range").cast(types[c]).alias(c) if c == "_kafka_offset"
            else F.lit(digits).cast(types[c]).alias(c) if c == "_kafka_partition"
            else F.lit(0).cast(types[c]).alias(c) if c == "_records"
            else F.lit(None).cast(types[c]).alias(c)
            for c in stage.columns
        )
    )  # fmt: skip
    return rows.unionByName(markers)
