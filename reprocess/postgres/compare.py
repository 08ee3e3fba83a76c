"""Derived vs stored: the one formulation of "this row holds other values than its record derives",
which every comparison of the target with what the log says it should hold asks.

- reconciliation's value check (``reprocess.checks.values_differ``): a window's stage (the newest record per
  key of the window, through the backfill's own read, decode and transforms) against the target, on key AND
  lineage, grouped per partition (:func:`differing_rows_sql`);
- the plan's diff (:mod:`reprocess.postgres.diff`): the rows after the commit's own statements against the
  rows before, column by column (:func:`differs`);
- the whole-table audit (issue 57): the stage of the whole retained log against the whole target, on key
  alone, in one group or per key range (:func:`differing_rows_sql` with ``match=spec.key`` and ``group=()``).

A column compares under :func:`~reprocess.postgres.column_sql.comparable` (typed values by value, text
under ``COLLATE "C"``), NULL-safely; a Debezium column the derived record left out (listed in the stage's
``_unchanged``) derives no value and is not compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from psycopg2 import sql

from reprocess.core.ordering import LINEAGE_ORDER
from reprocess.core.spec import PipelineSpec
from reprocess.core.stage_rows import ROW, UNCHANGED
from reprocess.postgres.column_sql import comparable

EXAMPLES: Final = 5  # (key, column, stored, derived) examples per group
EXAMPLE_CHARS: Final = 200  # an example's stored or derived value, cut to its first characters (JSON text)
PARTITION: Final = ("_kafka_topic", "_kafka_partition")  # a window check's groups


def value_columns(spec: PipelineSpec) -> list[str]:
    """The columns compared: every spec column but the key."""
    return [c.name for c in spec.columns if c.name not in spec.key]


def differs(spec: PipelineSpec, column: str, derived: str, stored: str, *, left_out: bool = False) -> sql.Composed:
    """``derived.column`` IS DISTINCT FROM ``stored.column`` (aliases), compared by value; with
    ``left_out``, not where ``derived`` is a stage row whose record left the column out."""
    ident = sql.Identifier
    kind = {c.name: c.type for c in spec.columns}.get(column)
    skip = (
        sql.SQL(" AND ({d}.{u} IS NULL OR NOT ({name} = ANY (string_to_array({d}.{u}, ','))))").format(
            d=ident(derived), u=ident(UNCHANGED), name=sql.Literal(column)
        )
        if left_out and spec.unchanged_columns
        else sql.SQL("")
    )
    return sql.SQL("({d} IS DISTINCT FROM {s}{skip})").format(
        d=comparable(sql.SQL("{}.{}").format(ident(derived), ident(column)), kind),
        s=comparable(sql.SQL("{}.{}").format(ident(stored), ident(column)), kind),
        skip=skip,
    )


def any_differs(spec: PipelineSpec, derived: str, stored: str) -> sql.Composable:
    """Some value column differs (:func:`differs`; FALSE for a spec with none)."""
    columns = [differs(spec, c, derived, stored) for c in value_columns(spec)]
    return sql.SQL("({})").format(sql.SQL(" OR ").join(columns)) if columns else sql.SQL("FALSE")


def differing_rows_sql(
    spec: PipelineSpec,
    stage: sql.Composable,
    stored: sql.Composable,
    *,
    match: Sequence[str] | None = None,
    group: Sequence[str] = PARTITION,
) -> sql.Composed:
    """Per group of the stage's rows (``group``: stage columns; ``()`` for one group): the rows that
    differ from the ``stored`` row they ``match`` (default: key and lineage, the record the row came
    from), the count per value column, the offset span of their records, and up to :data:`EXAMPLES`
    examples ``[key, column, stored, derived]`` (JSON). Stage rows without a matching stored row are
    not this check's (the key check names them missing or stale).

    The examples are picked before they are aggregated, and a value longer than :data:`EXAMPLE_CHARS`
    characters of JSON is shown as its cut text: a difference in every row of a wide column would
    otherwise aggregate them all, past PostgreSQL's 1 GB array limit, and the check would fail
    without recording its gap.
    """
    ident = sql.Identifier
    values = value_columns(spec)
    on = [*spec.key, *LINEAGE_ORDER] if match is None else list(match)
    same = sql.SQL(" AND ").join(sql.SQL("t.{k} = s.{k}").format(k=ident(k)) for k in on)
    key_text = sql.SQL("concat_ws('|', {})").format(
        sql.SQL(", ").join(sql.SQL("s.{}::text").format(ident(k)) for k in spec.key)
    )
    flags = sql.SQL(", ").join(
        sql.SQL("{} AS {}").format(differs(spec, c, "s", "t", left_out=True), ident(f"_d{i}"))
        for i, c in enumerate(values)
    )
    example = sql.SQL("coalesce({})").format(
        sql.SQL(", ").join(
            sql.SQL("CASE WHEN {d} THEN jsonb_build_array({key}, {name}, {stored}, {derived}) END").format(
                d=differs(spec, c, "s", "t", left_out=True),
                key=key_text,
                name=sql.Literal(c),
                stored=_shown(sql.SQL("t.{}").format(ident(c))),
                derived=_shown(sql.SQL("s.{}").format(ident(c))),
            )
            for c in values
        )
    )
    groups = [ident(g) for g in group]
    keep = sql.SQL("").join(sql.SQL("s.{}, ").format(g) for g in groups)
    by = sql.SQL("").join(sql.SQL("{}, ").format(g) for g in groups)
    return sql.SQL(
        "WITH d AS (SELECT {keep}s._kafka_offset, {flags}, {example} AS _ex "
        "FROM {stage} AS s JOIN {stored} AS t ON {same} WHERE s._kind = {row}), "
        "r AS (SELECT *, row_number() OVER ({partition}ORDER BY _ex->>0) AS _n FROM d WHERE {any}) "
        "SELECT {by}count(*), {counts}, min(_kafka_offset), max(_kafka_offset), "
        "array_agg(_ex ORDER BY _ex->>0) FILTER (WHERE _n <= {n}) FROM r{group_by}"
    ).format(
        keep=keep,
        flags=flags,
        example=example,
        stage=stage,
        stored=stored,
        same=same,
        row=sql.Literal(ROW),
        partition=sql.SQL("PARTITION BY {} ").format(sql.SQL(", ").join(groups)) if groups else sql.SQL(""),
        any=sql.SQL(" OR ").join(ident(f"_d{i}") for i in range(len(values))),
        by=by,
        counts=sql.SQL(", ").join(
            sql.SQL("count(*) FILTER (WHERE {})").format(ident(f"_d{i}")) for i in range(len(values))
        ),
        n=sql.Literal(EXAMPLES),
        group_by=sql.SQL(" GROUP BY {}").format(sql.SQL(", ").join(groups)) if groups else sql.SQL(""),
    )


def _shown(value: sql.Composable) -> sql.Composed:
    """``value`` as an example shows it: its JSON, or the first :data:`EXAMPLE_CHARS` characters of
    that JSON's text followed by "…" when it is longer."""
    return sql.SQL(
        "CASE WHEN length(to_jsonb({v})::text) > {n} THEN to_jsonb(left(to_jsonb({v})::text, {n}) || '…') "
        "ELSE to_jsonb({v}) END"
    ).format(v=value, n=sql.Literal(EXAMPLE_CHARS))
