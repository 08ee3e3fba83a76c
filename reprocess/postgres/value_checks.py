"""Reconciliation's value check: per (topic, partition), the target rows that carry a window record's
lineage but hold other values than that record derives under the current spec (the window's stage,
written by the backfill's own read, decode and transforms). Lineage says which record a row came from;
this says whether the row still holds what that record derives: a person's UPDATE, a decoding or a
transform bug, a wrongly resolved placeholder are differences here, and nowhere else.

Column by column in one join of the stage's rows with the target on key AND lineage (the rows the
lineage check already found right), so its cost is one more hash join over the window's keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from psycopg2 import sql

from reprocess.core.ordering import LINEAGE_ORDER
from reprocess.core.ranges import TopicPartition
from reprocess.core.spec import PipelineSpec
from reprocess.core.stage_rows import ROW, UNCHANGED
from reprocess.postgres.column_sql import comparable
from reprocess.postgres.target import target_identifier

EXAMPLES: Final = 5  # (key, column, stored, derived) examples per partition
EXAMPLE_CHARS: Final = 200  # an example's stored or derived value, cut to its first characters (JSON text)


@dataclass(frozen=True, slots=True)
class ValueCheck:
    """One partition's rows that carry their newest record's lineage but not what it derives."""

    rows: int = 0
    columns: tuple[tuple[str, int], ...] = ()  # (column, rows differing in it)
    span: tuple[int, int] | None = None  # [first, last + 1) offsets of their records: the heal re-reads them
    examples: tuple[tuple[str, str, Any, Any], ...] = ()  # (key, column, stored, derived)

    def detail(self) -> str:
        columns = ", ".join(f"{c} ×{n}" for c, n in self.columns)
        examples = "; ".join(
            f"{k} {c}: stored {json.dumps(a)} vs derived {json.dumps(b)}" for k, c, a, b in self.examples
        )
        return f"{self.rows} rows differ from what their newest record derives ({columns}); e.g. {examples}"


def value_checks(cur: Any, spec: PipelineSpec, stage: sql.Composable) -> dict[TopicPartition, ValueCheck]:
    """:func:`value_checks_sql` run, per partition (reconciliation's (d))."""
    values = [c.name for c in spec.columns if c.name not in spec.key]
    if not values:
        return {}
    cur.execute(value_checks_sql(spec, stage))
    out = {}
    for topic, partition, rows, *rest in cur.fetchall():
        counts, (first, last, examples) = rest[: len(values)], rest[len(values) :]
        out[TopicPartition(topic, partition)] = ValueCheck(
            int(rows),
            tuple((c, int(n)) for c, n in zip(values, counts, strict=True) if n),
            (int(first), int(last) + 1),
            tuple(tuple(e) for e in examples or ()),
        )
    return out


def value_checks_sql(spec: PipelineSpec, stage: sql.Composable) -> sql.Composed:
    """Per (topic, partition): rows differing, the count per value column, the offset span of their
    records, and up to :data:`EXAMPLES` examples ``[key, column, stored, derived]`` (JSON).

    The examples are picked before they are aggregated, and a value longer than :data:`EXAMPLE_CHARS`
    characters of JSON is shown as its cut text: a difference in every row of a wide column would
    otherwise aggregate them all, past PostgreSQL's 1 GB array limit, and the check would fail
    without recording its gap.

    A Debezium column the record left out (listed in the stage's ``_unchanged``) is not compared: the
    record derives no value for it (the commit takes the stored one).
    """
    ident = sql.Identifier
    kinds = {c.name: c.type for c in spec.columns}
    values = [c.name for c in spec.columns if c.name not in spec.key]

    def differs(c: str) -> sql.Composed:
        left_out = (
            sql.SQL(" AND (s.{u} IS NULL OR NOT ({name} = ANY (string_to_array(s.{u}, ','))))").format(
                u=ident(UNCHANGED), name=sql.Literal(c)
            )
            if spec.unchanged_columns
            else sql.SQL("")
        )
        return sql.SQL("({s} IS DISTINCT FROM {t}{left_out})").format(
            s=comparable(sql.SQL("s.{}").format(ident(c)), kinds.get(c)),
            t=comparable(sql.SQL("t.{}").format(ident(c)), kinds.get(c)),
            left_out=left_out,
        )

    same = sql.SQL(" AND ").join(sql.SQL("t.{k} = s.{k}").format(k=ident(k)) for k in [*spec.key, *LINEAGE_ORDER])
    key_text = sql.SQL("concat_ws('|', {})").format(
        sql.SQL(", ").join(sql.SQL("s.{}::text").format(ident(k)) for k in spec.key)
    )
    flags = sql.SQL(", ").join(sql.SQL("{} AS {}").format(differs(c), ident(f"_d{i}")) for i, c in enumerate(values))
    example = sql.SQL("coalesce({})").format(
        sql.SQL(", ").join(
            sql.SQL("CASE WHEN {d} THEN jsonb_build_array({key}, {name}, {stored}, {derived}) END").format(
                d=differs(c),
                key=key_text,
                name=sql.Literal(c),
                stored=_shown(sql.SQL("t.{}").format(ident(c))),
                derived=_shown(sql.SQL("s.{}").format(ident(c))),
            )
            for c in values
        )
    )
    return sql.SQL(
        "WITH d AS (SELECT s._kafka_topic, s._kafka_partition, s._kafka_offset, {flags}, {example} AS _ex "
        "FROM {stage} AS s JOIN {target} AS t ON {same} WHERE s._kind = {row}), "
        "r AS (SELECT *, row_number() OVER (PARTITION BY _kafka_topic, _kafka_partition ORDER BY _ex->>0) AS _n "
        "FROM d WHERE {any}) "
        "SELECT _kafka_topic, _kafka_partition, count(*), {counts}, min(_kafka_offset), max(_kafka_offset), "
        "array_agg(_ex ORDER BY _ex->>0) FILTER (WHERE _n <= {n}) FROM r GROUP BY 1, 2"
    ).format(
        flags=flags,
        example=example,
        stage=stage,
        target=target_identifier(spec),
        same=same,
        row=sql.Literal(ROW),
        any=sql.SQL(" OR ").join(ident(f"_d{i}") for i in range(len(values))),
        counts=sql.SQL(", ").join(
            sql.SQL("count(*) FILTER (WHERE {})").format(ident(f"_d{i}")) for i in range(len(values))
        ),
        n=sql.Literal(EXAMPLES),
    )


def _shown(value: sql.Composable) -> sql.Composed:
    """``value`` as an example shows it: its JSON, or the first :data:`EXAMPLE_CHARS` characters of
    that JSON's text followed by "…" when it is longer."""
    return sql.SQL(
        "CASE WHEN length(to_jsonb({v})::text) > {n} THEN to_jsonb(left(to_jsonb({v})::text, {n}) || '…') "
        "ELSE to_jsonb({v}) END"
    ).format(v=value, n=sql.Literal(EXAMPLE_CHARS))
