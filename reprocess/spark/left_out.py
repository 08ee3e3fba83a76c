"""Debezium's left-out values (unchanged TOASTed columns under REPLICA IDENTITY DEFAULT), resolved
from the run's own records before the stage keeps the newest row per key.

A key's life in the log is a run of segments, each begun by a create (``op: c``): a key that was
deleted comes back only by a create (or a snapshot read, which sends every value), so a value an
event left out is the one the segment's newest row event before it sent (or the event's own). A
delete ends nothing by itself: the events a connector sends again after a restart (an update, a
delete, its tombstone, the create a key change made) replay the same segment and carry the same
values as the first time. A value the range cannot give stays listed in ``_unchanged`` with
where to look next, and the commit
(:mod:`reprocess.postgres.left_out`) finds it:

- a segment that began before the range: the target's stored row of the same key;
- a segment begun by a primary-key change (a create with ``__debezium.oldkey``): the old key's
  values at the change. So the old key's delete (with ``__debezium.newkey``) is staged a second
  time as a :data:`~reprocess.core.stage_rows.MOVED` row carrying its values, resolved the same
  way. A segment never takes the values of the key's earlier life: a re-key onto a deleted key
  gets the moved row's values, never the deleted row's (they differ, and which of the two a run
  saw would depend on where a batch was cut).

One window over the records, ordered as the pipeline orders them, in the same shuffle as the
stage's per-key aggregation (no second read of Kafka).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from reprocess.core.spec import PipelineSpec
from reprocess.core.stage_rows import MOVED, MOVED_AT, NEW_KEY, OLD_AT, OLD_KEY, ROW, ROW_KEY, TOMBSTONE, UNCHANGED
from reprocess.formats import decoder
from reprocess.formats.contract import CREATES, key_json
from reprocess.formats.typed import ordering_sql

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# What the decoder hands on per record (the contract), besides the columns.
DECODED: Final = (UNCHANGED, CREATES, OLD_KEY, NEW_KEY, MOVED_AT)
# The columns a record stays alone under in the stage's aggregation (a dead letter, a moved key).
ALONE: Final = ("_record_topic", "_record_partition", "_record_offset")
# A Debezium change the spec's ``where`` does not keep: staged as a tombstone (it takes the key's row
# out), yet its values are what the key's later changes left out (to_stage).
OUT_OF_WHERE: Final = "_out_of_where"


def removes_filtered(spec: PipelineSpec) -> bool:
    """Whether a change the ``where`` does not keep deletes its key's row, as the format's decoder
    says (:meth:`~reprocess.formats.decoder.Decoder.removes_filtered`: a debezium pipeline's table
    mirrors the source rows that match the filter, so a row updated out of it leaves)."""
    return decoder(spec).removes_filtered(spec)


def resolve_in_range(rows: DataFrame, spec: PipelineSpec) -> DataFrame:
    """``rows`` (one per record: to_stage's select with :data:`DECODED`) with each left-out value
    taken from its segment, ``_unchanged`` naming what the range could not give, the links the
    commit follows for those (:data:`~reprocess.core.stage_rows.LINKS`), and each primary-key
    change's delete doubled into a ``moved`` row."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    kind = F.col("_kind")
    order = [F.expr(field) for field in ordering_sql(spec)]  # as PostgreSQL orders them (a numeric by value)
    position = F.struct(*order)
    by_record = Window.partitionBy(*spec.key, "_key_partition", *ALONE).orderBy(*order)
    so_far = by_record.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    # A change out of the `where` sent values too (its tombstone carries them only for this window).
    change = (kind == ROW) | F.col(OUT_OF_WHERE) if removes_filtered(spec) else kind == ROW
    creates = change & F.col(CREATES)
    start = F.last(
        F.when(creates, F.struct(position.alias("p"), F.col(OLD_KEY).alias("k"), F.col(MOVED_AT).alias("at"))), True
    )
    newest: dict[str, Column] = {"_start": start.over(so_far)}
    for j, name in enumerate(spec.unchanged_columns):
        sent = change & ~F.coalesce(F.array_contains(F.col(UNCHANGED), name), F.lit(False))
        newest[f"_sent_{j}"] = F.last(F.when(sent, F.struct(position.alias("p"), F.col(name).alias("v"))), True).over(
            so_far
        )
    rows = rows.withColumns(newest)
    valued = kind.isin(ROW, MOVED)
    known = {name: _in_segment(j) for j, name in enumerate(spec.unchanged_columns)}
    # array_except drops the NULLs in generated code (F.filter with a lambda runs interpreted, row by row)
    missing = F.array_except(
        F.array(*(F.when(~k, F.lit(n)) for n, k in known.items())), F.array(F.lit(None).cast("string"))
    )
    moved = (kind == TOMBSTONE) & F.col(NEW_KEY).isNotNull()
    rows = rows.withColumn("_kind", F.explode(F.when(moved, F.array(kind, F.lit(MOVED))).otherwise(F.array(kind))))
    listing = valued & (F.size(missing) > 0)
    old_key = F.when(listing, F.col("_start.k"))
    names = [c.name for c in spec.key_columns]
    own_key = key_json(names, [f"`{n}`" for n in names])
    resolved = rows.withColumns(
        {
            **{n: F.when(valued, F.when(k, F.col(f"_sent_{j}.v"))).otherwise(F.col(n)) for j, (n, k) in
               enumerate(known.items())},
            UNCHANGED: F.when(valued, missing),
            OLD_KEY: old_key,
            NEW_KEY: F.when(kind == MOVED, F.col(NEW_KEY)),
            MOVED_AT: F.when(kind == MOVED, F.col(MOVED_AT)),
            OLD_AT: F.when(old_key.isNotNull(), F.col("_start.at")),
            ROW_KEY: F.when(listing | (kind == MOVED), F.expr(own_key)),  # a link the commit may find for it
            **{a: F.when(kind == MOVED, F.col(lineage)).otherwise(F.col(a)) for a, lineage in
               zip(ALONE, ("_kafka_topic", "_kafka_partition", "_kafka_offset"), strict=True)},
        }
    )  # fmt: skip
    if removes_filtered(spec):  # a tombstone carries its key and position only, as a delete's does
        carried = [c.name for c in spec.columns if c.name not in spec.key and c.name != spec.ordering.column]
        resolved = resolved.withColumns({n: F.when(kind != TOMBSTONE, F.col(n)) for n in carried}).drop(OUT_OF_WHERE)
    return resolved.drop("_start", CREATES, *(f"_sent_{j}" for j in range(len(known))))


def _in_segment(j: int) -> Column:
    """Whether the ``j``-th left-out-able column has a value in the record's segment: the newest
    value sent so far was sent at or after the segment's start."""
    from pyspark.sql import functions as F

    sent, start = F.col(f"_sent_{j}"), F.col("_start")
    return F.coalesce(sent.isNotNull() & (start.isNull() | (sent["p"] >= start["p"])), F.lit(False))
