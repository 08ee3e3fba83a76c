"""The target's side of the audit's checksum bisection (:mod:`reprocess.core.checksums`): per key range, the
rows and the sums of their hashes, in one scan of the table; and the condition that keeps a target row of the
ranges that differ. The log's side is :mod:`reprocess.spark.checksums`, which writes each value as this module
does (the two must agree text for text; where they do not, a range only differs and is compared row by row).

A value's canonical text: a timestamp as its microseconds since the epoch, a date as its days, anything else
as its text; a row's: each value (its columns, then its record's topic, partition and offset) as its length in
bytes, ``:`` and the text, or ``~`` for NULL, so no two rows write the same text.
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg2 import sql

from reprocess.core.checksums import FINEST
from reprocess.core.column_types import ColumnType
from reprocess.core.ordering import LINEAGE_ORDER
from reprocess.core.spec import PipelineSpec
from reprocess.postgres.target import target_identifier


def _canonical(value: sql.Composable, kind: ColumnType | None) -> sql.Composed:
    if kind in (ColumnType.TIMESTAMPTZ, ColumnType.TIMESTAMP):
        return sql.SQL("(extract(epoch FROM {}) * 1000000)::bigint::text").format(value)
    if kind is ColumnType.DATE:
        return sql.SQL("({} - DATE '1970-01-01')::text").format(value)
    return sql.SQL("({})::text").format(value)


def _text(spec: PipelineSpec, alias: str, columns: Sequence[str]) -> sql.Composed:
    kinds = {c.name: c.type for c in spec.columns}
    parts = []
    for c in columns:
        v = _canonical(sql.SQL("{}.{}").format(sql.Identifier(alias), sql.Identifier(c)), kinds.get(c))
        parts.append(sql.SQL("coalesce(octet_length({v})::text || ':' || {v}, '~')").format(v=v))
    return sql.SQL("concat({})").format(sql.SQL(", ").join(parts))


def range_sql(spec: PipelineSpec, alias: str, digits: sql.Composable) -> sql.Composed:
    """The key range of the row ``alias``: the first ``digits`` hex digits of its key's md5, as an integer."""
    return sql.SQL("('x' || lpad(substr(md5({key}), 1, {d}), 8, '0'))::bit(32)::int").format(
        key=_text(spec, alias, spec.key), d=digits
    )


def target_checksums_sql(spec: PipelineSpec) -> sql.Composed:
    """(range at :data:`~reprocess.core.checksums.FINEST` digits, rows, sum of the hashes' high and low 32
    bits) per range of the target: one scan, a few thousand rows out."""
    row = _text(spec, "t", [*(c.name for c in spec.columns), *LINEAGE_ORDER])
    half = "('x' || lpad(substr(md5(_row), {at}, 8), 16, '0'))::bit(64)::bigint"
    return sql.SQL(
        "SELECT _range, count(*), sum({high})::bigint, sum({low})::bigint FROM (SELECT {range} AS _range, {row} AS "
        "_row FROM {target} AS t) AS h GROUP BY 1"
    ).format(
        high=sql.SQL(half.format(at=1)),
        low=sql.SQL(half.format(at=9)),
        range=range_sql(spec, "t", sql.Literal(FINEST)),
        row=row,
        target=target_identifier(spec),
    )


def in_ranges_sql(spec: PipelineSpec, alias: str) -> sql.Composed:
    """The target row ``alias`` lies in a differing range; binds ``range_digits`` and ``ranges`` (int[])."""
    return sql.SQL("{} = ANY(%(ranges)s::int[])").format(range_sql(spec, alias, sql.SQL("%(range_digits)s")))
